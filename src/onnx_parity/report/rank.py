"""Which failing cases the bounded reports (annotations, the pull-request comment) show first:
errors before failures, a real difference before float noise, then the furthest from passing,
one per model before a model's second."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from onnx_parity.metrics.registry import named
from onnx_parity.results import CaseResult, OutputComparison
from onnx_parity.spec.model import DEFAULT_FLOOR_ULPS

# The machine epsilon of the float dtypes an output holds, by name (compare/metrics.py's
# `epsilon` knows every one, but needs numpy, which publishing a report never imports);
# an output whose dtype is not here is never called float noise.
_EPSILON = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 2.0 ** -23,
            "float64": 2.0 ** -52}

FAILING = ("error", "failed")
_KIND_RANK = {"error": 2, "failed": 1}


def output_excess(output: OutputComparison) -> float:
    """How far a failing output is from passing, as a factor (1: at its tolerance): the atol it
    needs over the atol set, or for a metric that fell short, how much further from a perfect
    match it is than its threshold allows (each metric's `units`: SQNR's shortfall in dB as a
    power ratio).
    Infinite when no tolerance could pass it (NaN/Inf placement, shape, dtype)."""
    if output.passed:
        return 0.0
    excess = 0.0
    for name in output.failed:
        threshold = output.thresholds.get(name)
        value = output.metrics.get(name)
        if threshold is None or value is None:
            continue
        excess = max(excess, _metric_excess(name, value, threshold))
    if output.verdict_kind == "metric":
        return max(excess, 1.0)
    needed = output.required_atol
    if needed is None or math.isnan(needed):
        return math.inf
    if output.atol > 0:
        return max(excess, needed / output.atol)
    return max(excess, math.inf if needed > 0 else 0.0)


def _metric_excess(name: str, value: float, threshold: float) -> float:
    """A failing metric's excess: its units (1 at its threshold), at least 1; infinite for a
    NaN."""
    metric = named(name)
    if math.isnan(value):
        return math.inf
    return max(metric.units(value, threshold), 1.0) if metric is not None else 1.0


def float_noise(output: OutputComparison) -> bool:
    """Whether a failing output's error is float noise: elements out of tolerance by an atol
    no larger than the baseline's noise floor (compare/baseline.py's: DEFAULT_FLOOR_ULPS ulps of
    its dtype at its scale, its largest |expected|), so that a looser atol is the fix, not the
    model."""
    needed, eps = output.required_atol, _EPSILON.get(output.expected_dtype or "")
    if (output.passed or output.verdict_kind != "elements" or needed is None or eps is None
            or output.scale is None):
        return False
    return math.isfinite(needed) and needed <= DEFAULT_FLOOR_ULPS * eps * output.scale


def noise_only(case: CaseResult) -> bool:
    """Whether every failing output of a failed case is float noise (and nothing else failed
    it: a message of its own, a rollout's own judgement, float16's range)."""
    failing = [o for o in case.outputs if not o.passed]
    return (case.status == "failed" and bool(failing) and all(map(float_noise, failing))
            and not _other_failure(case))


def _other_failure(case: CaseResult) -> bool:
    tokens, float16 = case.details.tokens, case.details.float16
    return bool((tokens is not None and tokens.failed)
                or (float16 is not None and float16.failing is not None))


def case_excess(case: CaseResult) -> float:
    """The case's worst output's excess (0 for a case with no failing output)."""
    return max((output_excess(o) for o in case.outputs if not o.passed), default=0.0)


def severity(case: CaseResult) -> tuple[int, int, float]:
    """Sort key, larger is worse: an error before a failure, a real difference before float
    noise (however many of its tolerances the noise is: an atol of 0 makes any noise
    unbounded), then the excess."""
    return (_KIND_RANK.get(case.status, 0), 0 if noise_only(case) else 1, case_excess(case))


def worst_first(cases: Iterable[CaseResult]) -> list[CaseResult]:
    """The failing cases, worst first; ties keep the report's order."""
    return sorted((c for c in cases if c.status in FAILING), key=severity, reverse=True)


def spread_over_models(cases: Sequence[CaseResult]) -> list[CaseResult]:
    """Cases already worst first, reordered so that each model's worst comes before any
    model's second (then each model's second before any third, ...): the first few shown
    name as many models as they can."""
    seen: dict[str, int] = {}
    rounds: list[tuple[int, int, CaseResult]] = []
    for index, case in enumerate(cases):
        turn = seen.get(case.model, 0)
        seen[case.model] = turn + 1
        rounds.append((turn, index, case))
    return [case for _, _, case in sorted(rounds, key=lambda r: (r[0], r[1]))]
