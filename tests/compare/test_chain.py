"""The verdict chain (compare/chain.py): each link, and their order, from values alone."""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path

import numpy as np
import pytest

from onnx_parity.compare.baseline import Baseline
from onnx_parity.compare.chain import Compared, Rules, Skipped, Stopped, judge, settle
from onnx_parity.compare.outputs import compare_case
from onnx_parity.findings import CallTimes, CaseDetails, ExpectationRecord, LatencyRecord
from onnx_parity.plan.cases import Case, plan
from onnx_parity.results import CaseResult, OutputComparison, RunReport, Tolerance
from onnx_parity.spec import parse_spec
from onnx_parity.spec.model import Regression

TODAY = datetime.date(2026, 1, 1)
TOLERANCE = Tolerance(atol=1e-4, rtol=1e-3)


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> Case:
    folder = tmp_path_factory.mktemp("chain")
    (folder / "models.py").write_text("def make(): ...\n")
    spec = parse_spec("version: 1\nmodels: [{name: head, torch: 'models.py:make', "
                      "inputs: {x: [batch, 4]}}]\n", folder / "parity.yaml")
    return plan(spec)[0]


def _compared(error: float, reference: float = 1.0) -> tuple[OutputComparison, ...]:
    """One real comparison of an output of four elements, `error` off on one of them."""
    expected = np.full((1, 4), reference, np.float32)
    actual = expected.copy()
    actual[0, 0] += error
    return compare_case(["y"], [[expected]], [[actual]], lambda _=None: TOLERANCE)


def _baseline(case: Case, old: CaseResult) -> Baseline:
    report = RunReport("parity.yaml", {}, (old,))
    return Baseline("base.json", report, cases={case.id: old})


def _times(median: float) -> LatencyRecord:
    return LatencyRecord(onnxruntime=CallTimes(median, median * 0.95, median * 1.05, 10))


def test_link_1_the_comparisons(case: Case) -> None:
    passed = settle(case, Compared(_compared(0.0)), Rules())
    assert (passed.status, passed.stage) == ("passed", None)
    failed = settle(case, Compared(_compared(0.5)), Rules())
    assert (failed.status, failed.stage) == ("failed", "compare")
    assert failed.message.startswith("y: 1 of 4 elements")
    # Every element within atol of zero: the tolerance could not have failed it.
    powerless = settle(case, Compared(_compared(1e-6, reference=1e-6)), Rules())
    assert powerless.status == "error"


def test_link_2_a_check_fails_whatever_the_comparison_says_and_leads_the_message(
        case: Case) -> None:
    result = settle(case, Compared(_compared(0.0), failures=("float16's range: x overflows",)),
                    Rules())
    assert result.status == "failed"
    assert result.message == ("float16's range: x overflows; compared on cpu: all 1 output "
                              "within tolerance")
    rolled = settle(case, Compared(_compared(0.0), failures=("tokens diverge at step 3",),
                                   said="all 1 output within tolerance at all 8 steps",
                                   rollout=True), Rules())
    assert rolled.message == ("tokens diverge at step 3; all 1 output within tolerance at all "
                              "8 steps")


def test_a_selection_among_ties_is_not_advised_an_atol(case: Case) -> None:
    result = settle(case, Compared(_compared(0.5), selection="TopK '/topk'"), Rules())
    assert result.status == "failed"
    assert "picked differently among tied scores by TopK '/topk', which no atol fixes" in (
        result.message)
    assert "needs atol" not in result.message


def test_link_3_growth_since_the_baseline_fails_a_passing_case_only(case: Case) -> None:
    old = settle(case, Compared(_compared(1e-7)), Rules())
    rules = Rules(baseline=_baseline(case, old), regression=Regression())
    grown = settle(case, Compared(_compared(5e-5)), rules)
    assert grown.status == "failed" and grown.message.startswith("regression: max abs")
    assert grown.baseline is not None and grown.baseline.regressed
    beyond = settle(case, Compared(_compared(0.5)), rules)
    assert beyond.status == "failed" and beyond.message.startswith("y: 1 of 4 elements")
    assert beyond.baseline is not None and beyond.baseline.regressed
    unchanged = settle(case, Compared(_compared(1e-7)), rules)
    assert unchanged.status == "passed" and unchanged.baseline is not None


def test_link_4_a_slower_call_fails_a_passing_case(case: Case) -> None:
    old = settle(case, Compared(_compared(0.0)), Rules(), CaseDetails(latency=_times(2.0)))
    rules = Rules(baseline=_baseline(case, old), regression=Regression(latency=1.5))
    slower = settle(case, Compared(_compared(0.0)), rules, CaseDetails(latency=_times(8.0)))
    assert slower.status == "failed" and "regression: ONNX Runtime takes 8.0 ms" in (
        slower.message)
    assert slower.details.latency is not None and slower.details.latency.regressed
    off = Rules(baseline=rules.baseline, regression=Regression())
    assert settle(case, Compared(_compared(0.0)), off,
                  CaseDetails(latency=_times(8.0))).status == "passed"


def test_link_5_the_expectation_reads_how_the_case_ended_before_the_regressions(
        case: Case) -> None:
    failed = ExpectationRecord(model="head", status="failed", reason="#7")
    met = settle(case, Compared(_compared(0.5)), Rules(expectations=(failed,), today=TODAY))
    assert met.status == "xfailed" and met.message.startswith("y: 1 of 4 elements")
    stale = settle(case, Compared(_compared(0.0)), Rules(expectations=(failed,), today=TODAY))
    assert stale.status == "failed"
    assert stale.message == "now passes: remove the expectation (failed: #7)"
    # Slower, but within tolerance: not the failure on record, so the record is stale, and
    # the latency regression is said after it.
    old = settle(case, Compared(_compared(0.0)), Rules(), CaseDetails(latency=_times(2.0)))
    rules = Rules(baseline=_baseline(case, old), regression=Regression(latency=1.5),
                  expectations=(failed,), today=TODAY)
    slower = settle(case, Compared(_compared(0.0)), rules, CaseDetails(latency=_times(8.0)))
    assert slower.status == "failed"
    assert slower.message.startswith("now passes: remove the expectation (failed: #7); "
                                     "regression: ONNX Runtime takes 8.0 ms")
    lapsed = dataclasses.replace(failed, until="2025-12-31")
    expired = settle(case, Compared(_compared(0.5)), Rules(expectations=(lapsed,), today=TODAY))
    assert expired.status == "failed" and expired.details.expectation is not None
    assert expired.details.expectation.verdict == "expired"


def test_a_case_that_stopped_or_was_skipped(case: Case) -> None:
    error = ExpectationRecord(model="head", status="error", reason="no NMS", stage="export")
    rules = Rules(expectations=(error,), today=TODAY)
    at_export = settle(case, Stopped("export", "NonMaxSuppression"), rules)
    assert (at_export.status, at_export.stage) == ("xfailed", "export")
    at_load = settle(case, Stopped("load", "no module"), rules)
    assert at_load.status == "error" and at_load.details.expectation is not None
    assert at_load.details.expectation.verdict == "mismatch"
    skipped = settle(case, Skipped("no usable GPU"), rules)
    assert (skipped.status, skipped.message) == ("skipped", "no usable GPU")
    assert skipped.details.expectation is None  # a skipped case checked nothing


def test_the_chain_is_the_same_on_a_result_read_back(case: Case, tmp_path: Path) -> None:
    """`judge` runs links 3 to 5 on a result links 1 and 2 ended, as `settle` does."""
    from onnx_parity.report.jsonfile import read_json, write_json

    ended = settle(case, Compared(_compared(0.5)), Rules())
    write_json(RunReport("parity.yaml", {}, (ended,)), tmp_path / "r.json")
    (back,) = read_json(tmp_path / "r.json").cases
    failed = ExpectationRecord(model="head", status="failed", reason="#7")
    rules = Rules(expectations=(failed,), today=TODAY)
    assert judge(back, rules).status == settle(case, Compared(_compared(0.5)), rules).status
