"""The Markdown job summary: a headline, the GPU preflight and the baseline comparison, one
table per model (failing cases first when it must be cut to GitHub's size limit), the error
histograms of the outputs that failed or regressed, and the environment."""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Sequence
from pathlib import Path

from onnx_parity.errors import SpecProblem
from onnx_parity.escape import ELLIPSIS, clean_text, markdown_cell, markdown_text, one_line
from onnx_parity.literals import STATUSES
from onnx_parity.report import trend
from onnx_parity.report.charts import charts_section
from onnx_parity.report.describe import (
    case_reason,
    cause_text,
    counts_mark,
    counts_text,
    drift_headline,
    expectation_text,
    explanations,
    failing_outputs,
    failing_step,
    fmt_seconds,
    models_in_order,
    output_sentence,
    path_step,
    run_mark,
    sentence_case,
    shared_note_text,
    shared_notes,
    tokens_text,
    value_text,
    worst_output,
)
from onnx_parity.report.expectations import expectations_section
from onnx_parity.report.latency import latency_section
from onnx_parity.report.preflight import consequence, outcome
from onnx_parity.report.preflight import headline as preflight_headline
from onnx_parity.results import CaseResult, RunReport
from onnx_parity.wording import counted

logger = logging.getLogger(__name__)

SUMMARY_LIMIT = 1_000_000  # GitHub refuses a step summary over 1 MiB; keep a margin
CELL_LIMIT = 500
CELL_LINES = 5
OUTPUTS_PER_CELL = 3
PATH_STEPS = 6  # compared tensors shown on the drift's path in a summary cell
HISTOGRAMS = 10  # outputs whose error histogram the summary draws
LISTED_CASES = 50  # cases named in the new/gone lists
_VERDICT_CELLS = {
    "passed": "✅ passed",
    "failed": "❌ failed",
    "error": "💥 error",
    "skipped": "⏭️ skipped",
    "xfailed": "🔶 expected failure",
}


def _excerpt(text: str) -> str:
    """A long message (an exporter traceback) cut to a few lines for a table cell."""
    lines = [line for line in clean_text(text).splitlines() if line.strip()]
    cut = lines[:CELL_LINES]
    excerpt = "\n".join(cut)
    if len(excerpt) > CELL_LIMIT or len(lines) > CELL_LINES:
        excerpt = excerpt[: CELL_LIMIT - 1].rstrip() + ELLIPSIS
    return excerpt


def _detail_cell(case: CaseResult, shared: Collection[str] = ()) -> str:
    parts: list[str] = []
    if case.status == "error":
        parts.append(f"**{markdown_cell(case.stage or 'run')}**: "
                     f"{markdown_cell(_excerpt(case.message or 'no message'))}")
    elif case.status == "failed":
        failing = failing_outputs(case)
        if tokens_text(case):  # a decoder's tokens failed it: that leads, as in its message
            parts.append(markdown_cell(tokens_text(case)))
        # A rollout's outputs are those of its first failing step: the cell says which.
        said = [output_sentence(o) for o in failing[:OUTPUTS_PER_CELL]]
        if said and failing_step(case):
            said[0] = f"{failing_step(case)}: {said[0]}"
        parts.extend(markdown_cell(one_line(text, CELL_LIMIT)) for text in said)
        if len(failing) > OUTPUTS_PER_CELL:
            parts.append(f"+{counted(len(failing) - OUTPUTS_PER_CELL, 'more failing output')}")
        if not failing:
            parts.append(markdown_cell(_excerpt(case_reason(case))))
        parts.extend(_drift_parts(case))
    elif case.status in ("skipped", "xfailed"):
        parts.append(markdown_cell(_excerpt(case_reason(case))))
        parts.extend(markdown_cell(one_line(text, CELL_LIMIT)) for text in explanations(case))
    else:
        worst = worst_output(case.outputs)
        if worst is not None:
            parts.append(markdown_cell(one_line(output_sentence(worst), CELL_LIMIT)))
    if case.status != "xfailed" and expectation_text(case):
        parts.append(f"expect: {markdown_cell(one_line(expectation_text(case), CELL_LIMIT))}")
    parts.extend(f"note: {markdown_cell(one_line(note, CELL_LIMIT))}" for note in case.notes
                 if note not in shared)
    parts.extend(f"baseline: {markdown_cell(one_line(note, CELL_LIMIT))}"
                 for note in trend.case_notes(case))
    return "<br>".join(parts) if parts else "—"


def _drift_parts(case: CaseResult) -> list[str]:
    """The proven cause, the drift's headline, then the error along the path:
    `node` 1e-7 → `node` 0.3 ✗ → …"""
    cause = cause_text(case)
    parts = [f"💡 {markdown_cell(one_line(cause, CELL_LIMIT))}"] if cause else []
    headline = drift_headline(case)
    if not headline:
        return parts
    divergence = case.details.divergence
    steps = []
    for step in divergence.path if divergence is not None else ():
        mark = "" if step.within else " ✗"
        steps.append(f"{markdown_cell(one_line(str(step.node), 80))} {path_step(step)}{mark}")
    if len(steps) > PATH_STEPS:
        steps = [*steps[: PATH_STEPS - 2], ELLIPSIS, *steps[-2:]]
    parts.append(f"📍 {markdown_cell(one_line(headline, CELL_LIMIT))}")
    if steps:
        parts.append("path: " + " → ".join(steps))
    return parts


def _row(case: CaseResult, shared: Collection[str] = (), trended: bool = False) -> str:
    cells = [
        markdown_cell(one_line(case.id, 200)),
        _VERDICT_CELLS[case.status],
        *([trend.trend_cell(case)] if trended else []),
        fmt_seconds(case.seconds),
        _detail_cell(case, shared),
    ]
    return "| " + " | ".join(cells) + " |\n"


def _counts(cases: Sequence[CaseResult]) -> dict[str, int]:
    counts: dict[str, int] = dict.fromkeys(STATUSES, 0)
    for case in cases:
        counts[case.status] += 1
    return counts


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def _truncation_note(left_out: dict[str, int], total: int) -> str:
    return (
        f"> ⚠️ **Summary truncated:** {sum(left_out.values())} of {counted(total, 'case')} left"
        f" out ({counts_text(left_out)}) to stay within GitHub's step-summary size limit."
        " The JSON report has all of them.\n\n"
    )


_PREFLIGHT_MARKS = {"passed": "✅", "failed": "❌", "skipped": "⏭️"}
_FINDING_CELLS = {"ok": "✅ ok", "warn": "⚠️ warn", "fail": "❌ fail"}


def _preflight_section(report: RunReport) -> str:
    """The GPU preflight, first: why GPU cases failed or were skipped, and how to fix it."""
    preflight = report.preflight
    if preflight is None:
        return ""
    rows = "".join(
        "| " + " | ".join([
            markdown_cell(one_line(f.check, 100)),
            _FINDING_CELLS[f.status],
            markdown_cell(one_line(f.found, CELL_LIMIT)),
            markdown_cell(one_line(f.fix, CELL_LIMIT)) or "—",
        ]) + " |\n"
        for f in preflight.findings
    )
    return (
        f"### {_PREFLIGHT_MARKS[outcome(preflight)]} "
        f"{markdown_text(preflight_headline(preflight))}\n\n"
        f"{markdown_text(consequence(preflight))}\n\n"
        "| Check | Status | Found | Fix |\n| --- | --- | --- | --- |\n" + rows + "\n"
    )


def _environment_section(report: RunReport) -> str:
    shown = {**report.environment, **({"shard": report.shard} if report.shard else {})}
    if not shown:
        return ""
    rows = "".join(
        f"| {markdown_cell(one_line(str(key), 200))}"
        f" | {markdown_cell(one_line(value_text(value), 500))} |\n"
        for key, value in shown.items()
    )
    return (
        "<details><summary>Environment</summary>\n\n"
        "| Key | Value |\n| --- | --- |\n" + rows + "\n</details>\n"
    )


def _model_header(model: str, cases: Sequence[CaseResult], trended: bool = False) -> str:
    counts = _counts(cases)
    notes = "".join(
        f"> {markdown_cell(one_line(shared_note_text(note, count, len(cases)), CELL_LIMIT))}\n"
        for note, count in shared_notes(cases).items())
    columns = ("| Case | Verdict | Trend | Time | Worst error vs tolerance |\n"
               "| --- | --- | --- | --: | --- |\n") if trended else (
        "| Case | Verdict | Time | Worst error vs tolerance |\n| --- | --- | --: | --- |\n")
    return (
        f"### {counts_mark(counts)} {markdown_text(model)}: {counts_text(counts)}\n\n"
        + (notes + "\n" if notes else "") + columns
    )


_PRIORITY = {"error": 0, "failed": 0, "skipped": 1, "xfailed": 1, "passed": 2}


def _fit(groups: dict[str, list[CaseResult]], budget: int, trended: bool = False) -> set[int]:
    """Which cases (by position in the report) fit in `budget` bytes, failing cases first, so a
    long run of passing cases never pushes a failure out of the summary."""
    flat = [(model, case) for model, cases in groups.items() for case in cases]
    order = sorted(range(len(flat)), key=lambda i: _PRIORITY[flat[i][1].status])
    shared = {model: shared_notes(cases) for model, cases in groups.items()}
    opened: set[str] = set()
    chosen: set[int] = set()
    for index in order:
        model, case = flat[index]
        # A table costs its header and the blank line that closes it, once.
        cost = _size(_row(case, shared[model], trended)) + (
            0 if model in opened else _size(_model_header(model, groups[model], trended)) + 1)
        if cost > budget:
            break
        budget -= cost
        opened.add(model)
        chosen.add(index)
    return chosen


def summary_markdown(report: RunReport, max_bytes: int = SUMMARY_LIMIT) -> str:
    """The job summary: a headline, then one table per model. Over `max_bytes` (UTF-8) it keeps
    whole rows, failing cases first, and a closing line says how many cases were left out.
    A limit too small for even the headline and that line is exceeded rather than obeyed."""
    counts = report.counts
    total = len(report.cases)
    trended = trend.compared(report)
    head = (
        f"## {run_mark(report)} onnx-parity:"
        f" {counts_text(counts)}\n\n"
        f"{counted(total, 'case')} from {markdown_text(report.spec_path)}"
        f" in {report.seconds:.1f}s\n\n"
    ) + ("**The run did not finish**: the cases that did not end are counted as errors, or"
         " skipped with the reason.\n\n" if not report.complete else ""
         ) + expectations_section(report) + _baseline_section(report) + _preflight_section(report)
    tail = (charts_section(report) + _histogram_section(report) + latency_section(report)
            + _environment_section(report))
    groups = models_in_order(report)
    tables = "".join(
        _model_header(model, cases, trended)
        + "".join(_row(case, shared, trended) for shared in [shared_notes(cases)]
                  for case in cases)
        + "\n"
        for model, cases in groups.items()
    )
    if _size(head) + _size(tables) + _size(tail) <= max_bytes:
        return head + tables + tail

    # Reserve room for the note as if every case were left out, so the note always fits.
    reserve = _size(_truncation_note(dict.fromkeys(STATUSES, total), total))
    budget = max_bytes - _size(head) - reserve
    if _size(tail) > budget // 2:
        tail = ""
    chosen = _fit(groups, budget - _size(tail), trended)
    body: list[str] = []
    left_out: dict[str, int] = dict.fromkeys(STATUSES, 0)
    index = 0
    for model, cases in groups.items():
        rows = []
        shared = shared_notes(cases)
        for case in cases:
            if index in chosen:
                rows.append(_row(case, shared, trended))
            else:
                left_out[case.status] += 1
            index += 1
        if rows:
            body.append(_model_header(model, cases, trended) + "".join(rows) + "\n")
    return head + "".join(body) + _truncation_note(left_out, total) + tail


def _baseline_section(report: RunReport) -> str:
    """Against the baseline: what moved, what changed in the environment (why it may have),
    and which cases are new or gone. A check that could not be done says so first."""
    if report.baseline is None:
        return ""
    if not trend.compared(report):
        return f"> ⚠️ **{sentence_case(markdown_text(trend.headline(report)))}**\n\n"
    counts = trend.tally(report)
    mark = "⚠️" if counts["regressed"] else "📈"
    text = f"### {mark} {sentence_case(markdown_text(trend.headline(report)))}\n\n"
    changes = trend.environment_changes(report)
    if changes:
        text += "| Changed since the baseline | Baseline | This run |\n| --- | --- | --- |\n"
        text += "".join(f"| {markdown_cell(one_line(what, 100))} | {markdown_cell(before)} "
                        f"| {markdown_cell(after)} |\n" for what, before, after in changes)
        text += "\n"
    else:
        text += "Same versions as the baseline.\n\n"
    new = [case.id for case in report.cases
           if case.baseline is not None and case.baseline.status == "new"]
    for label, ids in (("New since the baseline", new),
                       ("In the baseline, not in this run", trend.gone(report))):
        if ids:
            listed = ", ".join(f"`{markdown_cell(one_line(i, 200))}`" for i in ids[:LISTED_CASES])
            more = f" and {len(ids) - LISTED_CASES} more" if len(ids) > LISTED_CASES else ""
            text += f"**{label}** ({len(ids)}): {listed}{more}\n\n"
    return text


def _histogram_section(report: RunReport) -> str:
    """|actual − expected| per decade, as a text bar chart, for outputs that failed or
    regressed."""
    chosen = trend.histogram_outputs(report)
    if not chosen:
        return ""
    blocks = []
    for case, output in chosen[:HISTOGRAMS]:
        assert output.histogram is not None
        title = markdown_text(f"{one_line(output.name, 100)} of {one_line(case.id, 200)}")
        chart = "\n".join(clean_text(line) for line in trend.histogram_lines(output.histogram))
        blocks.append(f"**{title}**, |actual − expected| per element:\n\n"
                      f"```text\n{chart.replace('```', 'ˋˋˋ')}\n```\n")
    more = (f"\n{len(chosen) - HISTOGRAMS} more in the JSON report.\n"
            if len(chosen) > HISTOGRAMS else "")
    return ("<details><summary>Error histograms</summary>\n\n" + "\n".join(blocks) + more
            + "\n</details>\n\n")


SPEC_PROBLEMS_SHOWN = 200


def spec_summary(problems: Sequence[SpecProblem], spec_path: str) -> str:
    """The job summary of a spec that cannot be used: every problem at its line, and the fact
    that nothing was checked."""
    rows = "".join(f"| {p.line}:{p.column} | {markdown_cell(one_line(p.message, CELL_LIMIT))} |\n"
                   for p in problems[:SPEC_PROBLEMS_SHOWN])
    more = (f"\n{len(problems) - SPEC_PROBLEMS_SHOWN} more in the log.\n"
            if len(problems) > SPEC_PROBLEMS_SHOWN else "")
    return (f"## ❌ onnx-parity: {markdown_text(spec_path)} cannot be used\n\n"
            f"{counted(len(problems), 'problem')} in the spec; nothing was checked. Fix them "
            "and push again; `onnx-parity run SPEC --list` checks a spec locally without "
            "running it.\n\n| Line:column | Problem |\n| --- | --- |\n" + rows + more + "\n")


def write_summary(
    report: RunReport | str, path: str | os.PathLike[str], max_bytes: int = SUMMARY_LIMIT
) -> None:
    """Append the job summary to `path` (GITHUB_STEP_SUMMARY is shared by the whole step, so
    earlier content is kept and counts against the same size limit). A string is a summary
    already made (spec_summary)."""
    target = Path(path)
    existing = target.stat().st_size if target.exists() else 0
    separator = ""
    if existing:
        with target.open("rb") as handle:
            handle.seek(-1, os.SEEK_END)
            separator = "" if handle.read(1) == b"\n" else "\n\n"
    budget = max_bytes - existing - len(separator)
    text = report if isinstance(report, str) else summary_markdown(report, budget)
    if _size(text) > budget:
        logger.warning(
            "job summary not written: %s already holds %d bytes of the %d allowed",
            target, existing, max_bytes,
        )
        return
    with target.open("a", encoding="utf-8") as handle:
        handle.write(separator + text)
