"""Known failures on record: a model's `expect`, met, stale, mismatched, expired and unmatched,
through real runs of ONNX files (no export) and every report."""

from __future__ import annotations

import dataclasses
import datetime
import json
import shutil
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from helpers import ROOT
from onnx_parity.cli.main import main
from onnx_parity.compare.chain import Rules, judge
from onnx_parity.compare.expect import covers
from onnx_parity.errors import SpecError
from onnx_parity.findings import ExpectationRecord
from onnx_parity.report.jsonfile import ReportFormatError, read_json
from onnx_parity.results import CaseResult
from onnx_parity.spec import load_spec
from report_fixtures import failing_case, passing_case

# head passes, drifted-head drifts, broken cannot be loaded (two cases each, but drifted-head).
_MODELS = """
version: 1
datasets:
  golden: {kind: onnx-test-data, path: golden/data, batch_sizes: [1, 4]}
  drifted: {kind: onnx-test-data, path: golden/drifted}
models:
  - name: head
    onnx: golden/head.onnx
    datasets: [golden]
%(head)s
  - name: drifted-head
    onnx: golden/head.onnx
    datasets: [drifted]
%(drifted)s
  - name: broken
    onnx: golden/broken.onnx
    datasets: [golden]
%(broken)s
"""


def _spec(folder: Path, name: str = "parity.yaml", **expect: str) -> Path:
    if not (folder / "golden").exists():
        shutil.copytree(ROOT / "examples" / "golden", folder / "golden")
        (folder / "golden" / "broken.onnx").write_bytes(b"not an ONNX model")
    keys = {key: textwrap.indent(textwrap.dedent(expect.get(key, "")).strip(), " " * 4)
            for key in ("head", "drifted", "broken")}
    spec = folder / name
    spec.write_text(_MODELS % keys)
    return spec


def _json(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


# -- the spec --------------------------------------------------------------------------------


def test_expect_takes_one_mapping_or_a_list(tmp_path: Path) -> None:
    spec = load_spec(_spec(
        tmp_path,
        drifted="expect: {status: failed, reason: 'tracked in #12', until: '2999-12-31'}",
        broken="""
        expect:
          - {cases: "*-b1", status: error, reason: "file truncated"}
          - {cases: "opset99-*", status: failed, reason: "never planned"}
        """))
    head, drifted, broken = spec.models
    assert head.expect == ()
    assert drifted.expect == (ExpectationRecord(model="drifted-head", status="failed",
                                                reason="tracked in #12", until="2999-12-31",
                                                line=drifted.expect[0].line),)
    assert [(e.cases, e.status) for e in broken.expect] == [("*-b1", "error"),
                                                            ("opset99-*", "failed")]
    assert broken.expect[0].line == 19


@pytest.mark.parametrize("expect, says", [
    ("expect: {status: passed, reason: x}", "status"),
    ("expect: {status: failed}", "reason"),
    ("expect: {status: failed, reason: x, until: 2024-02-30}", "is not a date"),
    ("expect: {status: failed, reason: x, until: tomorrow}", "until"),
    ("expect: {status: failed, reason: x, case: '*'}", "case"),
    ("expect: {status: error, reason: x, stage: compile}", "stage"),
    ("expect: {status: failed, reason: x, stage: export}", "goes with `status: error`"),
])
def test_expect_problems_name_their_line(tmp_path: Path, expect: str, says: str) -> None:
    with pytest.raises(SpecError) as caught:
        load_spec(_spec(tmp_path, drifted=expect))
    assert any(says in str(p) and p.line == 14 for p in caught.value.problems), (
        caught.value.problems)


# -- the judge -------------------------------------------------------------------------------


def _judged(result: CaseResult, expectations: Sequence[ExpectationRecord],
            today: datetime.date) -> CaseResult:
    """The verdict chain's links after the comparison (compare/chain.py), on `result`."""
    return judge(result, Rules(expectations=tuple(expectations), today=today))


def test_the_judge() -> None:
    today = datetime.date(2025, 6, 1)
    failed, passed = failing_case("m", 1), passing_case("m", 1)
    expect = ExpectationRecord(model="m", status="failed", reason="r", until="2025-06-01")
    met = _judged(failed, [expect], today)
    assert met.status == "xfailed" and met.outputs == failed.outputs
    assert met.details.expectation is not None and met.details.expectation.ended == "failed"
    stale = _judged(passed, [expect], today)
    assert stale.status == "failed" and stale.message == "now passes: remove the expectation " \
                                                         "(failed: r)"
    lapsed = _judged(failed, [expect], datetime.date(2025, 6, 2))
    assert lapsed.status == "failed" and lapsed.details.expectation is not None
    assert lapsed.details.expectation.verdict == "expired"
    other = ExpectationRecord(model="m", status="error", reason="r")
    assert _judged(failed, [other], today).status == "failed"
    # The first that covers the case is its; one that covers nothing leaves it alone.
    assert covers(ExpectationRecord(model="m", status="error", reason="", cases="opset18-*"),
                  failed.id)
    assert covers(ExpectationRecord(model="m", status="error", reason="", cases="m[opset18-*"),
                  failed.id)
    narrow = ExpectationRecord(model="m", status="error", reason="", cases="opset17-*")
    assert _judged(failed, [narrow], today) == failed


def test_an_expected_error_at_one_stage_does_not_cover_another() -> None:
    """`stage` pins an expected error to where it happens: an export error on record does not
    keep the gate green when the model stops loading."""
    today = datetime.date(2025, 6, 1)
    export = ExpectationRecord(model="m", status="error", reason="NMS", stage="export")
    base = passing_case("m", 1)
    at_export = dataclasses.replace(base, status="error", stage="export", message="no NMS")
    at_load = dataclasses.replace(base, status="error", stage="load", message="no module")
    assert _judged(at_export, [export], today).status == "xfailed"
    loading = _judged(at_load, [export], today)
    assert loading.status == "error" and loading.details.expectation is not None
    assert loading.details.expectation.verdict == "mismatch"
    from onnx_parity.report.describe import expectation_text

    assert expectation_text(loading) == ("expected to end error at export (NMS), but it ended "
                                         "error at load: the expectation did not match")
    anywhere = dataclasses.replace(export, stage=None)
    assert _judged(at_load, [anywhere], today).status == "xfailed"


# -- end to end ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One run with an expectation met, stale, mismatched and unmatched, and every report."""
    folder = tmp_path_factory.mktemp("mixed")
    spec = _spec(
        folder,
        head="expect: {status: failed, reason: 'was off by 1e-3 (#7)'}",
        drifted="expect: {status: failed, reason: 'drifted data, tracked in #12'}",
        broken="""
        expect:
          - {cases: "*-b1", status: error, reason: "file truncated"}
          - {cases: "*-b4", status: failed, reason: "wrong kind on purpose"}
          - {cases: "opset99-*", status: error, reason: "matches nothing"}
        """)
    paths = {name: folder / name for name in ("report.json", "junit.xml", "summary.md")}
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("GITHUB_ACTIONS", raising=False)
        code = main(["run", str(spec), "--json", str(paths["report.json"]), "--junit",
                     str(paths["junit.xml"]), "--summary", str(paths["summary.md"])])
    return {"code": code, "folder": folder, "spec": spec, **paths}


def test_each_verdict_in_the_json(mixed: dict[str, Any]) -> None:
    assert mixed["code"] == 1  # the stale record and the mismatch fail the gate
    report = _json(mixed["report.json"])
    found = {c["id"]: (c["status"], c["details"].get("expectation", {}).get("verdict"))
             for c in report["cases"]}
    assert found == {
        "head[onnx-cpu-golden-b1]": ("failed", "passes"),
        "head[onnx-cpu-golden-b4]": ("failed", "passes"),
        "drifted-head[onnx-cpu-drifted]": ("xfailed", "met"),
        "broken[onnx-cpu-golden-b1]": ("xfailed", "met"),
        "broken[onnx-cpu-golden-b4]": ("error", "mismatch"),
    }
    assert report["summary"] == {"passed": 0, "failed": 2, "errors": 1, "skipped": 0,
                                 "xfailed": 2}
    cases = {c["id"]: c for c in report["cases"]}
    head = cases["head[onnx-cpu-golden-b1]"]
    assert head["message"] == ("now passes: remove the expectation (failed: was off by 1e-3 "
                               "(#7))")
    drifted = cases["drifted-head[onnx-cpu-drifted]"]
    assert drifted["outputs"] and not drifted["outputs"][0]["passed"]  # its numbers stay
    assert drifted["outputs"][0]["max_abs"] > 0
    assert drifted["details"]["expectation"]["ended"] == "failed"
    assert [(e["model"], e["cases"]) for e in report["unmatched_expectations"]] == [
        ("broken", "opset99-*")]
    # Read back whole.
    assert read_json(mixed["report.json"]).counts["xfailed"] == 2


@pytest.mark.parametrize(("where", "key", "value"), [
    ("unmatched", "status", "flaky"),
    ("case", "verdict", "maybe"),
    ("case", "ended", "xfailed"),
])
def test_an_expectation_word_outside_its_literal_is_a_format_error(
        mixed: dict[str, Any], tmp_path: Path, where: str, key: str, value: str) -> None:
    report = _json(mixed["report.json"])
    if where == "unmatched":
        record, named = report["unmatched_expectations"][0], r"unmatched_expectations\[0\]"
    else:
        index = next(i for i, c in enumerate(report["cases"]) if "expectation" in c["details"])
        record, named = report["cases"][index]["details"]["expectation"], (
            rf"cases\[{index}\]\.details\.expectation")
    record[key] = value
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(report))
    with pytest.raises(ReportFormatError, match=rf"{named}\.{key}: '{value}' is not one of"):
        read_json(path)


def test_each_verdict_in_junit_summary_and_console(mixed: dict[str, Any],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    junit = mixed["junit.xml"].read_text()
    assert ('<skipped type="ExpectedFailure" message="expected failure: drifted data, tracked '
            'in #12"') in junit
    assert 'type="StaleExpectation" message="now passes: remove the expectation' in junit
    assert "the expectation did not match" in junit
    summary = mixed["summary.md"].read_text()
    assert "2 expected failures" in summary.splitlines()[0]
    assert ("### ⚠️ Expectations: 2 expected failures, 2 now passes, 1 did not match, "
            "1 matched no case") in summary
    assert "| broken | opset99-\\* | error | matches nothing | 21 |" in summary
    assert "🔶 expected failure" in summary
    # The console: the word, the reason, and how it ended.
    main(["merge", str(mixed["report.json"])])
    out = capsys.readouterr().out
    assert "xfailed" in out.splitlines()[1]  # the table's column
    assert "0 passed, 2 failed, 1 error, 0 skipped, 2 expected failures" in out


def test_console_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Only expectations that hold: the gate is green; lapsed ones fail as usual."""
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    spec = _spec(tmp_path, drifted="expect: {status: failed, reason: 'tracked in #12'}",
                 broken="expect: {status: error, reason: 'file truncated', until: '2999-01-01'}")
    assert main(["run", str(spec), "--json", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert "XFAILED drifted-head[onnx-cpu-drifted]" in out
    assert "expected failure: tracked in #12" in out
    assert "↳ ended failed as expected:" in out
    lapsed = _spec(tmp_path, "lapsed.yaml",
                   drifted="expect: {status: failed, reason: 'tracked', until: '2001-02-03'}")
    assert main(["run", str(lapsed), "--select", "drifted-head*"]) == 1
    out = capsys.readouterr().out
    assert "FAILED  drifted-head[onnx-cpu-drifted]" in out
    assert "the expectation expired on 2001-02-03" in out


def test_merge_and_baseline_keep_the_word(mixed: dict[str, Any], tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    spec = mixed["spec"]
    shards = []
    for k in (1, 2):
        path = tmp_path / f"shard-{k}.json"
        main(["run", str(spec), "--shard", f"{k}/2", "--json", str(path), "--fail-on", "never",
              "--baseline", str(mixed["report.json"])])
        shards.append(str(path))
    merged = tmp_path / "merged.json"
    assert main(["merge", *shards, "--json", str(merged)]) == 1
    whole, joined = _json(mixed["report.json"]), _json(merged)
    assert [(c["id"], c["status"]) for c in joined["cases"]] == [
        (c["id"], c["status"]) for c in whole["cases"]]
    assert joined["summary"] == whole["summary"]
    assert joined["unmatched_expectations"] == whole["unmatched_expectations"]
    # Against the baseline, the expected failure still has its trend.
    drifted = next(c for c in joined["cases"] if c["model"] == "drifted-head")
    assert drifted["baseline"]["status"] == "compared" and drifted["baseline"]["trend"] == "same"


def test_an_expected_drift_that_is_now_within_tolerance_but_regressed_is_not_met() -> None:
    """The regression check fails a case whose outputs are within tolerance but grew since the
    baseline. Under `expect: failed` (a drift beyond tolerance), that is not the failure on
    record: the case passes its tolerance now, so the gate stays red and says to remove it."""
    from dataclasses import replace

    from onnx_parity.compare.baseline import Baseline
    from onnx_parity.results import RunReport
    from onnx_parity.spec.model import Regression

    within = passing_case("m", 1)
    (output,) = within.outputs
    grown = replace(within, outputs=(replace(output, max_abs=9e-5, scale=1.0),))
    before = replace(within, status="failed",
                     outputs=(replace(output, max_abs=1e-6, scale=1.0),))
    base = Baseline("base.json", RunReport("parity.yaml", {}, (before,)),
                    cases={before.id: before})
    expect = ExpectationRecord(model="m", status="failed", reason="tracked in #7")
    rules = Rules(baseline=base, regression=Regression(), expectations=(expect,),
                  today=datetime.date(2025, 6, 1))
    judged = judge(grown, rules)
    assert judged.status == "failed"
    assert judged.message is not None and judged.message.startswith(
        "now passes: remove the expectation (failed: tracked in #7)")
    assert "regression: max abs 1.0e-6 → 9.0e-5" in judged.message
    assert judged.details.expectation is not None
    assert (judged.details.expectation.verdict, judged.details.expectation.ended) == (
        "passes", "passed")
    # A drift beyond tolerance that also grew is still the failure on record.
    drifted = failing_case("m", 1)
    assert judge(drifted, rules).status == "xfailed"
