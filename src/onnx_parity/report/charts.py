"""The job summary's Mermaid charts (`xychart-beta`, which GitHub renders): per model, each
case's headroom as a bar, log10 of its worst output's required atol over its atol, with a
line at 0 (at the tolerance; above it fails); with a baseline, each case's error trend, log10
of its max abs error over the baseline's; for a rollout, its error per step over the atol of the
output it follows. Ranked worst first and cut to MAX_BARS per chart and MAX_CHARTS charts, with
a line that says what was left out; labels are reduced to characters no Mermaid or Markdown
reading can take for syntax."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from onnx_parity.escape import markdown_text
from onnx_parity.report.describe import models_in_order
from onnx_parity.results import CaseResult, RunReport

MAX_BARS = 30  # cases per chart, worst first
MAX_CHARTS = 20  # charts per summary
MAX_ROLLOUTS = 3  # rollout charts per model, the worst first
MAX_STEPS = 60  # steps a rollout chart draws, the first
CLAMP = 8.0  # decades either way: an exact output (required atol 0) draws at -CLAMP
LABEL = 40  # characters of a case's label
TITLE = 100  # characters of a chart's title
_UNSAFE = re.compile(r"[^A-Za-z0-9 ._+=/()-]")


def label(text: str, limit: int = LABEL) -> str:
    """A quoted Mermaid string that is only text: quotes, backticks, brackets, `%`, `<`, `>`,
    `#`, `;`, `:`, commas and line ends become `_`, so a model's name can neither end the
    string, the code block nor the diagram."""
    safe = _UNSAFE.sub("_", text)[:limit]
    return f'"{safe}"'


def _decades(ratio: float) -> float:
    if ratio <= 0:
        return -CLAMP
    return round(max(-CLAMP, min(CLAMP, math.log10(ratio))), 2)


def headroom(case: CaseResult) -> float | None:
    """log10(required atol / atol) of the case's worst output; None where none has both."""
    found = [o.required_atol / o.atol for o in case.outputs
             if o.required_atol is not None and o.atol > 0 and math.isfinite(o.required_atol)]
    return _decades(max(found)) if found else None


def trend(case: CaseResult) -> float | None:
    """log10 of the case's error over the baseline's: its CaseTrend's ratio."""
    if case.baseline is None or case.baseline.status != "compared" or case.baseline.ratio is None:
        return None
    return _decades(case.baseline.ratio) if math.isfinite(case.baseline.ratio) else CLAMP


def per_step(case: CaseResult) -> list[float] | None:
    """log10(max abs / atol) of the output a rollout follows, at each step; None without a
    rollout, or where that output has no atol."""
    rollout = case.details.rollout
    if rollout is None or rollout.output is None or not rollout.per_step:
        return None
    atol = next((o.atol for o in case.outputs if o.name == rollout.output), 0.0)
    if not atol > 0:
        return None
    found = [s.max_abs.get(rollout.output) for s in rollout.per_step]
    return [CLAMP if not math.isfinite(v) else _decades(v / atol)
            for v in found if v is not None]


def _chart(title: str, axis: str, points: Sequence[tuple[str, float]]) -> str:
    """A bar chart with the line at 0; `label` makes the title, the names and the axis safe."""
    values = [v for _, v in points]
    low, high = math.floor(min(0.0, *values)) - 1, math.ceil(max(0.0, *values)) + 1
    data = f"    bar [{', '.join(f'{v:g}' for v in values)}]\n"
    zero = f"    line [{', '.join('0' for _ in values)}]\n"
    return ("```mermaid\nxychart-beta\n"
            f"    title {label(title, TITLE)}\n"
            f"    x-axis [{', '.join(label(name) for name, _ in points)}]\n"
            f"    y-axis {label(axis)} {low} --> {high}\n" + data + zero + "```\n")


def _rollout_charts(model: str, cases: Sequence[CaseResult]) -> list[tuple[str, str]]:
    """The model's rollouts with the largest error, each its error per step as a bar."""
    found = [(c, steps) for c in cases for steps in [per_step(c)] if steps]
    found.sort(key=lambda item: -max(item[1]))
    charts = []
    for case, steps in found[:MAX_ROLLOUTS]:
        name = case.details.rollout.output if case.details.rollout else ""
        title = f"{case.id[:LABEL]} - {name} per step - above 0 fails"
        points = [(str(step), v) for step, v in enumerate(steps[:MAX_STEPS], start=1)]
        more = (f"{len(steps) - MAX_STEPS} more steps of {markdown_text(case.id)} not drawn "
                f"(the chart shows the first {MAX_STEPS}).\n" if len(steps) > MAX_STEPS else "")
        charts.append((_chart(title, "log10(max abs / atol)", points), more))
    return charts


def _model_charts(model: str, cases: Sequence[CaseResult]) -> list[tuple[str, str]]:
    """This model's charts, each with a line saying what it left out ("" for nothing)."""
    charts = []
    for figure, title, axis in (
            (headroom, "headroom per case - up is worse - above 0 fails",
             "log10(required atol / atol)"),
            (trend, "error since the baseline - up is grown", "log10(max abs / baseline)")):
        points = [(c.id[len(c.model):].strip("[]") or c.id, v) for c in cases
                  for v in [figure(c)] if v is not None]
        if not points:
            continue
        points.sort(key=lambda p: -p[1])
        title = f"{model[:LABEL]} - {title}"
        left_out = len(points) - MAX_BARS
        more = (f"{left_out} more cases of {markdown_text(model)} not drawn (the chart shows the "
                f"worst {MAX_BARS}).\n" if left_out > 0 else "")
        charts.append((_chart(title, axis, points[:MAX_BARS]), more))
    return charts + _rollout_charts(model, cases)


def charts_section(report: RunReport) -> str:
    """The charts, models in the report's order, each chart worst case first."""
    blocks: list[str] = []
    charts_left = 0
    for model, cases in models_in_order(report).items():
        for chart, more in _model_charts(model, cases):
            if len(blocks) >= MAX_CHARTS:
                charts_left += 1
                continue
            blocks.append(chart + more)
    if not blocks:
        return ""
    more = f"\n{charts_left} more charts not drawn.\n" if charts_left else ""
    return ("<details><summary>Charts: headroom per case</summary>\n\n"
            "Each bar is a case's worst output: log10 of the atol it would have needed over its "
            "atol, so 0 (the line) is at the tolerance, below it passes by that many decades "
            "and above it fails; an exact output draws at "
            f"-{CLAMP:g}. A rollout's chart has a bar per step: the error of the output it "
            "follows over its atol, on the same scale.\n\n"
            + "\n".join(blocks) + more + "\n</details>\n\n")
