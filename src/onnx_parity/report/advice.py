"""What the pull-request comment tells a reviewer about a failing case: what failed (output,
step, token), the proven cause or where the drift starts, the next step, and the settings of
the case that changed since the baseline, in words. Reads a CaseResult and nothing else."""

from __future__ import annotations

import math

from onnx_parity.escape import one_line
from onnx_parity.report.describe import (
    case_reason,
    cause_text,
    drift_headline,
    failing_outputs,
    fmt_measured,
    fmt_needed,
    tokens_text,
)
from onnx_parity.report.rank import noise_only
from onnx_parity.results import CaseResult, SettingChange
from onnx_parity.wording import fmt_ratio, metric_words

SETTING_LIMIT = 160  # characters of a non-tolerance setting (a target's options), each side


def what_failed(case: CaseResult) -> str:
    """The case's reason (its worst output, and a rollout's step), with a decoder's diverging
    token where the reason does not say it."""
    reason = case_reason(case)
    tokens = tokens_text(case)
    return f"{reason}; {tokens}" if tokens and "tokens diverge" not in reason else reason


def why(case: CaseResult) -> str:
    """The cause a second run proved, else where the drift starts; "" when neither is known."""
    cause = cause_text(case)
    if cause:
        return f"cause (proven): {cause}"
    where = drift_headline(case)
    return f"where: {where}" if where else ""


def _where(case: CaseResult, spec: str) -> str:
    return f"{spec} line {case.line}" if case.line else spec


def next_step(case: CaseResult, spec: str) -> str:
    """What to do: the fix a proven cause names, the atol that passes float noise, or where to
    look for a real difference; each with the spec line of the model's entry."""
    where = _where(case, spec)
    if case.status == "error":
        return f"fix what stopped it at {case.stage or 'run'}; the model's entry is {where}"
    if cause_text(case):
        return f"fix the proven cause as it says; the model's entry is {where}"
    failing = failing_outputs(case)
    if not failing and case.baseline is not None and case.baseline.regressed:
        return (f"the error grew within its tolerance since the baseline: look at what this "
                f"pull request changed in the model or its export; its entry is {where}")
    if noise_only(case):
        noise = fmt_needed(max(o.required_atol or 0.0 for o in failing))
        if case.tolerance_line is not None:
            return (f"float noise: atol {noise} passes it; set it in the model's tolerance at "
                    f"{spec} line {case.tolerance_line}")
        return (f"float noise: atol {noise} passes it; add tolerance: {{atol: {noise}}} to the "
                f"model's entry at {where}")
    worst = failing[0] if failing else None
    if worst is not None and worst.verdict_kind == "metric":
        names = " and ".join(metric_words(name) for name in worst.failed) or "its metrics"
        at = (f"the model's tolerance at {spec} line {case.tolerance_line}"
              if case.tolerance_line is not None else f"the model's entry at {where}")
        return (f"a real loss of quality: fix it where it starts, or accept it with a lower "
                f"{names} threshold in {at}")
    needed = worst.required_atol if worst is not None else None
    rollout = case.details.rollout
    if rollout is not None and rollout.growth is not None and rollout.growth > 1:
        return (f"the error compounds over the rollout ({fmt_ratio(rollout.growth)} per step "
                f"from step {rollout.growth_from or 1}): fix it at its source; a looser atol "
                f"only moves the failing step further out; the model's entry is {where}")
    if needed is not None and math.isfinite(needed) and needed > 0:
        return (f"a real difference, not float noise: fix it where the drift starts "
                f"(atol {fmt_needed(needed)} would only hide it); the model's entry is "
                f"{where}")
    return f"fix the difference the reason names; the model's entry is {where}"


def settings_text(case: CaseResult) -> str:
    """The case's settings that changed in the pull request, and whether the model's error
    changed too: "tolerance tightened in this pull request: atol 1e-4 → 1e-12; the model's
    error is unchanged (max abs 3.1e-8 → 3.0e-8)". "" when no setting changed."""
    trend = case.baseline
    if trend is None or not trend.settings:
        return ""
    said = [_tolerance_words(trend.settings, direction)
            for direction in ("tightened", "loosened")]
    said.append(_tolerance_words(trend.settings, "changed"))
    said += [f"{change.setting} changed in this pull request: "
             f"{one_line(change.before, SETTING_LIMIT)} → {one_line(change.after, SETTING_LIMIT)}"
             for change in trend.settings if not _tolerance(change)]
    model = _model_words(case)
    return "; ".join(part for part in [*said, model] if part)


def _tolerance(change: SettingChange) -> bool:
    return change.setting != "precision" and change.setting not in ("target", "dataset")


def _tolerance_words(changes: tuple[SettingChange, ...], direction: str) -> str:
    found = [c for c in changes if _tolerance(c) and c.direction == direction]
    if not found:
        return ""
    parts = ", ".join(" ".join(w for w in (c.output, _name(c.setting)) if w)
                      + f"{' ' if c.output or _name(c.setting) else ''}{c.before} → {c.after}"
                      for c in found)
    return f"tolerance {direction} in this pull request: {parts}"


def _name(setting: str) -> str:
    """atol, rtol, a metric's words; "" for the case's whole tolerance (its text says it)."""
    if setting == "tolerance":
        return ""
    return setting if setting in ("atol", "rtol") else metric_words(setting)


def _model_words(case: CaseResult) -> str:
    """Whether the model's own error moved since the baseline, beside the settings."""
    trend = case.baseline
    if trend is None or trend.status != "compared" or trend.ratio is None:
        return ""
    now = next((o.max_abs for o in case.outputs if o.name == trend.output), None)
    if trend.max_abs is None or now is None:
        return ""
    figures = f"max abs {fmt_measured(trend.max_abs)} → {fmt_measured(now)}"
    if trend.trend == "same":
        return f"the model's error is unchanged ({figures}): the setting made this verdict"
    return f"and the model's error changed too ({figures}, {fmt_ratio(trend.ratio)})"
