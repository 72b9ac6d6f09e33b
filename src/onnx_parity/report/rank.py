"""Which failing cases the bounded reports (annotations, the pull-request comment) show first:
errors before failures, then the furthest from passing, one per model before a model's second."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from onnx_parity.results import CaseResult, OutputComparison

FAILING = ("error", "failed")
_KIND_RANK = {"error": 2, "failed": 1}


def output_excess(output: OutputComparison) -> float:
    """How far a failing output is from passing, as a factor (1: at its tolerance): the atol it
    needs over the atol set, or for a metric that fell short, how much further from a perfect
    match it is than its threshold allows (SQNR: its shortfall in dB as a power ratio).
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
    if math.isnan(value):
        return math.inf
    if name == "sqnr_db":
        return float(10.0 ** ((threshold - value) / 10.0)) if value < threshold else 1.0
    if threshold >= 1.0:  # nothing short of a perfect match passes: any miss is unbounded
        return math.inf if value < 1.0 else 1.0
    return (1.0 - value) / (1.0 - threshold)


def case_excess(case: CaseResult) -> float:
    """The case's worst output's excess (0 for a case with no failing output)."""
    return max((output_excess(o) for o in case.outputs if not o.passed), default=0.0)


def severity(case: CaseResult) -> tuple[int, float]:
    """Sort key, larger is worse: an error before a failure, then the excess."""
    return (_KIND_RANK.get(case.status, 0), case_excess(case))


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
