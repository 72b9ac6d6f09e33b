"""Rollouts judged and said: every step's comparisons → the first step that fails, how the
error grew up to it (a geometric mean of step-to-step ratios above the noise floor), a
sparkline of the error per step, and the sentences that say it. Pure numpy."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

from onnx_parity.compare.baseline import floor_of
from onnx_parity.compare.outputs import verdict
from onnx_parity.compare.sentences import outputs_sentence
from onnx_parity.escape import one_line
from onnx_parity.findings import RolloutRecord, RolloutStep
from onnx_parity.results import OutputComparison
from onnx_parity.wording import counted, fmt_measured

BARS = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 40  # a longer rollout's steps are drawn in buckets, each its largest error
STEADY = 1.05  # growth per step within this factor either way is "steady"


def judge_rollout(steps: Sequence[Sequence[OutputComparison]],
                  feedback: Mapping[str, str]) -> RolloutRecord:
    """The rollout's record from its comparisons, `steps[k]` being step k+1's outputs."""
    per_step = tuple(
        RolloutStep(step=k + 1, passed=all(c.passed for c in step),
                    max_abs={c.name: c.max_abs for c in step},
                    failing=tuple(c.name for c in step if not c.passed))
        for k, step in enumerate(steps))
    failing = next((k for k, step in enumerate(steps) if verdict(step) == "failed"), None)
    error = next((k for k, step in enumerate(steps) if verdict(step) == "error"), None)
    judged: int | None
    output: str | None
    if failing is not None:
        judged = failing
        output = max((c for c in steps[failing] if not c.passed and not c.powerless),
                     key=nearness).name
    elif error is not None:
        judged = error
        output = next(c.name for c in steps[error] if not c.passed)
    else:
        judged, output = nearest_step(steps)
    record = RolloutRecord(steps=len(steps), feedback=dict(feedback), per_step=per_step,
                           first_failing=None if failing is None else failing + 1,
                           judged=None if judged is None else judged + 1, output=output)
    if judged is None or output is None:
        return record
    at = next(c for c in steps[judged] if c.name == output)
    floor = floor_of(at, None)
    series = series_of(record, output)[:judged + 1]
    start = judged
    while start > 0 and series[start - 1] > floor and math.isfinite(series[start - 1]):
        start -= 1
    growth = None
    if start < judged and series[judged] > floor and math.isfinite(series[judged]):
        growth = (series[judged] / series[start]) ** (1.0 / (judged - start))
    return dataclasses.replace(record, growth=growth,
                               growth_from=start + 1 if growth is not None else None,
                               floor=floor)


def nearness(c: OutputComparison) -> float:
    """How near its tolerance an output came: max abs over atol (max abs where atol is 0)."""
    return c.max_abs / c.atol if c.atol > 0 else c.max_abs


def nearest_step(steps: Sequence[Sequence[OutputComparison]]) -> tuple[int | None, str | None]:
    best: tuple[float, int, str] | None = None
    for k, step in enumerate(steps):
        for c in step:
            score = nearness(c)
            if best is None or score > best[0]:
                best = (score, k, c.name)
    return (None, None) if best is None else (best[1], best[2])


def series_of(record: RolloutRecord, output: str) -> list[float]:
    """The output's max abs at each step (NaN where it was not measured)."""
    return [s.max_abs.get(output, math.nan) for s in record.per_step]


def sparkline(values: Sequence[float]) -> str:
    """Values as bars from ▁ (0) to █ (the largest), at most SPARK_WIDTH of them; an infinite
    or NaN error is the tallest bar."""
    if not values:
        return ""
    per = math.ceil(len(values) / SPARK_WIDTH)
    buckets = [[_drawn(v) for v in values[i:i + per]] for i in range(0, len(values), per)]
    heights = [max(b) for b in buckets]
    top = max((h for h in heights if math.isfinite(h)), default=0.0)
    return "".join(BARS[-1] if not math.isfinite(h) else BARS[0] if top <= 0 else
                   BARS[min(len(BARS) - 1, max(0, math.ceil(h / top * len(BARS)) - 1))]
                   for h in heights)


def _drawn(value: float) -> float:
    return math.inf if not math.isfinite(value) else max(value, 0.0)


def growth_phrase(record: RolloutRecord) -> str:
    """How the followed output's error came to the judged step: "h grew ×2.1 per step from
    step 3" (the geometric mean of the ratios between consecutive steps above the noise
    floor), or why no rate can be given."""
    name, judged = one_line(record.output or "?"), record.judged or 1
    if record.growth is None or record.growth_from is None:
        if judged == 1:
            return "at the first step, on the dataset's inputs, before anything was fed back"
        before, at = series_of(record, record.output or "")[judged - 2:judged]
        if not math.isfinite(at) and math.isfinite(before) and before > (record.floor or 0.0):
            return (f"{name} went from max abs {fmt_measured(before)} at step {judged - 1} to "
                    f"{fmt_measured(at)} at step {judged}")
        if not before <= (record.floor or 0.0):
            return f"{name} max abs was {fmt_measured(before)} at step {judged - 1}"
        return f"{name} was at float noise (≤ {fmt_measured(record.floor)}) at step {judged - 1}"
    rate, start = record.growth, record.growth_from
    if rate >= STEADY:
        return f"{name} grew ×{_rate(rate)} per step from step {start}"
    if rate <= 1 / STEADY:
        return f"{name} shrank ÷{_rate(1 / rate)} per step from step {start}"
    return f"{name} steady from step {start} (×{rate:.2f} per step)"


def _rate(x: float) -> str:
    return f"{x:.1f}" if x < 10 else f"{x:.0f}"


def rollout_message(record: RolloutRecord, judged: Sequence[OutputComparison]) -> str:
    """The case's message: the judged step's sentence, where the rollout did not pass, with
    how the error grew to it; else the all-clear, with the error per step."""
    steps = counted(record.steps, "step")
    series = sparkline(series_of(record, record.output)) if record.output else ""
    if record.first_failing is not None:
        return (f"step {record.first_failing} of {record.steps}: "
                f"{outputs_sentence(judged)}; {growth_phrase(record)}; "
                f"max abs per step {series}")
    if record.judged is not None and not all(c.passed for c in judged):
        return f"step {record.judged} of {record.steps}: {outputs_sentence(judged)}"
    said = outputs_sentence(judged).replace(" within tolerance", "")
    if record.output is None:
        return f"{said} within tolerance at all {steps}"
    largest = max(series_of(record, record.output))
    return (f"{said} within tolerance at all {steps}; {one_line(record.output)} max abs per "
            f"step {series}, largest {fmt_measured(largest)} at step {record.judged}")
