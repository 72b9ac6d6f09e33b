"""Known failures on record: a case judged against its model's `expect` in the spec (an
expected failure, a stale record, one that did not match or has expired), and the expectations
that no case of a run matched."""

from __future__ import annotations

import datetime
import fnmatch
from collections.abc import Sequence
from dataclasses import replace

from onnx_parity.findings import Ended, ExpectationRecord, ExpectationVerdict
from onnx_parity.plan.cases import Case
from onnx_parity.plan.select import literal_brackets

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


def expectation_verdict(expectations: Sequence[ExpectationRecord], case_id: str, ended: Ended,
                        stage: str | None, today: datetime.date) -> ExpectationRecord | None:
    """The first expectation that covers the case, with how the case met it (`verdict`) and how
    it `ended` (at `stage`, for an error): met, passes (the record is stale), mismatch (failed
    where an error was expected, or the other way, or at another stage) or expired (past
    `until`). None where no expectation covers the case. What that makes of the case's status
    is the verdict chain's (compare/chain.py)."""
    expectation = expectation_for(expectations, case_id)
    if expectation is None:
        return None
    verdict: ExpectationVerdict
    if expectation.until is not None and today > datetime.date.fromisoformat(expectation.until):
        verdict = "expired"
    elif ended == expectation.status and expectation.stage in (None, stage):
        verdict = "met"
    elif ended == "passed":
        verdict = "passes"
    else:
        verdict = "mismatch"
    return replace(expectation, verdict=verdict, ended=ended)


def now_passes(record: ExpectationRecord, growth: str = "") -> str:
    """A stale record's failure: `now passes: remove the expectation (failed: <reason>)`, and
    the regression that failed the case after it, if one did."""
    return (f"{NOW_PASSES} ({record.status}: {record.reason})"
            + (f"; {growth}" if growth else ""))


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
