"""The regression check: this run's error figures against a baseline run's (the base branch's
JSON report), case by case, with what changed in the environment between the two.

A case's error is its outputs' max abs errors. An output regressed when its max abs grew by at
least the model's `regression.factor` and beyond `regression.floor` (by default FLOOR_ULPS
ulps of the output's dtype at the output's scale, its largest |expected|, so float noise never
counts). A passing case with a regressed output fails, with the growth in its message.
Everything that could not be compared is said: a case new since the baseline, one that ended
in an error on either side, an output missing, reshaped or retyped, a changed tolerance.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import field
from typing import Any, Literal

from onnx_parity.compare.metrics import epsilon
from onnx_parity.frozen import frozen
from onnx_parity.results import (
    BaselineRun,
    CaseResult,
    CaseTrend,
    OutputComparison,
    OutputTrend,
    PreflightRecord,
    RunReport,
    SettingChange,
    Trend,
)
from onnx_parity.spec.model import DEFAULT_FLOOR_ULPS as FLOOR_ULPS
from onnx_parity.spec.model import Regression
from onnx_parity.wording import (
    fmt_measured,
    fmt_ratio,
    fmt_setting,
    fmt_threshold,
    tolerance_text,
)

TREND_RATIO = 2.0  # a change smaller than this either way reads as "="
_UNNAMED_FLOAT = "float32"  # an output whose float dtype no library names reads as float32


@frozen
class Baseline:
    """A baseline report as read, or why it could not be (`problem`)."""

    path: str
    report: RunReport | None = None
    problem: str = ""
    cases: Mapping[str, CaseResult] = field(default_factory=dict)

    @property
    def usable(self) -> bool:
        return not self.problem

    def for_cases(self, ids: Iterable[str]) -> Baseline:
        """The part of the baseline a worker needs to judge these cases."""
        return Baseline(self.path, problem=self.problem,
                        cases={i: self.cases[i] for i in ids if i in self.cases})


def trend_of(result: CaseResult, regression: Regression | None,
             baseline: Baseline) -> tuple[CaseTrend | None, str]:
    """The case's comparison against the baseline, and the growth that fails it when it passed
    ("" for none): an output regressed. None for a baseline that could not be read. The status
    itself is the verdict chain's (compare/chain.py)."""
    old = baseline.cases.get(result.id)
    if not baseline.usable:
        return None, ""
    if old is None:
        return CaseTrend("new"), ""
    settings = tuple(setting_changes(result, old))
    unusable = _not_comparable(result, old)
    if unusable:
        return CaseTrend("not compared", reason=unusable, before=old.status,
                         settings=settings), ""
    previous = {output.name: output for output in old.outputs}
    figures: dict[str, OutputTrend] = {}
    notes: list[str] = []
    for output in result.outputs:
        before = previous.get(output.name)
        if before is None:
            notes.append(f"{output.name}: not in the baseline")
            continue
        problem = _output_problem(output, before)
        if problem:
            notes.append(f"{output.name}: {problem}; not compared")
            continue
        figures[output.name] = _figures(output, before, regression)
        if (before.atol, before.rtol) != (output.atol, output.rtol):
            notes.append(f"{output.name}: tolerance changed since the baseline "
                         f"({_tolerance(before)} → {_tolerance(output)}); the errors are "
                         "compared all the same")
    notes.extend(f"{name}: in the baseline, not in this run" for name in previous
                 if name not in {output.name for output in result.outputs})
    record = dataclasses.replace(_case_record(figures, regression, notes), before=old.status,
                                 settings=settings)
    regressed = [o for o in result.outputs if o.name in figures and figures[o.name].regressed]
    named = len(result.outputs) > 1
    return record, "; ".join(growth_text(o, figures[o.name], named) for o in regressed)


def setting_changes(result: CaseResult, old: CaseResult) -> list[SettingChange]:
    """The case's effective settings that differ from the baseline's: each output's atol, rtol
    and metric thresholds (which way each moved), then the case's own settings (its tolerance
    where no output's could be compared, precision, target, dataset). A baseline written
    before settings were recorded has none to differ."""
    found: list[SettingChange] = []
    previous = {output.name: output for output in old.outputs}
    named = len(result.outputs) > 1
    for output in result.outputs:
        before = previous.get(output.name)
        if before is not None:
            found.extend(_output_changes(before, output, output.name if named else None))
    for key, after in result.settings.items():
        was = old.settings.get(key)
        if was is None or was == after or (key == "tolerance" and previous and result.outputs):
            continue
        found.append(SettingChange(key, was, after))
    return found


def _output_changes(before: OutputComparison, after: OutputComparison,
                    name: str | None) -> list[SettingChange]:
    found = []
    for key, old, new in (("atol", before.atol, after.atol), ("rtol", before.rtol, after.rtol)):
        if old != new and not (after.metric_only or before.metric_only):
            found.append(SettingChange(key, fmt_setting(old), fmt_setting(new), name,
                                       "tightened" if new < old else "loosened"))
    for key in sorted({*before.thresholds, *after.thresholds}):
        old_t, new_t = before.thresholds.get(key), after.thresholds.get(key)
        if old_t == new_t:
            continue
        if old_t is None or new_t is None:
            found.append(SettingChange(key, _threshold(key, old_t), _threshold(key, new_t),
                                       name))
        else:
            found.append(SettingChange(key, fmt_threshold(key, old_t),
                                       fmt_threshold(key, new_t), name,
                                       "tightened" if new_t > old_t else "loosened"))
    return found


def _threshold(name: str, value: float | None) -> str:
    return "not set" if value is None else fmt_threshold(name, value)


def growth_text(output: OutputComparison, figures: OutputTrend, named: bool) -> str:
    """`regression: max abs 3.0e-8 → 3.0e-5 (×1000) since the baseline (still within atol
    1e-4 + rtol 1e-3·|e|)`"""
    who = f"{output.name}: " if named else ""
    return (f"regression: {who}max abs {fmt_measured(figures.max_abs)} → "
            f"{fmt_measured(output.max_abs)} ({fmt_ratio(figures.ratio)}) since the "
            f"baseline (still within {tolerance_text(output)})")


def floor_of(output: OutputComparison, regression: Regression | None) -> float:
    """The error below which growth never counts: the spec's floor, or FLOOR_ULPS ulps of the
    output's dtype at its scale (0 for integers, whose errors are exact)."""
    if regression is not None and regression.floor is not None:
        return regression.floor
    if output.scale is None:
        return 0.0
    eps = epsilon(output.expected_dtype or "") or epsilon(_UNNAMED_FLOAT) or 0.0
    return FLOOR_ULPS * eps * max(output.scale, math.ulp(0.0))


def _figures(output: OutputComparison, before: OutputComparison,
             regression: Regression | None) -> OutputTrend:
    old, new = before.max_abs, output.max_abs
    ratio = new / old if old > 0 else (math.inf if new > 0 else 1.0)
    floor = floor_of(output, regression)
    trend: Trend = "same"
    if new > floor and ratio >= TREND_RATIO:
        trend = "up"
    elif old > floor and ratio <= 1 / TREND_RATIO:
        trend = "down"
    regressed = (regression is not None and new > floor
                 and (old == 0 or new >= regression.factor * old))
    return OutputTrend(max_abs=old, required_atol=before.required_atol, ratio=ratio,
                       floor=floor, trend=trend, regressed=regressed,
                       metrics=dict(before.metrics))


def _case_record(figures: Mapping[str, OutputTrend], regression: Regression | None,
                 notes: Sequence[str]) -> CaseTrend:
    """The case's line of the comparison: the output whose error grew most speaks for it."""
    check: Literal["on", "off"] = "on" if regression is not None else "off"
    factor = regression.factor if regression is not None else None
    if not figures:
        return CaseTrend("not compared", reason="no output could be compared", check=check,
                         factor=factor, notes=tuple(notes))
    name = max(figures, key=lambda n: (figures[n].regressed, figures[n].ratio))
    trends = {f.trend for f in figures.values()}
    return CaseTrend(
        "compared", check=check, factor=factor, output=name, max_abs=figures[name].max_abs,
        required_atol=figures[name].required_atol, ratio=figures[name].ratio,
        trend="up" if "up" in trends else ("down" if trends == {"down"} else "same"),
        regressed=any(f.regressed for f in figures.values()), outputs=dict(figures),
        notes=tuple(notes))


def _not_comparable(result: CaseResult, old: CaseResult) -> str:
    for side, case in (("this run", result), ("the baseline", old)):
        if case.status in ("error", "skipped") or not case.outputs:
            return f"the case ended {case.status} in {side}"
    return ""


def _output_problem(output: OutputComparison, before: OutputComparison) -> str:
    if before.expected_dtype != output.expected_dtype:
        return f"dtype {before.expected_dtype} in the baseline, {output.expected_dtype} now"
    if before.expected_shape != output.expected_shape:
        return "shape changed since the baseline"
    if before.required_atol is None or output.required_atol is None:
        return "NaN/Inf placement, shape or dtype differed on one side"
    return ""


def _tolerance(output: OutputComparison) -> str:
    return f"atol {fmt_setting(output.atol)}, rtol {fmt_setting(output.rtol)}"


# -- the run ------------------------------------------------------------------------------------

def run_record(baseline: Baseline, environment: Mapping[str, Any],
               preflight: PreflightRecord | None, gone: Iterable[str]) -> BaselineRun:
    """The run's side of the comparison, for RunReport.baseline."""
    if not baseline.usable:
        return BaselineRun(baseline.path, done=False, problem=baseline.problem)
    assert baseline.report is not None
    return BaselineRun(
        baseline.path, done=True, spec=baseline.report.spec_path,
        environment=tuple(environment_changes(
            baseline.report.environment, baseline.report.preflight, environment, preflight)),
        gone=tuple(sorted(gone)))


def gone_cases(baseline: Baseline, planned: Iterable[str], selected: Any) -> list[str]:
    """The baseline's cases that this run would have checked (`selected(case)`) but did not
    plan: removed from the spec, renamed, or no longer produced."""
    ids = set(planned)
    return [case_id for case_id, case in baseline.cases.items()
            if case_id not in ids and selected(case)]


def environment_changes(old: Mapping[str, Any], old_preflight: PreflightRecord | None,
                        new: Mapping[str, Any], new_preflight: PreflightRecord | None,
                        ) -> list[tuple[str, str | None, str | None]]:
    """(what, before, after) for every version that differs between two runs' environments:
    onnx-parity, Python, each package, the GPUs and the driver (from the preflight)."""
    changes = []
    for key in ("onnx_parity", "python"):
        if old.get(key) != new.get(key):
            changes.append((key.replace("_", "-"), _text(old.get(key)), _text(new.get(key))))
    before, after = _packages(old), _packages(new)
    for name in sorted(set(before) | set(after)):
        if before.get(name) != after.get(name):
            changes.append((name, before.get(name), after.get(name)))
    for what, read in (("GPU", _gpus), ("NVIDIA driver", _driver)):
        if read(old_preflight) != read(new_preflight):
            changes.append((what, read(old_preflight), read(new_preflight)))
    return changes


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _packages(environment: Mapping[str, Any]) -> dict[str, str]:
    packages = environment.get("packages")
    return ({str(k): str(v) for k, v in packages.items()} if isinstance(packages, Mapping)
            else {})


def _gpus(preflight: PreflightRecord | None) -> str | None:
    gpus = preflight.facts.driver.gpus if preflight is not None else ()
    return ", ".join(gpu.name for gpu in gpus) or None


def _driver(preflight: PreflightRecord | None) -> str | None:
    return preflight.facts.driver.version if preflight is not None else None
