"""The comparison with the baseline run, as the reports show it: a case's trend, the run's
environment changes and the cases new or gone, and an output's error histogram drawn in text.

Reads RunReport.baseline and CaseResult.baseline (compare/baseline.py's BaselineRun and
CaseTrend), as made in the run or as read back from JSON.
"""

from __future__ import annotations

import math

from onnx_parity.escape import one_line
from onnx_parity.results import CaseResult, Histogram, OutputComparison, RunReport
from onnx_parity.wording import fmt_ratio, fmt_setting

BAR_WIDTH = 24
_UP, _DOWN = "↑", "↓"


def compared(report: RunReport) -> bool:
    """Whether the run was compared with a baseline at all."""
    return report.baseline is not None and report.baseline.done


def trend_cell(case: CaseResult) -> str:
    """`×1000 ↑` (⚠️ when it regressed), `=`, `÷40 ↓`, `new`, or `—` (not compared)."""
    record = case.baseline
    if record is None or record.status != "compared":
        return "new" if record is not None and record.status == "new" else "—"
    if record.ratio is None or record.trend == "same":
        return "="
    mark = _UP if record.trend == "up" else _DOWN
    return f"{'⚠️ ' if record.regressed else ''}{fmt_ratio(record.ratio)} {mark}"


def case_notes(case: CaseResult) -> list[str]:
    """What could not be compared in this case, and why."""
    record = case.baseline
    if record is None:
        return []
    notes = list(record.notes)
    if record.status == "not compared" and record.reason:
        notes.insert(0, f"not compared with the baseline: {record.reason}")
    return notes


def regressed_outputs(case: CaseResult) -> set[str]:
    if case.baseline is None:
        return set()
    return {name for name, output in case.baseline.outputs.items() if output.regressed}


def tally(report: RunReport) -> dict[str, int]:
    """How many cases were compared, regressed, grew, shrank, are new; how many are gone."""
    counts = dict.fromkeys(("compared", "regressed", "up", "down", "new", "not compared"), 0)
    for case in report.cases:
        if case.baseline is None:
            continue
        counts[case.baseline.status] += 1
        if case.baseline.status == "compared":
            counts["regressed"] += case.baseline.regressed
            if case.baseline.trend in ("up", "down"):
                counts[str(case.baseline.trend)] += 1
    counts["gone"] = len(gone(report))
    return counts


def gone(report: RunReport) -> list[str]:
    return list(report.baseline.gone) if report.baseline is not None else []


def environment_changes(report: RunReport) -> list[tuple[str, str, str]]:
    """(what, before, after), "—" for a package that was not there."""
    if report.baseline is None:
        return []
    return [(what, "—" if before is None else before, "—" if after is None else after)
            for what, before, after in report.baseline.environment]


def headline(report: RunReport) -> str:
    """One sentence on the comparison: what was compared with what, and what moved."""
    record = report.baseline
    if record is None:
        return "regression check not done: no baseline"
    path = one_line(record.path, 200)
    if not record.done:
        return f"regression check not done: {one_line(record.problem or 'no baseline', 400)}"
    counts = tally(report)
    parts = [f"{counts['regressed']} regressed", f"{counts['compared']} compared"]
    parts += [f"{counts[k]} {k}" for k in ("new", "gone", "not compared") if counts[k]]
    return f"against the baseline {path}: " + ", ".join(parts)


def environment_text(report: RunReport) -> str:
    """`torch 2.12.0 → 2.13.0, onnxruntime 1.30.0 → 1.31.1`"""
    return ", ".join(f"{one_line(what, 60)} {one_line(before, 60)} → {one_line(after, 60)}"
                     for what, before, after in environment_changes(report))


def _bucket_label(low: float, high: float) -> str:
    if low == 0:
        return f"< {fmt_setting(high)}"
    if math.isinf(high):
        return f"≥ {fmt_setting(low)}"
    return f"{fmt_setting(low)}..{fmt_setting(high)}"


def histogram_lines(histogram: Histogram) -> list[str]:
    """A text bar chart of the decades that hold elements, one line each:
    `1e-5..1e-4 │██████▌ 120`."""
    counts = list(histogram.counts)
    used = [i for i, count in enumerate(counts) if count]
    rows: list[tuple[str, int]] = []
    if used:
        rows = [(_bucket_label(histogram.edges[i], histogram.edges[i + 1]), counts[i])
                for i in range(used[0], used[-1] + 1)]
    if histogram.nonfinite:
        rows.append(("NaN/Inf", histogram.nonfinite))
    if not rows:
        return []
    most = max(count for _, count in rows)
    width = max(len(label) for label, _ in rows)
    lines = []
    for label, count in rows:
        eighths = round(BAR_WIDTH * 8 * count / most) if most else 0
        bar = "█" * (eighths // 8) + ("▏▎▍▌▋▊▉"[eighths % 8 - 1] if eighths % 8 else "")
        if count and not bar:
            bar = "▏"
        lines.append(f"{label.rjust(width)} │{bar} {count:,}")
    return lines


def histogram_outputs(report: RunReport) -> list[tuple[CaseResult, OutputComparison]]:
    """The outputs whose histogram the reports draw: failed ones, then regressed ones."""
    chosen = []
    for case in report.cases:
        regressed = regressed_outputs(case)
        for output in case.outputs:
            if output.histogram is not None and (not output.passed or output.name in regressed):
                chosen.append((case, output))
    return chosen
