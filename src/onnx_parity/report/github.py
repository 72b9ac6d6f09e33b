"""GitHub Actions reports: error annotations on the spec and the Markdown job summary."""

# No `from __future__ import annotations` here: this module's public `annotations()` would
# rebind that name. Everything below is valid at runtime on Python 3.10+ without it.

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from onnx_parity.report.describe import (
    case_reason,
    cause_text,
    counts_text,
    drift_headline,
    explanations,
    failing_outputs,
    fmt_seconds,
    models_in_order,
    output_verdict,
    path_step,
    shared_notes,
    value_text,
    worst_output,
)
from onnx_parity.report.escape import ELLIPSIS, clean_text, markdown_cell, markdown_text, one_line
from onnx_parity.results import STATUSES, CaseResult, RunReport

logger = logging.getLogger(__name__)

SUMMARY_LIMIT = 1_000_000  # GitHub refuses a step summary over 1 MiB; keep a margin
ANNOTATION_LIMIT = 10  # GitHub shows at most 10 error annotations per step
CASES_PER_ANNOTATION = 20
REASON_LIMIT = 300
CELL_LIMIT = 500
CELL_LINES = 5
OUTPUTS_PER_CELL = 3
PATH_STEPS = 6  # compared tensors shown on the drift's path in a summary cell
_FAILING = ("failed", "error")
_VERDICT_CELLS = {
    "passed": "✅ passed",
    "failed": "❌ failed",
    "error": "💥 error",
    "skipped": "⏭️ skipped",
}


def escape_data(text: str) -> str:
    """A workflow command's message, per GitHub's rules: % first, then CR and LF."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value: the message rules plus `:` and `,`, which would
    otherwise end the value."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _title(model: str, cases: list[CaseResult]) -> str:
    failed = sum(c.status == "failed" for c in cases)
    errors = sum(c.status == "error" for c in cases)
    of = f"of {_plural(len(cases), 'case')}"
    name = one_line(model, 100)
    if failed and errors:
        return f"onnx-parity: {name} drifted in {failed} and errored in {errors} {of}"
    if failed:
        return f"onnx-parity: {name} drifted in {failed} {of}"
    return f"onnx-parity: {name} errored in {errors} {of}"


def _case_message(case: CaseResult) -> str:
    line = f"{one_line(case.id, 200)}: {one_line(case_reason(case), REASON_LIMIT)}"
    return "; ".join([line, *(one_line(text, REASON_LIMIT) for text in explanations(case))])


def _model_message(cases: list[CaseResult]) -> str:
    failing = [c for c in cases if c.status in _FAILING]
    lines = [_case_message(c) for c in failing[:CASES_PER_ANNOTATION]]
    rest = len(failing) - CASES_PER_ANNOTATION
    if rest > 0:
        lines.append(f"… and {_plural(rest, 'more failing case')};"
                     " the job summary and the JSON report list them")
    return "\n".join(lines)


def _command(spec_file: str, line: int | None, title: str, message: str) -> str:
    # Text is cleaned of control characters before escaping: GitHub's escaping covers only
    # CR and LF, and a stray ESC or NUL has no business in an annotation.
    properties = [f"file={escape_property(clean_text(spec_file))}"]
    if line is not None:
        properties.append(f"line={line}")
    properties.append(f"title={escape_property(clean_text(title))}")
    return f"::error {','.join(properties)}::{escape_data(clean_text(message))}"


def annotations(report: RunReport, spec_file: str, limit: int = ANNOTATION_LIMIT) -> list[str]:
    """`::error` workflow commands, one per model with a failed or errored case, placed on the
    model's entry in the spec. Past `limit` models, the last one sums up the rest."""
    failing = [
        (model, cases)
        for model, cases in models_in_order(report).items()
        if any(c.status in _FAILING for c in cases)
    ]
    if limit <= 0 or not failing:
        return []
    shown = failing if len(failing) <= limit else failing[: limit - 1]
    commands = []
    for model, cases in shown:
        line = next((c.line for c in cases if c.line is not None), None)
        commands.append(_command(spec_file, line, _title(model, cases), _model_message(cases)))
    rest = failing[len(shown):]
    if rest:
        names = [one_line(model, 60) for model, _ in rest]
        listed = ", ".join(names[:CASES_PER_ANNOTATION])
        if len(names) > CASES_PER_ANNOTATION:
            listed += f", {ELLIPSIS}"
        failing_cases = sum(1 for _, group in rest for c in group if c.status in _FAILING)
        more = _plural(len(rest), "more failing model")
        commands.append(_command(
            spec_file,
            None,
            f"onnx-parity: {more}",
            f"and {more} ({_plural(failing_cases, 'failing case')}): {listed};"
            " the job summary and the JSON report have them all",
        ))
    return commands


def _emoji(counts: dict[str, int]) -> str:
    if counts["failed"] or counts["error"]:
        return "❌"
    # Nothing passed and nothing failed (no cases, or all skipped): not a green check.
    return "✅" if counts["passed"] else "⚠️"


def _excerpt(text: str) -> str:
    """A long message (an exporter traceback) cut to a few lines for a table cell."""
    lines = [line for line in clean_text(text).splitlines() if line.strip()]
    cut = lines[:CELL_LINES]
    excerpt = "\n".join(cut)
    if len(excerpt) > CELL_LIMIT or len(lines) > CELL_LINES:
        excerpt = excerpt[: CELL_LIMIT - 1].rstrip() + ELLIPSIS
    return excerpt


def _detail_cell(case: CaseResult, shared: Sequence[str] = ()) -> str:
    parts: list[str] = []
    if case.status == "error":
        parts.append(f"**{markdown_cell(case.stage or 'run')}**: "
                     f"{markdown_cell(_excerpt(case.message or 'no message'))}")
    elif case.status == "failed":
        failing = failing_outputs(case)
        parts.extend(markdown_cell(one_line(output_verdict(o), CELL_LIMIT))
                     for o in failing[:OUTPUTS_PER_CELL])
        if len(failing) > OUTPUTS_PER_CELL:
            parts.append(f"+{_plural(len(failing) - OUTPUTS_PER_CELL, 'more failing output')}")
        if not failing:
            parts.append(markdown_cell(_excerpt(case_reason(case))))
        parts.extend(_drift_parts(case))
    elif case.status == "skipped":
        parts.append(markdown_cell(_excerpt(case_reason(case))))
    else:
        worst = worst_output(case.outputs)
        if worst is not None:
            parts.append(markdown_cell(one_line(output_verdict(worst), CELL_LIMIT)))
    parts.extend(f"note: {markdown_cell(one_line(note, CELL_LIMIT))}" for note in case.notes
                 if note not in shared)
    return "<br>".join(parts) if parts else "—"


def _drift_parts(case: CaseResult) -> list[str]:
    """The proven cause, the drift's headline, then the error along the path:
    `node` 1e-7 → `node` 0.3 ✗ → …"""
    cause = cause_text(case)
    parts = [f"💡 {markdown_cell(one_line(cause, CELL_LIMIT))}"] if cause else []
    headline = drift_headline(case)
    if not headline:
        return parts
    divergence = case.details["divergence"]
    steps = []
    for entry in [e for e in divergence.get("path") or [] if isinstance(e, Mapping)]:
        shown = path_step(entry)
        mark = "" if entry.get("within") else " ✗"
        steps.append(f"{markdown_cell(one_line(str(entry.get('node')), 80))} {shown}{mark}")
    if len(steps) > PATH_STEPS:
        steps = [*steps[: PATH_STEPS - 2], ELLIPSIS, *steps[-2:]]
    parts.append(f"📍 {markdown_cell(one_line(headline, CELL_LIMIT))}")
    if steps:
        parts.append("path: " + " → ".join(steps))
    return parts


def _row(case: CaseResult, shared: Sequence[str] = ()) -> str:
    cells = [
        markdown_cell(one_line(case.id, 200)),
        _VERDICT_CELLS[case.status],
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
        f"> ⚠️ **Summary truncated:** {sum(left_out.values())} of {_plural(total, 'case')} left"
        f" out ({counts_text(left_out)}) to stay within GitHub's step-summary size limit."
        " The JSON report has all of them.\n\n"
    )


_PREFLIGHT_MARKS = {"passed": "✅", "failed": "❌", "skipped": "⏭️"}
_FINDING_CELLS = {"ok": "✅ ok", "warn": "⚠️ warn", "fail": "❌ fail"}


def _preflight_section(report: RunReport) -> str:
    """The GPU preflight, first: why GPU cases failed or were skipped, and how to fix it."""
    from onnx_parity.doctor import consequence, from_environment, headline, outcome

    data = from_environment(report.environment)
    if data is None:
        return ""
    rows = "".join(
        "| " + " | ".join([
            markdown_cell(one_line(str(f.get("check", "")), 100)),
            _FINDING_CELLS.get(str(f.get("status")), "?"),
            markdown_cell(one_line(str(f.get("found", "")), CELL_LIMIT)),
            markdown_cell(one_line(str(f.get("fix", "")), CELL_LIMIT)) or "—",
        ]) + " |\n"
        for f in data.get("findings", ()) if isinstance(f, Mapping)
    )
    return (
        f"### {_PREFLIGHT_MARKS[outcome(data)]} {markdown_text(headline(data))}\n\n"
        f"{markdown_text(consequence(data))}\n\n"
        "| Check | Status | Found | Fix |\n| --- | --- | --- | --- |\n" + rows + "\n"
    )


def _environment_section(report: RunReport) -> str:
    shown = {k: v for k, v in report.environment.items() if k != "preflight"}
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


def _model_header(model: str, cases: Sequence[CaseResult]) -> str:
    counts = _counts(cases)
    notes = "".join(f"> note: {markdown_cell(one_line(note, CELL_LIMIT))}\n"
                    for note in shared_notes(cases))
    return (
        f"### {_emoji(counts)} {markdown_text(model)}: {counts_text(counts)}\n\n"
        + (notes + "\n" if notes else "")
        + "| Case | Verdict | Time | Worst error vs tolerance |\n| --- | --- | --: | --- |\n"
    )


_PRIORITY = {"error": 0, "failed": 0, "skipped": 1, "passed": 2}


def _fit(groups: dict[str, list[CaseResult]], budget: int) -> set[int]:
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
        cost = _size(_row(case, shared[model])) + (0 if model in opened else
                                    _size(_model_header(model, groups[model])) + 1)
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
    head = (
        f"## {_emoji(counts)} onnx-parity: {counts_text(counts)}\n\n"
        f"{_plural(total, 'case')} from {markdown_text(report.spec_path)}"
        f" in {report.seconds:.1f}s\n\n"
    ) + _preflight_section(report)
    tail = _environment_section(report)
    groups = models_in_order(report)
    tables = "".join(
        _model_header(model, cases)
        + "".join(_row(case, shared) for shared in [shared_notes(cases)] for case in cases)
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
    chosen = _fit(groups, budget - _size(tail))
    body: list[str] = []
    left_out: dict[str, int] = dict.fromkeys(STATUSES, 0)
    index = 0
    for model, cases in groups.items():
        rows = []
        shared = shared_notes(cases)
        for case in cases:
            if index in chosen:
                rows.append(_row(case, shared))
            else:
                left_out[case.status] += 1
            index += 1
        if rows:
            body.append(_model_header(model, cases) + "".join(rows) + "\n")
    return head + "".join(body) + _truncation_note(left_out, total) + tail


def write_summary(
    report: RunReport, path: str | os.PathLike[str], max_bytes: int = SUMMARY_LIMIT
) -> None:
    """Append the job summary to `path` (GITHUB_STEP_SUMMARY is shared by the whole step, so
    earlier content is kept and counts against the same size limit)."""
    target = Path(path)
    existing = target.stat().st_size if target.exists() else 0
    separator = ""
    if existing:
        with target.open("rb") as handle:
            handle.seek(-1, os.SEEK_END)
            separator = "" if handle.read(1) == b"\n" else "\n\n"
    budget = max_bytes - existing - len(separator)
    text = summary_markdown(report, budget)
    if _size(text) > budget:
        logger.warning(
            "job summary not written: %s already holds %d bytes of the %d allowed",
            target, existing, max_bytes,
        )
        return
    with target.open("a", encoding="utf-8") as handle:
        handle.write(separator + text)
