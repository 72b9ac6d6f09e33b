"""The terminal report: one line per case as it finishes, and a per-model table at the end."""

from __future__ import annotations

from onnx_parity.escape import no_command, one_line, shorten
from onnx_parity.literals import STATUSES
from onnx_parity.report import trend
from onnx_parity.report.describe import (
    VERDICT_WORDS,
    case_reason,
    counts_text,
    explanations,
    failing_outputs,
    fmt_seconds,
    models_in_order,
    output_severity,
)
from onnx_parity.results import CaseResult, RunReport

LINE_WIDTH = 120
MIN_REASON = 40  # a reason cut shorter than this explains nothing, so the line runs long instead
WORST_LIMIT = 100
_WORD_WIDTH = max(len(word) for word in VERDICT_WORDS.values())


def terminal_width() -> int | None:
    """The width to cut case lines to: the terminal's; None (no cut) when the output is not a
    terminal (a CI log, whose viewer wraps long lines, or a file)."""
    import shutil
    import sys

    if not sys.stdout.isatty():
        return None
    return shutil.get_terminal_size((LINE_WIDTH, 24)).columns


def case_line(case: CaseResult, width: int | None = LINE_WIDTH) -> str:
    """`FAILED  mlp[opset17-cpu-wide-b8] (1.20s): logits: …`, the reason cut to fit `width`
    (None: whole); the proven cause and where the drift starts follow on lines of their own."""
    word = VERDICT_WORDS[case.status].ljust(_WORD_WIDTH)
    head = f"{one_line(case.id)} ({fmt_seconds(case.seconds)})"
    line = f"{word} {head}"
    if case.status == "passed":
        return line
    room = None if width is None else max(width - len(word) - 1 - len(head) - 2, MIN_REASON)
    line = f"{line}: {one_line(case_reason(case), room)}"
    # The proven cause and where the drift starts, each on a line of its own so the reason's
    # cut cannot take them: `        ↳ drift starts at Gemm '/0/Gemm' in module 0 (Linear)`.
    for text in explanations(case):
        line += f"\n{' ' * (_WORD_WIDTH + 1)}↳ {one_line(text)}"
    return line


def _worst_case(cases: list[CaseResult]) -> CaseResult | None:
    """The case to name in the table: the first that could not be compared at all, else the
    drifted case whose worst output is furthest off."""
    errors = [c for c in cases if c.status == "error"]
    if errors:
        return errors[0]
    failed = [c for c in cases if c.status == "failed"]
    if not failed:
        return None

    def key(case: CaseResult) -> tuple[int, int, float, float]:
        outputs = failing_outputs(case)
        return output_severity(outputs[0]) if outputs else (1, 0, 0.0, 0.0)

    return max(failed, key=key)


def final_table(report: RunReport) -> str:
    """Per model: counts by status and the worst case; then the run's totals."""
    # Expected failures have a column where there are any, so that other runs' tables keep theirs.
    statuses = [s for s in STATUSES if s != "xfailed" or report.counts["xfailed"]]
    header = ["model", *("errors" if s == "error" else s for s in statuses), "worst case"]
    rows: list[list[str]] = []
    for model, cases in models_in_order(report).items():
        counts: dict[str, int] = dict.fromkeys(STATUSES, 0)
        for case in cases:
            counts[case.status] += 1
        worst = _worst_case(cases)
        worst_text = "—"
        if worst is not None:
            worst_text = shorten(
                f"{one_line(worst.id)}: {one_line(case_reason(worst))}", WORST_LIMIT
            )
        name = no_command(one_line(model, 40))
        rows.append([name, *(str(counts[s]) for s in statuses), worst_text])

    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]

    def render(row: list[str]) -> str:
        name, *numbers, worst_text = row
        cells = [name.ljust(widths[0])]
        cells.extend(n.rjust(w) for n, w in zip(numbers, widths[1:], strict=True))
        return "  ".join([*cells, worst_text]).rstrip()

    lines = [render(header), "-" * len(render(header))]
    lines.extend(render(row) for row in rows)
    counts = report.counts
    lines.append(f"{counts_text(counts)} in {report.seconds:.1f}s")
    lines.extend(_baseline_lines(report))
    return "\n".join(lines) + "\n"


def _baseline_lines(report: RunReport) -> list[str]:
    """The comparison with the baseline: what moved, and what changed in between."""
    if report.baseline is None:
        return []
    lines = [no_command(trend.headline(report))]
    changes = trend.environment_text(report)
    if trend.compared(report):
        lines.append(f"  changed since the baseline: {changes}" if changes
                     else "  same versions as the baseline")
    return lines
