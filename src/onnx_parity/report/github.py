"""GitHub Actions workflow commands: an error annotation on the spec line of each model that
drifted, and a warning when the regression check could not be done."""

# No `from __future__ import annotations` here: this module's public `annotations()` would
# rebind that name. Everything below is valid at runtime on Python 3.10+ without it.

from collections.abc import Sequence

from onnx_parity.errors import SpecProblem
from onnx_parity.escape import ELLIPSIS, clean_text, one_line
from onnx_parity.report.describe import case_reason, explanations, models_in_order
from onnx_parity.report.rank import FAILING, severity, worst_first
from onnx_parity.results import CaseResult, RunReport
from onnx_parity.wording import counted

ANNOTATION_LIMIT = 10  # GitHub shows at most 10 error annotations per step
CASES_PER_ANNOTATION = 20
REASON_LIMIT = 300  # a case's reason on one line, here and in the pull-request comment


def escape_data(text: str) -> str:
    """A workflow command's message, per GitHub's rules: % first, then CR and LF."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value: the message rules plus `:` and `,`, which would
    otherwise end the value."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _title(model: str, cases: list[CaseResult]) -> str:
    failed = sum(c.status == "failed" for c in cases)
    errors = sum(c.status == "error" for c in cases)
    of = f"of {counted(len(cases), 'case')}"
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
    failing = worst_first(cases)
    lines = [_case_message(c) for c in failing[:CASES_PER_ANNOTATION]]
    rest = len(failing) - CASES_PER_ANNOTATION
    if rest > 0:
        lines.append(f"… and {counted(rest, 'more failing case')};"
                     " the job summary and the JSON report list them")
    return "\n".join(lines)


def _command(spec_file: str, line: int | None, title: str, message: str,
             kind: str = "error", column: int | None = None) -> str:
    # Text is cleaned of control characters before escaping: GitHub's escaping covers only
    # CR and LF, and a stray ESC or NUL has no business in an annotation.
    properties = [f"file={escape_property(clean_text(spec_file))}"]
    if line is not None:
        properties.append(f"line={line}")
    if column is not None:
        properties.append(f"col={column}")
    properties.append(f"title={escape_property(clean_text(title))}")
    return f"::{kind} {','.join(properties)}::{escape_data(clean_text(message))}"


def annotations(report: RunReport, spec_file: str, limit: int = ANNOTATION_LIMIT) -> list[str]:
    """`::error` workflow commands, one per model with a failed or errored case, placed on the
    model's entry in the spec, its cases worst first. Past `limit` models, the worst models are
    shown (rank.py: errors, then the furthest from passing) and the last one sums up the
    rest."""
    failing = [
        (model, cases)
        for model, cases in models_in_order(report).items()
        if any(c.status in FAILING for c in cases)
    ]
    if limit <= 0 or not failing:
        return []
    if len(failing) > limit:  # GitHub would drop the rest: the worst models go first
        failing.sort(key=lambda group: max(severity(c) for c in group[1]), reverse=True)
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
        failing_cases = sum(1 for _, group in rest for c in group if c.status in FAILING)
        more = counted(len(rest), "more failing model")
        commands.append(_command(
            spec_file,
            None,
            f"onnx-parity: {more}",
            f"and {more} ({counted(failing_cases, 'failing case')}): {listed};"
            " the job summary and the JSON report have them all",
        ))
    return commands


def baseline_warning(report: RunReport, spec_file: str) -> list[str]:
    """A `::warning` when a baseline was asked for but could not be read: the regression check
    did not take place, and the run must not look as if it had."""
    record = report.baseline
    if record is None or record.done:
        return []
    problem = one_line(record.problem or "the baseline could not be read", 500)
    return [_command(spec_file, None, "onnx-parity: regression check not done",
                     f"no comparison with the baseline: {problem}", kind="warning")]


def spec_annotations(problems: Sequence[SpecProblem], spec_file: str,
                     limit: int = ANNOTATION_LIMIT) -> list[str]:
    """One `::error` per spec problem, on its line and column; past `limit`, the last one says
    how many more there are (the log and the job summary list them all)."""
    if limit <= 0:
        return []
    shown = problems if len(problems) <= limit else problems[: limit - 1]
    commands = [_command(spec_file, p.line, "onnx-parity: spec error", p.message,
                         column=p.column) for p in shown]
    if len(shown) < len(problems):
        rest = len(problems) - len(shown)
        commands.append(_command(spec_file, None, "onnx-parity: spec errors",
                                 f"and {rest} more spec errors; the log and the job summary "
                                 "list them all"))
    return commands
