"""Known failures on record: a case judged against its model's `expect` in the spec (an
expected failure, a stale record, one that did not match or has expired), and the expectations
that no case of a run matched."""

from __future__ import annotations

import datetime
import fnmatch
from collections.abc import Sequence
from dataclasses import replace

from onnx_parity.findings import ENDINGS, Ended, ExpectationRecord, ExpectationVerdict
from onnx_parity.plan.cases import Case
from onnx_parity.plan.select import literal_brackets
from onnx_parity.results import CaseResult

NOW_PASSES = "now passes: remove the expectation"


def covers(expectation: ExpectationRecord, case_id: str) -> bool:
    """Whether the expectation's `cases` glob matches the case id, or the id's part in brackets
    (`opset17-*` and `mlp[opset17-*` both cover `mlp[opset17-cpu-random-b1]`). Brackets in the
    glob match themselves, as in --select."""
    glob = literal_brackets(expectation.cases)
    inside = case_id.partition("[")[2].removesuffix("]")
    return fnmatch.fnmatchcase(case_id, glob) or fnmatch.fnmatchcase(inside, glob)


def expectation_for(expectations: Sequence[ExpectationRecord],
                    case_id: str) -> ExpectationRecord | None:
    """The first of the model's expectations that covers the case, in spec order."""
    return next((e for e in expectations if covers(e, case_id)), None)


def judge_expectation(result: CaseResult, expectations: Sequence[ExpectationRecord],
                      today: datetime.date) -> CaseResult:
    """The case against its expectation. Met: `xfailed`, with its figures kept. Passed: failed,
    since the record is stale. Ended otherwise (failed where an error was expected, or the other
    way), or past `until`: as it ended, the record saying so. Skipped cases, which checked
    nothing, and cases no expectation covers are returned as they are."""
    if result.status not in ("passed", "failed", "error"):
        return result
    expectation = expectation_for(expectations, result.id)
    if expectation is None:
        return result
    ended = _tolerance_status(result)
    verdict: ExpectationVerdict
    if expectation.until is not None and today > datetime.date.fromisoformat(expectation.until):
        verdict = "expired"
    elif ended == expectation.status and expectation.stage in (None, result.stage):
        verdict = "met"
    elif ended == "passed":
        verdict = "passes"
    else:
        verdict = "mismatch"
    record = replace(expectation, verdict=verdict, ended=ended)
    judged = replace(result, details=replace(result.details, expectation=record))
    if verdict == "met":
        return replace(judged, status="xfailed")
    if verdict == "passes":  # a regression that failed it is said after
        growth = f"; {result.message}" if result.status == "failed" and result.message else ""
        return replace(judged, status="failed", stage="compare",
                       message=f"{NOW_PASSES} ({expectation.status}: {expectation.reason})"
                               f"{growth}")
    return judged


def _tolerance_status(result: CaseResult) -> Ended:
    """How the case ended before the regression check (compare/baseline.py): passed where
    only the growth since the baseline failed it, every output within its tolerance. That is
    not the failure an expectation records, which would otherwise hide the growth."""
    trend = result.baseline
    if result.status == "failed" and trend is not None and trend.regressed and result.outputs \
            and all(output.passed for output in result.outputs):
        return "passed"
    return result.status if result.status in ENDINGS else ""


def unmatched(cases: Sequence[Case]) -> tuple[ExpectationRecord, ...]:
    """The expectations of the run's models that cover none of the run's cases (a glob that
    names no case, or cases this run did not select), in spec order."""
    ids: dict[str, list[str]] = {}
    models = {}
    for case in cases:
        ids.setdefault(case.model.name, []).append(case.id)
        models[case.model.name] = case.model
    return tuple(expectation for name, model in models.items() for expectation in model.expect
                 if not any(covers(expectation, case_id) for case_id in ids[name]))
