"""The job summary's Mermaid charts (`xychart-beta`, which GitHub renders): one chart for the
run, each failing or near-failing case a bar from 0 in units of its own tolerance with a line
at 1 (the tolerance; above it fails); with a baseline, each case's error trend, log10 of its
max abs error over the baseline's; and a chart per failing rollout, its error per step in units
of the atol of the output it follows. Bars past CAP are drawn at CAP with their figure in their
label. Ranked worst first and cut to MAX_BARS per chart and MAX_ROLLOUTS rollouts, with a line
that says what was left out; labels are reduced to characters no Mermaid or Markdown reading
can take for syntax."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from onnx_parity.escape import markdown_text, one_line
from onnx_parity.frozen import frozen
from onnx_parity.metrics.registry import named
from onnx_parity.report.rank import severity
from onnx_parity.results import CaseResult, OutputComparison, RunReport
from onnx_parity.wording import fmt_measured, fmt_setting

MAX_BARS = 30  # cases per chart, worst first
MAX_ROLLOUTS = 5  # rollout charts per run, the worst first
MAX_STEPS = 60  # steps a rollout chart draws, the first
CAP = 10.0  # tolerances: a bar past it is drawn at it, its figure in its label
NEAR = 0.5  # a passing case this close to its tolerance is drawn too
CLAMP = 8.0  # decades either way, for the trend: an error gone to 0 draws at -CLAMP
LABEL = 40  # characters of a case's label
TITLE = 100  # characters of a chart's title
_UNSAFE = re.compile(r"[^A-Za-z0-9 ._+=/()-]")


def label(text: str, limit: int = LABEL) -> str:
    """A quoted Mermaid string that is only text: quotes, backticks, brackets, `%`, `<`, `>`,
    `#`, `;`, `:`, commas and line ends become `_`, so a model's name can neither end the
    string, the code block nor the diagram."""
    safe = _UNSAFE.sub("_", text)[:limit]
    return f'"{safe}"'


@frozen
class Headroom:
    """A case's worst output in units of its own tolerance (1: at it, above fails), and the
    unit in words where it is not the output's atol ("" where it is)."""

    value: float
    unit: str = ""


def output_headroom(output: OutputComparison) -> Headroom | None:
    """The output's error in units of its tolerance: the atol it needs over its atol; for
    metrics, how far from a perfect match it is over how far its threshold allows (each
    metric's `units`: SQNR's shortfall in dB as a power ratio), the worst criterion speaking;
    None where no tolerance measures it (shape, dtype, NaN/Inf placement: no atol passes it;
    an output the tolerance could not have failed, every element within atol of zero)."""
    if output.verdict_kind not in ("passed", "elements", "metric"):
        return None
    found: list[Headroom] = []
    for name, threshold in output.thresholds.items():
        value = output.metrics.get(name)
        if value is None or math.isnan(value):
            continue
        metric = named(name)
        if metric is None:
            continue
        found.append(Headroom(metric.units(value, threshold), metric.unit(name, threshold)))
    needed = output.required_atol
    if not output.metric_only and needed is not None and math.isfinite(needed):
        if output.atol > 0:
            found.append(Headroom(needed / output.atol))
        elif needed > 0:
            found.append(Headroom(math.inf, "atol 0: any error fails"))
        else:
            found.append(Headroom(0.0))
    return max(found, key=lambda h: h.value) if found else None


def headroom(case: CaseResult) -> Headroom | None:
    """The case's worst output's headroom; None where none has one."""
    found = [h for o in case.outputs for h in [output_headroom(o)] if h is not None]
    return max(found, key=lambda h: h.value) if found else None


def trend(case: CaseResult) -> float | None:
    """log10 of the case's error over the baseline's: its CaseTrend's ratio."""
    if case.baseline is None or case.baseline.status != "compared" or case.baseline.ratio is None:
        return None
    ratio = case.baseline.ratio
    if not math.isfinite(ratio):
        return CLAMP
    return -CLAMP if ratio <= 0 else round(max(-CLAMP, min(CLAMP, math.log10(ratio))), 2)


def per_step(case: CaseResult) -> list[float] | None:
    """The error of the output a rollout follows over its atol, at each step; None without a
    rollout, or where that output has no atol."""
    rollout = case.details.rollout
    if rollout is None or rollout.output is None or not rollout.per_step:
        return None
    atol = next((o.atol for o in case.outputs if o.name == rollout.output), 0.0)
    if not atol > 0:
        return None
    found = [s.max_abs.get(rollout.output) for s in rollout.per_step]
    return [math.inf if not math.isfinite(v) else v / atol for v in found if v is not None]


def _figure(value: float) -> str:
    """A bar's figure for its label: 4.8e4x, 70x, 1.3x, inf."""
    if math.isinf(value):
        return "inf"
    return f"{value:.2g}x" if value < 100 else f"{fmt_measured(value)}x"


def _bars(values: Sequence[float]) -> tuple[list[float], float]:
    """The values as drawn (each past CAP at CAP) and the axis's top."""
    drawn = [round(min(v, CAP), 3) for v in values]
    return drawn, max(2.0, math.ceil(max(drawn, default=0.0)))


def _chart(title: str, axis: str, names: Sequence[str], values: Sequence[float],
           low: float, high: float, line: float) -> str:
    """A bar chart with a line; `label` makes the title, the names and the axis safe."""
    return ("```mermaid\nxychart-beta\n"
            f"    title {label(title, TITLE)}\n"
            f"    x-axis [{', '.join(label(name) for name in names)}]\n"
            f"    y-axis {label(axis)} {low:g} --> {high:g}\n"
            f"    bar [{', '.join(f'{v:g}' for v in values)}]\n"
            f"    line [{', '.join(f'{line:g}' for _ in values)}]\n```\n")


def _name(case: CaseResult) -> str:
    return case.id.replace("[", " ").replace("]", "")


def headroom_chart(cases: Sequence[CaseResult]) -> str:
    """The run's chart: every failing case with a headroom and every passing one at NEAR of
    its tolerance or closer, worst first, each bar from 0 in units of its tolerance."""
    found = [(c, h) for c in cases for h in [headroom(c)] if h is not None
             and (c.status in ("failed", "error") or h.value >= NEAR)]
    if not found:
        return ""
    # Failing cases as every bounded report ranks them (a real difference before float
    # noise), then the passing ones nearest their tolerance.
    found.sort(key=lambda item: (item[0].status != "failed",
                                 tuple(-x for x in severity(item[0])), -item[1].value))
    shown = found[:MAX_BARS]
    drawn, top = _bars([h.value for _, h in shown])
    names = [f"{_figure(h.value)} {_name(c)}" for c, h in shown]
    text = _chart("every failing or near-failing case - in units of its tolerance - above 1 "
                  "fails", "error / tolerance", names, drawn, 0, top, 1.0)
    units = [f"- {markdown_text(one_line(c.id, 200))}: {markdown_text(h.unit)}"
             for c, h in shown if h.unit]
    more = (f"{len(found) - MAX_BARS} more cases not drawn (the chart shows the worst "
            f"{MAX_BARS}).\n" if len(found) > MAX_BARS else "")
    blind = sum(1 for c in cases if c.status == "failed" and headroom(c) is None)
    if blind:
        more += (f"{blind} failing case{'s' * (blind != 1)} not drawn: no tolerance measures "
                 "what failed (NaN/Inf placement, a shape, a dtype, a value compared "
                 "exactly, a tolerance that could not fail it); the tables say it.\n")
    return (text + ("\nUnits other than atol:\n\n" + "\n".join(units) + "\n" if units else "")
            + (f"\n{more}" if more else ""))


def trend_chart(cases: Sequence[CaseResult]) -> str:
    """With a baseline: each compared case's error over the baseline's, log10, worst first."""
    points = [(_name(c), v) for c in cases for v in [trend(c)] if v is not None]
    if not points:
        return ""
    points.sort(key=lambda p: -p[1])
    shown = points[:MAX_BARS]
    values = [v for _, v in shown]
    low, high = math.floor(min(0.0, *values)) - 1, math.ceil(max(0.0, *values)) + 1
    more = (f"\n{len(points) - MAX_BARS} more cases not drawn (the chart shows the worst "
            f"{MAX_BARS}).\n" if len(points) > MAX_BARS else "")
    return _chart("error since the baseline - up is grown", "log10(max abs / baseline)",
                  [n for n, _ in shown], values, low, high, 0.0) + more


def rollout_charts(cases: Sequence[CaseResult]) -> str:
    """A chart per failing rollout, the worst MAX_ROLLOUTS: its error per step over its atol."""
    found = [(c, steps) for c in cases if c.status == "failed"
             for steps in [per_step(c)] if steps]
    found.sort(key=lambda item: -max(item[1]))
    charts = []
    for case, steps in found[:MAX_ROLLOUTS]:
        name = case.details.rollout.output if case.details.rollout else ""
        atol = next((o.atol for o in case.outputs if o.name == name), 0.0)
        drawn, top = _bars(steps[:MAX_STEPS])
        title = f"{_name(case)[:LABEL]} - {name} per step - above 1 fails"
        more = (f"\n{len(steps) - MAX_STEPS} more steps of {markdown_text(case.id)} not drawn "
                f"(the chart shows the first {MAX_STEPS}).\n" if len(steps) > MAX_STEPS else "")
        charts.append(_chart(title, f"max abs / atol {fmt_setting(atol)}",
                             [str(n) for n in range(1, len(drawn) + 1)], drawn, 0, top, 1.0)
                      + more)
    left = len(found) - MAX_ROLLOUTS
    return "\n".join(charts) + (f"\n{left} more failing rollouts not drawn.\n" if left > 0
                                else "")


def charts_section(report: RunReport) -> str:
    """The run's charts: headroom, the trend against the baseline, then the failing rollouts."""
    blocks = [b for b in (headroom_chart(report.cases), trend_chart(report.cases),
                          rollout_charts(report.cases)) if b]
    if not blocks:
        return ""
    return ("<details><summary>Charts: headroom per case</summary>\n\n"
            "Each bar is a case's worst output, from 0, in units of its own tolerance: the atol "
            "it needs over its atol (or, for a metric, how far from a perfect match it is over "
            "how far its threshold allows), so the line at 1 is the tolerance and above it "
            f"fails; a bar past {CAP:g} is drawn at {CAP:g}, its figure in its label. A "
            "failing rollout's chart has a bar per step: the error of the output it follows "
            "over its atol.\n\n" + "\n".join(blocks) + "\n</details>\n\n")
