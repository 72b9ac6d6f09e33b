"""The known failures on record (the spec's `expect`) as the job summary shows them: how the
run's cases met them, and the expectations that no case matched."""

from __future__ import annotations

from onnx_parity.escape import markdown_cell, markdown_text, one_line
from onnx_parity.results import RunReport

LISTED = 20  # unmatched expectations named in the summary

_VERDICTS = (("met", "expected failure"), ("passes", "now passes"),
             ("mismatch", "did not match"), ("expired", "expired"))


def tally(report: RunReport) -> dict[str, int]:
    """Cases by how they met their expectation: met, passes, mismatch, expired."""
    counts = dict.fromkeys((verdict for verdict, _ in _VERDICTS), 0)
    for case in report.cases:
        record = case.details.expectation
        if record is not None and record.verdict in counts:
            counts[record.verdict] += 1
    return counts


def expectations_section(report: RunReport) -> str:
    """`### 🔶 Expectations: 2 expected failures, 1 now passes`, then the expectations that
    matched no case; "" for a run that none of them concerns."""
    counts = tally(report)
    if not any(counts.values()) and not report.unmatched:
        return ""
    parts = [f"{n} {word}{'s' if n != 1 and word == 'expected failure' else ''}"
             for (verdict, word) in _VERDICTS for n in [counts[verdict]] if n]
    if report.unmatched:
        parts.append(f"{len(report.unmatched)} matched no case")
    stale = counts["passes"] or counts["mismatch"] or counts["expired"] or report.unmatched
    text = f"### {'⚠️' if stale else '🔶'} Expectations: {', '.join(parts)}\n\n"
    if counts["passes"]:
        text += ("Cases that now pass fail the check: remove their expectation from the "
                 "spec.\n\n")
    if report.unmatched:
        text += ("These matched no case of this run:\n\n"
                 "| Model | Cases | Expected | Reason | Spec line |\n"
                 "| --- | --- | --- | --- | --: |\n")
        for record in report.unmatched[:LISTED]:
            text += (f"| {markdown_cell(one_line(record.model, 100))} "
                     f"| {markdown_cell(one_line(record.cases, 100))} | {record.status} "
                     f"| {markdown_cell(one_line(record.reason, 200))} "
                     f"| {record.line if record.line is not None else '—'} |\n")
        if len(report.unmatched) > LISTED:
            text += f"\n{markdown_text(f'… and {len(report.unmatched) - LISTED} more')}\n"
        text += "\n"
    return text
