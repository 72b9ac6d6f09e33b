"""The words and numbers every report uses to explain a case: formatting, worst output, verdicts."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from typing import Any

from onnx_parity.compare.sentences import output_facts as output_details  # the long form, for JUnit
from onnx_parity.compare.sentences import output_sentence
from onnx_parity.escape import one_line
from onnx_parity.findings import PathStep
from onnx_parity.literals import Status
from onnx_parity.metrics.sqnr import KEY as SQNR_KEY
from onnx_parity.results import CaseResult, OutputComparison, RunReport
from onnx_parity.wording import (
    fmt_measured,
    fmt_metric,
    fmt_needed,
    fmt_pair,
    fmt_seconds,
    fmt_setting,
    fmt_shape,
    fmt_share,
    fmt_value,
    tolerance_text,
)

__all__ = [
    "VERDICT_WORDS",
    "case_reason",
    "cause_text",
    "counts_text",
    "drift_headline",
    "expectation_text",
    "expected_reason",
    "explanations",
    "failing_outputs",
    "failing_step",
    "fmt_measured",
    "fmt_needed",
    "fmt_pair",
    "fmt_seconds",
    "fmt_setting",
    "fmt_shape",
    "fmt_share",
    "fmt_value",
    "models_in_order",
    "output_details",
    "output_sentence",
    "output_severity",
    "path_step",
    "shared_note_text",
    "shared_notes",
    "tokens_text",
    "tolerance_text",
    "value_text",
    "worst_output",
]

VERDICT_WORDS: dict[Status, str] = {
    "passed": "PASSED",
    "failed": "FAILED",
    "error": "ERROR",
    "skipped": "SKIPPED",
    "xfailed": "XFAILED",
}


def value_text(value: Any) -> str:
    """A free-form value (environment, details) as text: strings as they are, the rest as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def output_severity(output: OutputComparison) -> tuple[int, int, float, float]:
    """Sort key, larger is worse: failing first, unfixable by atol first, then by the atol needed
    relative to the atol set (how far off it is), then by the plain error."""
    needed = output.required_atol
    if needed is None:
        ratio = math.inf
    elif output.atol > 0:
        ratio = needed / output.atol
    else:
        ratio = math.inf if needed > 0 else 0.0
    if math.isnan(ratio):
        ratio = math.inf
    max_abs = output.max_abs if not math.isnan(output.max_abs) else math.inf
    return (0 if output.passed else 1, 1 if needed is None else 0, ratio, max_abs)


def worst_output(outputs: Iterable[OutputComparison]) -> OutputComparison | None:
    """The output to show first: the failing one furthest from passing, or the passing one
    closest to its tolerance. Ties keep the outputs' own order."""
    worst: OutputComparison | None = None
    for output in outputs:
        if worst is None or output_severity(output) > output_severity(worst):
            worst = output
    return worst


def failing_outputs(case: CaseResult) -> list[OutputComparison]:
    """The case's failing outputs, worst first."""
    failing = [o for o in case.outputs if not o.passed]
    return sorted(failing, key=output_severity, reverse=True)


def path_step(step: PathStep) -> str:
    """One compared tensor on the drift's path: its max abs error, or its SQNR (a reduced
    precision against the float32 model)."""
    if step.sqnr is not None:
        return fmt_metric(SQNR_KEY, step.sqnr)
    return fmt_measured(step.max_abs) if step.max_abs is not None else "?"


def failing_step(case: CaseResult) -> str:
    """Where a rollout failed: "step 4 of 20"; "" for a case without a failing step."""
    rollout = case.details.rollout
    if rollout is None or rollout.first_failing is None:
        return ""
    return f"step {rollout.first_failing} of {rollout.steps}"


def tokens_text(case: CaseResult) -> str:
    """A decoder's failing tokens, short: "tokens diverge at step 5 of 16: 13 vs 8 (drift)";
    "" where its tokens did not fail it."""
    tokens = case.details.tokens
    if tokens is None or not tokens.failed:
        return ""
    return (f"tokens diverge at step {tokens.step} of {tokens.steps}: {tokens.expected} vs "
            f"{tokens.actual} (drift)")


def cause_text(case: CaseResult) -> str:
    """The cause a second run proved (explain/causes.py); "" when none was."""
    cause = case.details.cause
    return cause.message if cause is not None and cause.proven else ""


def drift_headline(case: CaseResult) -> str:
    """Where the drift starts (explain/localize/); "" when not known."""
    divergence = case.details.divergence
    return divergence.headline if divergence is not None else ""


def explanations(case: CaseResult) -> list[str]:
    """What every report says under a case's reason: its proven cause, where the drift
    starts, then what its known failure on record (`expect`) made of it."""
    return [text for text in (cause_text(case), drift_headline(case), expectation_text(case))
            if text]


def expectation_text(case: CaseResult) -> str:
    """How the case met its expectation, where that changed or qualifies its verdict: how an
    expected failure ended, or why the expectation did not hold; "" otherwise."""
    record = case.details.expectation
    if record is None:
        return ""
    at = f" at {record.stage}" if record.stage else ""
    expected = f"expected to end {record.status}{at} ({record.reason})"
    if record.verdict == "met":  # what it ended with, as a failed or errored case says it
        ended = case_reason(case, "error" if record.ended == "error" else "failed")
        return f"ended {record.ended} as expected: {one_line(ended, 300)}"
    if record.verdict == "mismatch":
        where = f" at {case.stage}" if record.ended == "error" and case.stage else ""
        return f"{expected}, but it ended {record.ended}{where}: the expectation did not match"
    if record.verdict == "expired":
        return (f"the expectation expired on {record.until}: {expected}; judged as any case"
                + ("; it passes now, remove the expectation" if record.ended == "passed"
                   else ""))
    return ""


def expected_reason(case: CaseResult) -> str:
    """An expected failure's word in every report: `expected failure: <reason>`."""
    record = case.details.expectation
    return f"expected failure: {record.reason if record is not None else 'no reason recorded'}"


def case_reason(case: CaseResult, ended: Status | None = None) -> str:
    """Why the case ended as it did (or as it `ended` before its expectation made it an
    expected failure), in one sentence (not yet cleaned or shortened)."""
    status = ended or case.status
    if status == "error":
        return f"{case.stage or 'run'}: {case.message or 'no message'}"
    if status == "failed":
        if case.message:
            return case.message
        failing = failing_outputs(case)
        return output_sentence(failing[0]) if failing else "outputs drifted beyond tolerance"
    if status == "skipped":
        return case.message or "skipped"
    if status == "xfailed":
        return expected_reason(case)
    return case.message


def shared_notes(cases: Sequence[CaseResult]) -> dict[str, int]:
    """The notes that more than one of a model's cases carries (the factory's training mode,
    say), each with how many carry it: said once for the model, not once per case."""
    counted: dict[str, int] = {}
    for case in cases:
        for note in dict.fromkeys(case.notes):
            counted[note] = counted.get(note, 0) + 1
    return {note: count for note, count in counted.items() if count > 1}


def shared_note_text(note: str, count: int, cases: int) -> str:
    """The model's line for a shared note: `note: …`, or `note (3 of 8 cases): …`."""
    return f"note: {note}" if count == cases else f"note ({count} of {cases} cases): {note}"


def models_in_order(report: RunReport) -> dict[str, list[CaseResult]]:
    """The report's cases grouped by model, models in order of first appearance."""
    groups: dict[str, list[CaseResult]] = {}
    for case in report.cases:
        groups.setdefault(case.model, []).append(case)
    return groups


def counts_text(counts: dict[str, int]) -> str:
    """ "4 passed, 1 failed, 2 errors, 0 skipped" """
    errors, xfailed = counts.get("error", 0), counts.get("xfailed", 0)
    return (
        f"{counts.get('passed', 0)} passed, {counts.get('failed', 0)} failed,"
        f" {errors} error{'' if errors == 1 else 's'}, {counts.get('skipped', 0)} skipped"
    ) + (f", {xfailed} expected failure{'' if xfailed == 1 else 's'}" if xfailed else "")


def counts_mark(counts: dict[str, int]) -> str:
    """❌ for any failure or error; ✅ where something passed (or failed as expected); ⚠️ where
    nothing passed and nothing failed (no cases, or all skipped): not a green check."""
    if counts["failed"] or counts["error"]:
        return "❌"
    return "✅" if counts["passed"] or counts["xfailed"] else "⚠️"


def run_mark(report: RunReport) -> str:
    """The whole run's mark: ❌ for a run that did not finish, whatever it counted."""
    return "❌" if not report.complete else counts_mark(report.counts)


def sentence_case(text: str) -> str:
    return text[:1].upper() + text[1:]
