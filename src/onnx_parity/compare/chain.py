"""A case's status, decided once, from values, by one ordered chain: the comparisons → the
checks that fail a case whatever they say (float16's range, a rollout's own judgement) → the
regression against the baseline → the latency regression → the model's expectation. Every
status a case can end with is written here, but for the parent's word on a case that never
produced an outcome (a placeholder for a case not run yet).

The order is the meaning: each link reads what the links before it settled and nothing after
it. The expectation comes last because it records how a case ended, and it reads that ending
before the regression links, so a growth within the tolerance never passes for the failure on
record (and is said after the expectation's own words).
"""

from __future__ import annotations

import dataclasses
import datetime
from dataclasses import field
from typing import TYPE_CHECKING

from onnx_parity.compare.expect import expectation_verdict, now_passes
from onnx_parity.compare.latency import judge as judge_latency
from onnx_parity.compare.outputs import summarize, verdict
from onnx_parity.compare.sentences import compared_on, picked_sentence
from onnx_parity.findings import CaseDetails, Ended, ExpectationRecord
from onnx_parity.frozen import frozen
from onnx_parity.literals import Stage, Status
from onnx_parity.results import CaseResult, OutputComparison

if TYPE_CHECKING:
    from onnx_parity.compare.baseline import Baseline
    from onnx_parity.plan.cases import Case
    from onnx_parity.spec.model import Regression


@frozen
class Compared:
    """A case that produced outputs and compared them (a rollout: its judged step's).
    `failures` fail the case whatever the comparisons say and lead its message; `said` is the
    comparison in words where the caller has its own (a rollout's), else the outputs' own;
    `selection` names the op that localization found picking among tied scores, whose advice
    is not an atol."""

    comparisons: tuple[OutputComparison, ...]
    failures: tuple[str, ...] = ()
    said: str = ""
    rollout: bool = False
    selection: str = ""


@frozen
class Stopped:
    """A case that stopped before a comparison: a stage's error in the worker, or the parent's
    word on a worker that crashed or hung on it."""

    stage: Stage | None  # None: a case never started, its worker lost on another
    message: str


@frozen
class Skipped:
    """A case that was not checked, and why (no usable GPU, an interrupted run)."""

    message: str


Outcome = Compared | Stopped | Skipped


@frozen
class Rules:
    """What a case is judged by beyond its own comparisons: the baseline run and the model's
    regression settings (None: no baseline), and the model's known failures on record, as of
    `today`."""

    baseline: Baseline | None = None
    regression: Regression | None = None
    expectations: tuple[ExpectationRecord, ...] = ()
    today: datetime.date = field(default_factory=datetime.date.today)


def compared_status(outcome: Compared) -> Status:
    """The chain's first two links: how the case ended on its tolerance and its own checks,
    before any regression. The follow-ups are chosen by it (explain/followups.py)."""
    if outcome.failures:
        return "failed"
    return verdict(outcome.comparisons)


def settle(case: Case, outcome: Outcome, rules: Rules,
           details: CaseDetails | None = None) -> CaseResult:
    """The case's result: its status, stage and message from the whole chain, with what each
    link recorded (the baseline's trend, the judged latency, the expectation) beside
    `details`."""
    return judge(_ended(case, outcome, details or CaseDetails()), rules)


def judge(result: CaseResult, rules: Rules) -> CaseResult:
    """Links 3 to 5 over a result that links 1 and 2 ended (`settle`'s, or one read back from
    a report)."""
    ended = result.status
    if rules.baseline is not None:
        result = _against_baseline(result, rules)
    return _against_expectation(result, ended, rules)


def _ended(case: Case, outcome: Outcome, details: CaseDetails) -> CaseResult:
    """Links 1 and 2: the comparisons, then the checks that fail a case whatever they say."""
    if isinstance(outcome, Skipped):
        return case.result("skipped", message=outcome.message, details=details)
    if isinstance(outcome, Stopped):
        return case.result("error", stage=outcome.stage, message=outcome.message,
                           details=details)
    comparisons = outcome.comparisons
    status = compared_status(outcome)
    if outcome.selection and verdict(comparisons) == "failed":
        said = picked_sentence(comparisons, outcome.selection)
    else:
        said = outcome.said or summarize(comparisons)
    if outcome.failures:
        compared = said if outcome.rollout else compared_on(case.target.name, said)
        said = "; ".join((*outcome.failures, compared))
    return case.result(status, stage=None if status == "passed" else "compare", message=said,
                       outputs=comparisons, details=details)


def _against_baseline(result: CaseResult, rules: Rules) -> CaseResult:
    """Links 3 and 4: a passing case whose error grew since the baseline fails, then one whose
    time per call grew (`regression: {latency}`); a case of any status gets its trend."""
    from onnx_parity.compare.baseline import trend_of  # only a run with a baseline

    assert rules.baseline is not None
    trend, growth = trend_of(result, rules.regression, rules.baseline)
    result = dataclasses.replace(result, baseline=trend)
    if growth and result.status == "passed":
        result = _failed(result, growth)
    old = rules.baseline.cases.get(result.id)
    latency = result.details.latency
    if latency is None or old is None or old.details.latency is None:
        return result
    factor = rules.regression.latency if rules.regression is not None else None
    latency, slower = judge_latency(latency, factor, old.details.latency)
    result = dataclasses.replace(result, details=dataclasses.replace(result.details,
                                                                     latency=latency))
    return _failed(result, slower) if slower and result.status == "passed" else result


def _against_expectation(result: CaseResult, ended: Status, rules: Rules) -> CaseResult:
    """Link 5: the case against its model's known failure on record, judged on how it `ended`
    before the regression links. Met: `xfailed`, its figures kept. Passed: failed, since the
    record is stale (a regression's growth said after). Ended otherwise, or the record past
    `until`: as the links before settled, the record saying so."""
    endings: dict[Status, Ended] = {"passed": "passed", "failed": "failed", "error": "error"}
    if result.status not in endings or ended not in endings:
        return result  # skipped: checked nothing
    record = expectation_verdict(rules.expectations, result.id, endings[ended], result.stage,
                                 rules.today)
    if record is None:
        return result
    result = dataclasses.replace(result, details=dataclasses.replace(result.details,
                                                                     expectation=record))
    if record.verdict == "met":
        return dataclasses.replace(result, status="xfailed")
    if record.verdict == "passes":
        growth = result.message if result.status == "failed" else ""
        return _failed(result, now_passes(record, growth))
    return result


def _failed(result: CaseResult, message: str) -> CaseResult:
    return dataclasses.replace(result, status="failed", stage="compare", message=message)

