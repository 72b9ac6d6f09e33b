"""The regression check against a baseline run: a shipped model whose error grew within
tolerance fails, float noise never does, and a baseline that cannot be used says so."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from helpers import DATA, FIXTURES
from onnx_parity.cli.main import main
from onnx_parity.compare import baseline, metrics
from onnx_parity.compare.chain import Rules, judge
from onnx_parity.errors import SpecError
from onnx_parity.plan.merge import merge_reports
from onnx_parity.report.jsonfile import from_dict, read_baseline, read_json, to_dict, write_json
from onnx_parity.report.trend import histogram_lines
from onnx_parity.results import (
    BaselineRun,
    CaseResult,
    CaseTrend,
    OutputComparison,
    OutputTrend,
    RunReport,
)
from onnx_parity.spec import parse_spec
from onnx_parity.spec.model import Regression
from report_fixtures import planned

FACTORY = '''
import torch


def make():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 4))
'''


def _ship(folder: Path, nudge: float = 0.0) -> None:
    """The factory's Linear as the ONNX file a team ships, its bias moved by `nudge`."""
    import onnx
    import torch
    from onnx import TensorProto, helper, numpy_helper

    torch.manual_seed(0)
    layer = torch.nn.Linear(8, 4)
    weight = layer.weight.detach().numpy().T.copy()
    bias = (layer.bias.detach().numpy() + np.float32(nudge)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w", "b"], ["y"])], "lin",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, folder / "lin.onnx")


def _spec(folder: Path, extra: str = "") -> Path:
    (folder / "lin.py").write_text(FACTORY)
    path = folder / "parity.yaml"
    path.write_text(textwrap.dedent("""\
        version: 1
        {extra}
        models:
          - name: lin
            torch: lin.py:make
            onnx: lin.onnx
            inputs:
              x: {{shape: [batch, 8]}}
        """).format(extra=extra))
    return path


@pytest.fixture(scope="module")
def base_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The base branch's run: the shipped file is the exact export (error ~6e-8)."""
    folder = tmp_path_factory.mktemp("base")
    _ship(folder)
    spec = _spec(folder)
    assert main(["run", str(spec), "--json", str(folder / "base.json")]) == 0
    return folder / "base.json"


@pytest.fixture
def branch(tmp_path: Path, base_report: Path, capsys: pytest.CaptureFixture[str],
           monkeypatch: pytest.MonkeyPatch) -> Callable[..., tuple[int, str, str, dict[str, Any]]]:
    """The pull request's run against the baseline, as GitHub Actions runs it."""
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.setenv("GITHUB_WORKSPACE", str(tmp_path))

    def run(nudge: float = 0.0, extra: str = "", base: Path | None = None,
            ) -> tuple[int, str, str, dict[str, Any]]:
        _ship(tmp_path, nudge)
        spec = _spec(tmp_path, extra)
        capsys.readouterr()
        code = main(["run", str(spec), "--json", str(tmp_path / "report.json"),
                     "--summary", str(tmp_path / "summary.md"),
                     "--junit", str(tmp_path / "junit.xml"),
                     "--baseline", str(base or base_report)])
        out, err = capsys.readouterr()
        return code, out, err, json.loads((tmp_path / "report.json").read_text())

    return run


def test_an_unchanged_run_passes_against_its_own_baseline(
        branch: Callable[..., Any], tmp_path: Path) -> None:
    code, out, _, report = branch()
    case = report["cases"][0]
    assert code == 0, out
    assert case["status"] == "passed"
    assert case["baseline"]["status"] == "compared"
    assert case["baseline"]["trend"] == "same" and not case["baseline"]["regressed"]
    assert report["baseline"]["done"] and report["baseline"]["environment"] == []
    assert "against the baseline" in out and "0 regressed, 1 compared" in out
    assert "| = |" in (tmp_path / "summary.md").read_text()


def test_an_error_that_grew_within_tolerance_fails_as_a_regression(
        branch: Callable[..., Any], base_report: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    # Without the baseline the nudged file passes: 3e-5 is within atol 1e-4.
    _ship(tmp_path, 3e-5)
    assert main(["run", str(_spec(tmp_path)), "--json", str(tmp_path / "alone.json")]) == 0
    before = read_json(base_report).cases[0].outputs[0].max_abs
    assert before < 1e-6

    code, out, _, report = branch(nudge=3e-5)
    case = report["cases"][0]
    assert code == 1
    assert case["status"] == "failed" and case["stage"] == "compare"
    message = case["message"]
    assert message.startswith("regression: max abs ")
    assert "→ 3.0e-5 (×" in message and "since the baseline" in message
    assert "still within atol 1e-4" in message
    assert case["baseline"]["regressed"] and case["baseline"]["ratio"] > 100
    assert case["baseline"]["max_abs"] == pytest.approx(before)
    annotation = next(line for line in out.splitlines() if line.startswith("::error "))
    assert "regression: max abs" in annotation and "since the baseline" in annotation
    summary = (tmp_path / "summary.md").read_text()
    assert "| Trend |" in summary and "⚠️ ×" in summary and "↑" in summary
    assert "1 regressed, 1 compared" in summary
    # The regressed output's error histogram: every element off by about 3e-5.
    assert case["outputs"][0]["histogram"]["counts"][6] == case["outputs"][0]["elements"]
    assert "1e-5..1e-4 │" in summary
    junit = (tmp_path / "junit.xml").read_text()
    assert '<failure type="Regression" message="regression: max abs' in junit
    assert '<property name="baseline.trend" value="⚠️ ×' in junit


def test_regression_off_reports_the_trend_but_does_not_fail(branch: Callable[..., Any]) -> None:
    code, _, _, report = branch(nudge=3e-5, extra="defaults:\n  regression: off")
    record = report["cases"][0]["baseline"]
    assert code == 0
    assert record["check"] == "off" and record["trend"] == "up" and not record["regressed"]


def test_a_floor_above_the_growth_lets_it_pass(branch: Callable[..., Any]) -> None:
    code, _, _, report = branch(nudge=3e-5, extra="defaults:\n  regression: {floor: 1.0e-4}")
    assert code == 0 and not report["cases"][0]["baseline"]["regressed"]


def test_versions_that_differ_between_the_runs_are_shown(
        branch: Callable[..., Any], base_report: Path, tmp_path: Path) -> None:
    data = json.loads(base_report.read_text())
    packages = data["environment"]["packages"]
    now_torch = packages["torch"]
    packages["torch"] = "2.12.0"
    packages["onnxruntime-gpu"] = "1.30.0"
    packages["polygraphy"] = "0.49.0"
    edited = tmp_path / "older.json"
    edited.write_text(json.dumps(data))

    code, out, _, report = branch(base=edited)
    assert code == 0
    assert ["torch", "2.12.0", now_torch] in report["baseline"]["environment"]
    assert ["polygraphy", "0.49.0", None] in report["baseline"]["environment"]
    assert f"torch 2.12.0 → {now_torch}" in out
    summary = (tmp_path / "summary.md").read_text()
    assert "| Changed since the baseline | Baseline | This run |" in summary
    assert "| polygraphy | 0.49.0 | — |" in summary


@pytest.mark.parametrize("content", ["{not json", '{"version": 1, "spec": 3}', None])
def test_a_baseline_that_cannot_be_read_is_a_warning_and_the_check_is_not_done(
        branch: Callable[..., Any], tmp_path: Path, content: str | None) -> None:
    broken = tmp_path / "base.json"
    if content is not None:
        broken.write_text(content)
    code, out, err, report = branch(nudge=3e-5, base=broken)
    assert code == 0  # the tolerance holds; only the regression check is missing
    assert "warning: regression check not done" in err and str(broken) in err
    assert report["baseline"]["done"] is False and str(broken) in report["baseline"]["problem"]
    assert any(line.startswith("::warning ") and "regression check not done" in line
               for line in out.splitlines())
    summary = (tmp_path / "summary.md").read_text()
    assert "⚠️ **Regression check not done:" in summary
    assert "| Trend |" not in summary
    junit = (tmp_path / "junit.xml").read_text()
    assert '<testcase name="baseline"' in junit
    assert '<skipped type="skipped" message="regression check not done: ' in junit


def test_cases_new_and_gone_since_the_baseline_are_listed(
        branch: Callable[..., Any], base_report: Path, tmp_path: Path) -> None:
    data = json.loads(base_report.read_text())
    data["cases"][0]["id"] = "old-name[onnx-cpu-random-b1]"
    renamed = tmp_path / "renamed.json"
    renamed.write_text(json.dumps(data))
    code, _, _, report = branch(base=renamed)
    assert code == 0
    assert report["cases"][0]["baseline"] == {"status": "new"}
    assert report["baseline"]["gone"] == ["old-name[onnx-cpu-random-b1]"]
    summary = (tmp_path / "summary.md").read_text()
    assert "**New since the baseline** (1)" in summary
    assert "**In the baseline, not in this run** (1)" in summary


# -- the judgment, case by case ---------------------------------------------------------------

def _output(max_abs: float, scale: float = 1.0, **changes: Any) -> OutputComparison:
    return OutputComparison(**{"name": "y", "passed": True, "atol": 1e-4, "rtol": 1e-3,
                               "elements": 8, "max_abs": max_abs, "required_atol": max_abs,
                               "expected_shape": (2, 4), "actual_shape": (2, 4),
                               "expected_dtype": "float32", "actual_dtype": "float32",
                               "scale": scale, **changes})


def _case(*outputs: OutputComparison, status: str = "passed", id: str = "m[c]") -> CaseResult:
    return CaseResult(id=id, model="m", opset=18, exporter="dynamo", target="cpu",
                      dataset="random", batch_size=1, status=status,  # type: ignore[arg-type]
                      outputs=outputs)


def _judged(result: CaseResult, regression: Regression,
            against: baseline.Baseline) -> CaseResult:
    """The verdict chain's links after the comparison (compare/chain.py), on `result`."""
    return judge(result, Rules(baseline=against, regression=regression))


def _against(*old: CaseResult) -> baseline.Baseline:
    report = RunReport(spec_path="parity.yaml", environment={}, cases=old)
    return baseline.Baseline("base.json", report, cases={c.id: c for c in old})


EPS32 = 2.0 ** -23


@pytest.mark.parametrize("old, new, scale", [
    (0.0, 3 * EPS32, 1.0),  # exact before, a few ulps now
    (1e-9, 8 * EPS32 * 100, 100.0),  # grew 950 times, but 8 ulps at the output's scale
    (2e-7, 2e-7 * 9, 1.0),  # below the factor
])
def test_noise_never_counts(old: float, new: float, scale: float) -> None:
    judged = _judged(_case(_output(new, scale)), Regression(),
                            _against(_case(_output(old, scale))))
    assert judged.status == "passed"
    assert judged.baseline is not None and not judged.baseline.regressed


def test_the_floor_scales_with_the_output_and_its_dtype() -> None:
    assert baseline.floor_of(_output(0.0, 10.0), Regression()) == pytest.approx(
        16 * EPS32 * 10)
    assert baseline.floor_of(_output(0.0, 1.0, expected_dtype="float16"),
                             Regression()) == pytest.approx(16 * 2.0 ** -10)
    assert baseline.floor_of(_output(0.0, None), Regression()) == 0.0  # integers: exact
    assert baseline.floor_of(_output(0.0, 10.0), Regression(floor=1e-3)) == 1e-3


def test_growth_from_an_exact_zero_reads_from_0() -> None:
    judged = _judged(_case(_output(3e-5)), Regression(), _against(_case(_output(0.0))))
    assert judged.status == "failed"
    assert "max abs 0 → 3.0e-5 (from 0) since the baseline" in judged.message


def test_a_failed_case_keeps_its_own_message_and_records_the_growth() -> None:
    failing = _output(3e-3, passed=False, message="y: max abs 3.0e-3 > atol")
    judged = _judged(_case(failing, status="failed"), Regression(),
                            _against(_case(_output(1e-7))))
    assert judged.message == "" and judged.status == "failed"
    assert judged.baseline is not None
    assert judged.baseline.regressed and judged.baseline.trend == "up"


def test_what_cannot_be_compared_is_said() -> None:
    changed = _judged(
        _case(_output(1e-7, atol=1e-3), _output(1e-7, name="z", expected_shape=(3, 4)),
              _output(1e-7, name="new")),
        Regression(),
        _against(_case(_output(1e-7), _output(1e-7, name="z"), _output(0.0, name="old"))))
    assert changed.baseline is not None
    notes = changed.baseline.notes
    assert any("y: tolerance changed since the baseline (atol 1e-4, rtol 1e-3 → atol 1e-3"
               in n for n in notes)
    assert "z: shape changed since the baseline; not compared" in notes
    assert "new: not in the baseline" in notes
    assert "old: in the baseline, not in this run" in notes
    errored = _judged(_case(status="error"), Regression(),
                                  _against(_case(_output(0.0))))
    assert errored.baseline == CaseTrend("not compared",
                                         reason="the case ended error in this run",
                                         before="passed")


def test_a_missing_baseline_names_the_file(tmp_path: Path) -> None:
    missing = read_baseline(str(tmp_path / "nowhere.json"))
    assert not missing.usable and "nowhere.json does not exist" in missing.problem


# -- the figures it rests on ------------------------------------------------------------------

def test_the_error_histogram_counts_every_element_per_decade() -> None:
    expected = np.zeros((2, 3), dtype=np.float32)
    actual = np.array([[0.0, 5e-7, 2e-6], [np.nan, 0.5, 50.0]], dtype=np.float32)
    histogram = metrics.error_histogram([(expected, actual)])
    assert sum(histogram.counts) + histogram.nonfinite == 6
    assert histogram.nonfinite == 1
    edges = histogram.edges
    counted = {(edges[i], edges[i + 1]): c for i, c in enumerate(histogram.counts) if c}
    assert counted == {(0.0, 1e-10): 1, (1e-7, 1e-6): 1, (1e-6, 1e-5): 1, (0.1, 1.0): 1,
                       (10.0, math.inf): 1}
    lines = histogram_lines(histogram)
    assert lines[0].strip().startswith("< 1e-10 │")
    assert lines[-1].strip().startswith("NaN/Inf │")
    assert metrics.scale([(np.array([1.0, -7.0, np.inf]), actual)]) == 7.0


def test_the_json_report_keeps_the_comparison_and_merges_it(tmp_path: Path) -> None:
    histogram = metrics.error_histogram([(np.zeros(4), np.full(4, 3e-5))])
    regressed = _output(3e-5, histogram=histogram)
    record = CaseTrend("compared", ratio=math.inf, trend="up", regressed=True, max_abs=0.0,
                       outputs={"y": OutputTrend(max_abs=0.0, required_atol=0.0,
                                                 ratio=math.inf, floor=1e-6, trend="up",
                                                 regressed=True)})
    case = dataclasses.replace(_case(regressed), baseline=record)
    passing = _case(_output(1e-8, histogram=histogram), id="m[d]")
    report = RunReport("parity.yaml", {}, (case, passing), shard="1/1",
                       baseline=BaselineRun("base.json", done=True, gone=("x[y]",)))
    write_json(report, tmp_path / "r.json")
    assert json.loads((tmp_path / "r.json").read_text())["cases"][0]["baseline"][
        "ratio"] == "inf"
    back = read_json(tmp_path / "r.json")
    assert back.baseline is not None and back.baseline.gone == ("x[y]",)
    assert back.cases[0].outputs[0].histogram == histogram
    assert back.cases[0].outputs[0].scale == 1.0
    assert back.cases[1].outputs[0].histogram is None  # passed and did not regress
    assert back.cases[0].baseline == record
    assert to_dict(from_dict(to_dict(back))) == to_dict(back)
    merged = merge_reports([("r.json", planned(back))])
    assert merged.baseline == back.baseline


# -- the spec ---------------------------------------------------------------------------------

def test_regression_settings_merge_from_the_defaults(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "models.py", tmp_path / "models.py")
    spec = tmp_path / "parity.yaml"
    spec.write_text(textwrap.dedent("""\
        version: 1
        defaults:
          regression: {factor: 4}
        models:
          - name: a
            torch: models.py:make_linear
            inputs: {x: {shape: [batch, 4]}}
            regression: {floor: 1.0e-6}
          - name: b
            torch: models.py:make_linear
            inputs: {x: {shape: [batch, 4]}}
            regression: off
          - name: c
            torch: models.py:make_linear
            inputs: {x: {shape: [batch, 4]}}
        """))
    models = {m.name: m for m in parse_spec(spec.read_text(), spec).models}
    assert models["a"].regression == Regression(factor=4, floor=1e-6)
    assert models["b"].regression is None
    assert models["c"].regression == Regression(factor=4)


def test_a_wrong_regression_setting_names_its_line(tmp_path: Path) -> None:
    spec = tmp_path / "parity.yaml"
    text = ("version: 1\nmodels:\n  - name: a\n    onnx: a.onnx\n"
            "    regression: {factor: 0.5}\n")
    spec.write_text(text)
    (tmp_path / "a.onnx").write_bytes(b"")
    with pytest.raises(SpecError) as caught:
        parse_spec(text, spec)
    problems = [str(problem) for problem in caught.value.problems]
    assert any(":5:" in p and "regression" in p for p in problems), problems


def test_the_gpus_and_the_driver_that_changed_are_named_from_the_preflights() -> None:
    from onnx_parity.findings import Gpu
    from onnx_parity.machine.preflight import assess
    from onnx_parity.report.jsonvalues import Reader
    from onnx_parity.report.preflightjson import read_facts

    recorded = DATA / "doctor" / "facts-h100-cu13.json"
    old = assess(read_facts(Reader(json.loads(recorded.read_text()), "facts"))).record()
    driver = dataclasses.replace(old.facts.driver, version="590.12",
                                 gpus=(Gpu(0, "NVIDIA A100-SXM4-80GB"), Gpu(1, "NVIDIA L4")))
    new = dataclasses.replace(old, facts=dataclasses.replace(old.facts, driver=driver))
    versions = {"onnx_parity": "1.0", "python": "3.12.3", "packages": {"numpy": "2.1"}}
    assert baseline.environment_changes(versions, old, versions, new) == [
        ("GPU", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB, NVIDIA L4"),
        ("NVIDIA driver", "580.82.07", "590.12")]
    assert baseline.environment_changes(versions, None, versions, old) == [
        ("GPU", None, "NVIDIA H100 80GB HBM3"), ("NVIDIA driver", None, "580.82.07")]
    assert baseline.environment_changes(versions, old, versions, old) == []


def test_each_changed_setting_says_which_way_it_moved() -> None:
    """Per output (named where the case has several): atol and rtol smaller is tightened, a
    metric threshold higher is tightened, a criterion added or taken away is changed; then the
    case's own settings (the tolerance only where no output says it); one recorded on one side
    alone is no change (a baseline from before settings were recorded)."""
    from onnx_parity.results import SettingChange

    def case(**settings: str) -> CaseResult:
        return CaseResult("m[c]", "m", 18, "dynamo", "cpu", "random", 1, "failed",
                          settings=settings)

    def out(name: str, **figures: Any) -> OutputComparison:
        return OutputComparison(name=name, passed=False, **figures)

    old = dataclasses.replace(case(target="a", dataset="d", tolerance="t1"), outputs=(
        out("y", atol=1e-4, rtol=1e-3, criteria=("atol/rtol", "cosine >= 0.99"),
            thresholds={"cosine": 0.99}),
        out("z", atol=1e-4, rtol=1e-3, thresholds={"sqnr_db": 30.0})))
    new = dataclasses.replace(case(target="b", dataset="d", tolerance="t2", precision="fp32"),
                              outputs=(
        out("y", atol=1e-5, rtol=1e-2, criteria=("atol/rtol", "cosine >= 0.999"),
            thresholds={"cosine": 0.999}),
        out("z", atol=1e-4, rtol=1e-3, thresholds={"top1": 0.9})))
    assert baseline.setting_changes(new, old) == [
        SettingChange("atol", "1e-4", "1e-5", "y", "tightened"),
        SettingChange("rtol", "1e-3", "1e-2", "y", "loosened"),
        SettingChange("cosine", "0.99", "0.999", "y", "tightened"),
        SettingChange("sqnr_db", "30 dB", "not set", "z"),
        SettingChange("top1", "not set", "0.9", "z"),
        SettingChange("target", "a", "b")]
    errored = dataclasses.replace(new, status="error", outputs=())
    assert baseline.setting_changes(errored, dataclasses.replace(old, outputs=()))[-1] == (
        SettingChange("tolerance", "t1", "t2"))
