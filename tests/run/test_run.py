"""End to end: real exports, real ONNX Runtime sessions, through the command line."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers import ROOT, by_id, tiny_and_flipped

EXAMPLES = ROOT / "examples"
pytestmark = pytest.mark.slow


def test_example_spec_passes_with_every_report(run_cli: Callable[..., Any], tmp_path: Path) -> None:
    junit, summary = tmp_path / "junit.xml", tmp_path / "summary.md"
    code, out, _, report = run_cli(EXAMPLES / "parity.yaml", "--jobs", "2",
                                   "--junit", str(junit), "--summary", str(summary))
    assert code == 0, out
    cases = by_id(report)
    assert report["summary"] == {"passed": 18, "failed": 0, "errors": 0, "skipped": 0,
                                 "xfailed": 0}
    assert set(cases) >= {
        "mlp[opset17-cpu-batches-b1]", "mlp[opset18-cpu-recorded-b4]",
        "cnn[opset17-cpu-random-b1]", "attention[opset18-cpu-random-b1]",
        "shipped-mlp[onnx-cpu-batches-b4]", "golden-head[onnx-cpu-golden]",
    }
    assert cases["shipped-mlp[onnx-cpu-batches-b1]"]["opset"] == 17  # the file's own opset
    assert any("training mode" in n for n in cases["cnn[opset18-cpu-random-b1]"]["notes"])
    mlp = cases["mlp[opset18-cpu-batches-b4]"]["outputs"][0]
    assert mlp["name"] == "y" and mlp["elements"] == 2 * 4 * 3 and mlp["passed"]
    assert ET.parse(junit).getroot().find("testsuite") is not None
    assert "mlp" in summary.read_text()
    assert "18 passed" in out
    int8 = cases["classifier[opset18-int8-cpu-batches-b4]"]["outputs"][0]
    assert int8["criteria"] == ["cosine ≥ 0.99"] and int8["metrics"]["cosine"] >= 0.99


def test_faulty_spec_fails_each_the_way_it_should(run_cli: Callable[..., Any]) -> None:
    code, _, _, report = run_cli(EXAMPLES / "faulty.yaml")
    assert code == 1
    cases = by_id(report)
    traced = cases["sign-gate-traced[opset18-cpu-signs-b1]"]
    assert traced["status"] == "failed" and traced["stage"] == "compare"
    assert 0 < traced["outputs"][0]["mismatches"] < traced["outputs"][0]["elements"]
    dynamo = cases["sign-gate-dynamo[opset18-cpu-signs-b1]"]
    assert dynamo["status"] == "error" and dynamo["stage"] == "export"
    assert "dynamo exporter failed" in dynamo["message"]
    assert cases["stale-mlp[onnx-cpu-signs-b1]"]["status"] == "failed"
    batch = cases["cnn-batch1[onnx-cpu-batch4-b4]"]
    assert batch["status"] == "error" and batch["stage"] == "run"
    assert batch["message"] == "model expects batch 1 on input 'image', data has 4"
    golden = cases["golden-head[onnx-cpu-drifted]"]
    assert golden["status"] == "failed" and golden["outputs"][0]["name"] == "probs"
    exact = cases["attention-exact[opset18-cpu-signs-b1]"]["outputs"][0]
    assert exact["passed"] is False and 0 < exact["required_atol"] < 1e-4
    assert cases["outlier-int8[opset18-cpu-rows-b8]"]["status"] == "passed"
    int8 = cases["outlier-int8[opset18-int8-cpu-rows-b8]"]
    assert int8["status"] == "failed" and "cosine" in int8["message"]
    assert int8["details"]["divergence"]["headline"].startswith(
        "int8 loses quality first at Gemm") and int8["details"]["divergence"]["module"] == "head"


def test_gpu_example_plans_every_model_on_both_cuda_targets() -> None:
    from onnx_parity.plan.cases import plan
    from onnx_parity.spec import load_spec

    spec = load_spec(EXAMPLES / "gpu.yaml")
    cases = {c.id: c for c in plan(spec)}
    assert len(cases) == 18
    trt = cases["mlp[opset18-tensorrt-batches-b4]"]
    assert trt.target.providers[0] == "TensorrtExecutionProvider"
    assert trt.tolerance_for("y").atol == 2e-3
    cnn = cases["cnn[opset18-cuda-batches-b4]"]
    assert cnn.tolerance_for().atol == 2e-3  # its own target tolerance beats its own atol
    assert cases["cnn[opset18-cuda-fp32-batches-b4]"].tolerance_for().atol == 1e-5
    assert cases["mlp[opset18-cuda-batches-b1]"].tolerance_for("y").atol == 2e-3
    assert cases["mlp[opset18-cuda-fp32-batches-b1]"].tolerance_for("y").atol == 1e-4


@pytest.mark.gpu
def test_gpu_example_passes_on_cuda(run_cli: Callable[..., Any]) -> None:
    code, out, _, report = run_cli(EXAMPLES / "gpu.yaml")
    # TensorRT is a separate install (tensorrt-cu13-libs): without it the preflight names the
    # missing library and the tensorrt cases end in error, saying so; every other case passes.
    trt = [case for case in report["cases"] if case["target"] == "tensorrt"]
    trt_missing = trt if any("libnvinfer.so" in case["message"] for case in trt) else []
    assert all(case["status"] == "error" for case in trt_missing)
    assert code == (1 if trt_missing else 0), out
    assert report["summary"]["passed"] == 18 - len(trt_missing)
    assert len(trt_missing) in (0, 2)
    for case in report["cases"]:
        if case in trt_missing:
            continue
        first = "TensorrtExecutionProvider" if case["target"] == "tensorrt" else \
            "CUDAExecutionProvider"
        assert case["details"]["providers"]["active"][0] == first
        options = case["details"]["numerics"]["provider_options"]["CUDAExecutionProvider"]
        assert options["use_tf32"] == ("0" if case["target"] == "cuda-fp32" else "1")


def test_both_exporters_and_integer_inputs(write_spec: Callable[[str], Path],
                                           run_cli: Callable[..., Any]) -> None:
    spec = write_spec("""
        version: 1
        models:
          - name: two
            torch: models.py:make_two_inputs
            inputs:
              tokens: {shape: [batch, 5], dtype: int64, low: 0, high: 20}
              scale: {shape: [batch, 5], dtype: float32}
            outputs: [pooled, winner]
            opsets: [17, 18]
            exporter: torchscript
          - name: two-dynamo
            torch: models.py:make_two_inputs
            inputs:
              tokens: {shape: [batch, 5], dtype: int64, low: 0, high: 20}
              scale: {shape: [batch, 5], dtype: float32}
            outputs: [pooled, winner]
            datasets: [wide]
        datasets:
          wide: {kind: random, batch_sizes: [3]}
    """)
    code, out, _, report = run_cli(spec)
    assert code == 0, out
    cases = by_id(report)
    assert set(cases) == {"two[opset17-cpu-random-b1]", "two[opset18-cpu-random-b1]",
                          "two-dynamo[opset18-cpu-wide-b3]"}
    winner = cases["two-dynamo[opset18-cpu-wide-b3]"]["outputs"][1]
    assert winner["name"] == "winner" and winner["expected_dtype"] == "int64"


def test_one_broken_model_never_hides_the_others(write_spec: Callable[[str], Path],
                                                 run_cli: Callable[..., Any]) -> None:
    spec = write_spec("""
        version: 1
        defaults: {exporter: torchscript, timeout: 30}
        models:
          - name: broken
            torch: models.py:make_broken
            inputs: {x: {shape: [batch, 4]}}
          - name: not-a-module
            torch: models.py:make_not_a_module
            inputs: {x: {shape: [batch, 4]}}
          - name: segfault
            torch: models.py:make_crash
            args: {how: segfault}
            inputs: {x: {shape: [batch, 4]}}
          - name: abort
            torch: models.py:make_crash
            args: {how: abort}
            inputs: {x: {shape: [batch, 4]}}
          - name: good
            torch: models.py:make_linear
            inputs: {x: {shape: [batch, 4]}}
    """)
    code, _, _, report = run_cli(spec, "--jobs", "2")
    assert code == 1
    cases = by_id(report)
    assert cases["good[opset18-cpu-random-b1]"]["status"] == "passed"
    broken = cases["broken[opset18-cpu-random-b1]"]
    assert (broken["status"], broken["stage"]) == ("error", "load")
    assert "checkpoint weights.pt not found" in broken["message"]
    assert "not a torch.nn.Module" in cases["not-a-module[opset18-cpu-random-b1]"]["message"]
    segfault = cases["segfault[opset18-cpu-random-b1]"]
    assert (segfault["status"], segfault["stage"]) == ("error", "run")
    assert "crashed with SIGSEGV in stage run" in segfault["message"]
    assert "SIGABRT" in cases["abort[opset18-cpu-random-b1]"]["message"]
    assert [c["id"].split("[")[0] for c in report["cases"]] == [
        "broken", "not-a-module", "segfault", "abort", "good"]  # spec order, not finish order


def test_a_hanging_model_times_out(write_spec: Callable[[str], Path],
                                   run_cli: Callable[..., Any]) -> None:
    spec = write_spec("""
        version: 1
        models:
          - name: hang
            torch: models.py:make_crash
            args: {how: hang}
            inputs: {x: {shape: [batch, 4]}}
            exporter: torchscript
            opsets: [17, 18]
            timeout: 15
    """)
    code, _, _, report = run_cli(spec)
    assert code == 1
    first, second = report["cases"]
    assert first["message"] == "Timed out after 15 s in stage run"
    assert second["status"] == "error" and second["message"].startswith("not run: timed out")


def test_nan_outputs_match_nan_references(write_spec: Callable[[str], Path],
                                          run_cli: Callable[..., Any]) -> None:
    spec = write_spec("""
        version: 1
        models:
          - name: nans
            torch: models.py:make_nans
            inputs: {x: {shape: [batch, 16]}}
            exporter: torchscript
    """)
    code, out, _, report = run_cli(spec)
    assert code == 0, out
    assert report["cases"][0]["outputs"][0]["passed"] is True


def test_select_list_and_empty_selection(write_spec: Callable[[str], Path],
                                         run_cli: Callable[..., Any],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    from onnx_parity.cli.main import main

    spec = write_spec("""
        version: 1
        defaults: {opsets: [17, 18], exporter: torchscript}
        models:
          - name: lin
            torch: models.py:make_linear
            inputs: {x: {shape: [batch, 4]}}
    """)
    assert main(["run", str(spec), "--list", "--select", "lin[opset17-*"]) == 0
    assert capsys.readouterr().out.split() == ["lin[opset17-cpu-random-b1]"]
    code, _, err, _ = run_cli(spec, "--select", "nothing*")
    assert code == 1 and "no cases matching nothing*" in err
    code, _, _, _ = run_cli(spec, "--select", "nothing*", "--allow-empty")
    assert code == 0


def test_github_annotations_point_at_the_failing_model(
    write_spec: Callable[[str], Path], run_cli: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    step_summary = tmp_path / "step-summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_WORKSPACE", str(tmp_path))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    spec = write_spec("""
        version: 1
        defaults: {exporter: torchscript}
        models:
          - name: fine
            torch: models.py:make_linear
            inputs: {x: {shape: [batch, 4]}}
          - name: broken
            torch: models.py:make_broken
            inputs: {x: {shape: [batch, 4]}}
    """)
    code, out, _, _ = run_cli(spec)
    assert code == 1
    errors = [line for line in out.splitlines() if line.startswith("::error ")]
    assert len(errors) == 1
    assert errors[0].startswith("::error file=parity.yaml,line=7,")
    assert "checkpoint weights.pt not found" in errors[0]
    written = step_summary.read_text()
    assert "fine" in written and "broken" in written


def test_training_mode_module_is_checked_in_eval_mode(write_spec: Callable[[str], Path],
                                                      run_cli: Callable[..., Any]) -> None:
    spec = write_spec("""
        version: 1
        models:
          - name: dropout
            torch: models.py:make_dropout_in_training_mode
            inputs: {x: {shape: [batch, 64]}}
            exporter: torchscript
            tolerance: {atol: 0.0, rtol: 0.0}
    """)
    code, out, _, report = run_cli(spec)
    assert code == 0, out  # in training mode, dropout would differ on every run
    assert "training mode" in report["cases"][0]["notes"][0]


def test_a_spec_error_stops_before_any_work(write_spec: Callable[[str], Path],
                                            run_cli: Callable[..., Any]) -> None:
    spec = write_spec("""
        version: 1
        models:
          - name: shipped
            onnx: missing.onnx
    """)
    code, out, err, report = run_cli(spec)
    assert code == 2 and report == {} and out == ""
    assert f"{spec}:4:" in err and "missing.onnx" in err


def test_float16_inputs_check_a_float16_model(write_spec: Callable[[str], Path],
                                             run_cli: Callable[..., Any]) -> None:
    spec = write_spec("""
        version: 1
        models:
          - name: half
            torch: models.py:make_wide
            inputs: {x: {shape: [batch, 8], dtype: float16}}
            exporter: torchscript
            tolerance: {atol: 1.0e-2, rtol: 1.0e-2}
    """)
    code, out, _, report = run_cli(spec)
    case = report["cases"][0]
    assert "the module was cast to float16, the dtype of its inputs" in case["notes"]
    assert code == 0, out
    assert case["outputs"][0]["expected_dtype"] == "float16"


def test_results_do_not_depend_on_the_number_of_jobs(write_spec: Callable[[str], Path],
                                                     run_cli: Callable[..., Any]) -> None:
    """One worker checks both models in turn, or two workers one each: the same numbers."""
    spec = write_spec("""
        version: 1
        defaults: {exporter: torchscript}
        datasets:
          three: {kind: random, seed: 3, samples: 3}
        models:
          - name: first
            torch: models.py:make_unseeded
            inputs: {x: {shape: [batch, 6]}}
            datasets: [three]
          - name: second
            torch: models.py:make_unseeded
            inputs: {x: {shape: [batch, 6]}}
            datasets: [three]
    """)
    reports = [run_cli(spec, "--jobs", jobs)[3] for jobs in ("1", "2")]
    numbers = [
        [(c["id"], c["status"], [(o["max_abs"], o["worst_expected"]) for o in c["outputs"]])
         for c in report["cases"]]
        for report in reports
    ]
    assert numbers[0] == numbers[1]
    # Both factory calls are seeded alike, so the two models' weights, and outputs, are the same.
    assert numbers[0][0][2][0][1] == numbers[0][1][2][0][1]


def test_a_tolerance_that_could_not_fail_is_not_a_pass(write_spec: Callable[[str], Path],
                                                      run_cli: Callable[..., Any],
                                                      tmp_path: Path) -> None:
    tiny_and_flipped(tmp_path)
    spec = write_spec("""
        version: 1
        models:
          - {name: flipped, onnx: flipped.onnx, torch: models.py:make_tiny_output}
          - {name: flipped-relative, onnx: flipped.onnx, torch: models.py:make_tiny_output,
             tolerance: {atol: 0.0, rtol: 1.0e-3}}
          - {name: tiny-relative, onnx: tiny.onnx, torch: models.py:make_tiny_output,
             tolerance: {atol: 0.0, rtol: 1.0e-3}}
          - {name: flipped-cosine, onnx: flipped.onnx, torch: models.py:make_tiny_output,
             tolerance: {cosine: 0.9999}}
          - {name: tiny-cosine, onnx: tiny.onnx, torch: models.py:make_tiny_output,
             tolerance: {cosine: 0.9999}}
    """)
    code, out, _, report = run_cli(spec)
    assert code == 1
    cases = {case["model"]: case for case in report["cases"]}
    flipped = cases["flipped"]
    assert flipped["status"] == "error" and flipped["stage"] == "compare"
    assert flipped["outputs"][0]["powerless"] and not flipped["outputs"][0]["passed"]
    assert "no power: every element of the reference" in flipped["message"]
    # The advice is the fix that works at this scale, with what it measures here: the flip.
    assert "judge it by a scale-free metric, tolerance: {cosine: 0.9999} (cosine is -" in (
        flipped["message"])
    assert "no power" in out  # the console says so too
    assert cases["flipped-relative"]["status"] == "failed"  # with power, the fault shows
    assert cases["tiny-relative"]["status"] == "passed"
    assert cases["flipped-cosine"]["status"] == "failed"  # the advice catches the fault
    assert cases["tiny-cosine"]["status"] == "passed"  # and passes the right export


def test_unnamed_outputs_get_names_that_do_not_change_with_the_opset(
        write_spec: Callable[[str], Path], run_cli: Callable[..., Any]) -> None:
    # The TorchScript exporter numbers unnamed outputs by its graph ('191'), differently at
    # each opset: a spec or a baseline could not name them. They are output_0, output_1, ….
    spec = write_spec("""
        version: 1
        models:
          - name: two
            torch: models.py:make_two_inputs
            inputs:
              tokens: {shape: [batch, 5], dtype: int64, low: 0, high: 20}
              scale: {shape: [batch, 5], dtype: float32}
            opsets: [17, 18]
            exporters: [torchscript, dynamo]
            ignore_outputs: [output_1]
    """)
    code, out, _, report = run_cli(spec)
    assert code == 0, out
    assert len(report["cases"]) == 4
    for case in report["cases"]:
        assert [o["name"] for o in case["outputs"]] == ["output_0"], case["id"]
        assert case["details"]["not_compared"] == ["output_1"]
