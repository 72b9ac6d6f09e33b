"""Reduced precision: fp16 and int8 variants made with ONNX Runtime's tools, checked against the
float32 source with the metrics that fit them, and where quality is lost."""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers import FIXTURES, by_id
from onnx_parity.errors import SpecError
from onnx_parity.machine.cpu import has_vnni
from onnx_parity.plan.cases import plan
from onnx_parity.results import Tolerance, TopK
from onnx_parity.spec import parse_spec
from onnx_parity.spec.tolerance import resolve

ALL = "[fp32, fp16, int8-dynamic, int8]"


@pytest.mark.slow
def test_a_plain_mlp_and_cnn_pass_in_every_precision_with_the_defaults(
        write_spec: Callable[[str], Path], run_cli: Callable[..., Any]) -> None:
    spec = write_spec(f"""
        version: 1
        datasets: {{calib: {{kind: random, seed: 7, samples: 4, batch_sizes: [8]}}}}
        defaults: {{precisions: {ALL}, datasets: [calib]}}
        models:
          - {{name: mlp, torch: models.py:make_wide, inputs: {{x: {{shape: [batch, 8]}}}}}}
          - {{name: cnn, torch: models.py:make_small_cnn,
             inputs: {{image: {{shape: [batch, 3, 8, 8]}}}}}}
    """)
    code, out, _, report = run_cli(spec)
    cases = by_id(report)
    # On x86-64 without VNNI, ONNX Runtime's U8S8 kernels saturate with signed int8 weights:
    # the MLP's int8 variants really lose quality there (cosine ~0.96), a true failure.
    saturating = {f"mlp[opset18{p}-cpu-calib-b8]" for p in ("-int8-dynamic", "-int8")
                  } if has_vnni() is False else set()
    assert {i for i, case in cases.items() if case["status"] != "passed"} == saturating, out
    assert code == (1 if saturating else 0), out
    assert set(cases) == {f"{m}[opset18{p}-cpu-calib-b8]" for m in ("mlp", "cnn")
                          for p in ("", "-fp16", "-int8-dynamic", "-int8")}
    for case_id, case in cases.items():
        (output,) = case["outputs"]
        assert set(output["metrics"]) == {"cosine", "sqnr_db", "top1"}  # every metric, always
        if case["precision"] == "fp32":
            assert output["criteria"] == ["atol/rtol"]
            continue
        threshold = "0.999" if case["precision"] == "fp16" else "0.99"
        assert output["criteria"] == [f"cosine ≥ {threshold}"]
        assert (output["metrics"]["cosine"] >= float(threshold)) == (case_id not in saturating)
        assert f"no tolerance of its own for {case['precision']}: its defaults were used" \
               in " ".join(case["notes"])


@pytest.mark.slow
def test_an_outlier_channel_fails_int8_and_the_layer_is_named(
        write_spec: Callable[[str], Path], run_cli: Callable[..., Any]) -> None:
    spec = write_spec("""
        version: 1
        datasets: {rows: {kind: random, seed: 2, samples: 4, batch_sizes: [8]}}
        models:
          - name: outlier
            torch: models.py:make_outlier
            inputs: {x: {shape: [batch, 16]}}
            datasets: [rows]
            precisions: [fp32, int8]
            tolerance:
              precisions:
                int8: {cosine: 0.99, sqnr_db: 20, topk: {k: 1, agreement: 0.9}}
    """)
    code, _, _, report = run_cli(spec)
    cases = by_id(report)
    assert code == 1 and cases["outlier[opset18-cpu-rows-b8]"]["status"] == "passed"
    int8 = cases["outlier[opset18-int8-cpu-rows-b8]"]
    assert int8["status"] == "failed"
    (output,) = int8["outputs"]
    assert output["metrics"]["cosine"] < 0.5 and output["metrics"]["sqnr_db"] < 12
    assert output["criteria"] == ["cosine ≥ 0.99", "SQNR ≥ 20 dB", "top-1 agreement ≥ 0.9"]
    assert "cosine" in int8["message"] and "< 0.99" in int8["message"]
    divergence = int8["details"]["divergence"]
    assert divergence["verdict"] == "quality" and divergence["module"] == "head"
    assert divergence["reference"] == "the float32 ONNX model"
    assert divergence["headline"].startswith("int8 loses quality first at Gemm")
    assert len(divergence["worst"]) >= 2 and divergence["worst"][0]["sqnr_db"] < 20


@pytest.mark.slow
def test_fp16_overflow_is_named_where_the_inf_first_appears(
        tmp_path: Path, run_cli: Callable[..., Any]) -> None:
    shutil.copy(FIXTURES / "faulty_models.py", tmp_path / "faulty_models.py")
    spec = tmp_path / "parity.yaml"
    spec.write_text(textwrap.dedent("""\
        version: 1
        models:
          - name: encoder
            torch: faulty_models.py:make_encoder
            args: {overflow: true}
            inputs: {x: {shape: [batch, 6]}}
            precisions: [fp32, fp16]
        """))
    _, _, _, report = run_cli(spec)
    cases = by_id(report)
    assert cases["encoder[opset18-cpu-random-b1]"]["status"] == "passed"
    fp16 = cases["encoder[opset18-fp16-cpu-random-b1]"]
    assert fp16["status"] == "failed"
    divergence = fp16["details"]["divergence"]
    assert divergence["headline"].startswith("fp16 overflow: ")
    assert " first at " in divergence["headline"] and "encoder.layers.1.mlp" in \
        divergence["headline"]


def test_tolerances_per_precision_replace_the_models_and_defaults_say_so(tmp_path: Path) -> None:
    spec = parse_spec(textwrap.dedent(f"""\
        version: 1
        defaults:
          tolerance: {{precisions: {{int8: {{sqnr_db: 15}}}}}}
        models:
          - name: m
            torch: pkg.mod:build
            inputs: {{x: {{shape: [1, 3]}}}}
            precisions: {ALL}
            outputs: [logits]
            tolerance:
              atol: 1.0e-5
              cosine: 0.9999
              precisions:
                fp16: {{atol: 1.0e-2, rtol: 1.0e-2}}
                int8: {{cosine: 0.99, topk: {{k: 1, agreement: 0.98}},
                       outputs: {{logits: {{cosine: 0.95}}}}}}
        """), tmp_path / "parity.yaml")
    rules = spec.models[0].tolerances
    assert resolve(rules, "cpu", "logits") == Tolerance(atol=1e-5, rtol=1e-3,
                                                        metrics={"cosine": 0.9999})
    assert resolve(rules, "cpu", "logits", "fp16") == Tolerance(atol=1e-2, rtol=1e-2)
    # the model's int8 over the defaults' int8, key by key; the output's over both
    assert resolve(rules, "cpu", "logits", "int8") == Tolerance(
        atol=0.0, rtol=0.0, elementwise=False,
        metrics={"cosine": 0.95, "sqnr_db": 15, "topk": TopK(1, 0.98)})
    assert resolve(rules, "cpu", "logits", "int8-dynamic") == Tolerance(
        atol=0.0, rtol=0.0, elementwise=False, metrics={"cosine": 0.99},
        defaults="int8-dynamic")
    ids = [c.id for c in plan(spec)]
    assert ids == ["m[opset18-cpu-random-b1]", "m[opset18-fp16-cpu-random-b1]",
                   "m[opset18-int8-dynamic-cpu-random-b1]", "m[opset18-int8-cpu-random-b1]"]
    assert plan(spec)[3].calibration is not None and plan(spec)[3].calibration.name == "random"


def _problems(text: str, tmp_path: Path) -> list[str]:
    with pytest.raises(SpecError) as caught:
        parse_spec(textwrap.dedent(text), tmp_path / "parity.yaml")
    return [f"{p.line}:{p.column}: {p.message}" for p in caught.value.problems]


BASE = """\
    version: 1
    models:
      - name: m
        torch: pkg.mod:build
        inputs: {x: {shape: [1, 3]}}
"""


def test_precision_calibration_and_metric_errors_are_located(tmp_path: Path) -> None:
    assert _problems(BASE + "        precisions: [fp32, int4]\n", tmp_path) == [
        "6:24: model 'm': precisions: expected one of 'fp32', 'fp16', 'int8-dynamic', 'int8', "
        "got 'int4'; did you mean 'int8'?"]
    assert _problems(BASE + "        precisions: [fp32]\n        calibration: random\n",
                     tmp_path) == [
        "7:5: model 'm': 'calibration' applies only to the int8 precision (static "
        "quantization), which its precisions do not list"]
    assert _problems(BASE + "        precisions: [int8]\n        calibration: randm\n",
                     tmp_path) == [
        "7:18: model 'm': undefined dataset 'randm'; did you mean 'random'?"]
    assert _problems(BASE + "        tolerance: {cosine: 1.5, topk: {k: 0, agreement: 0.9}}\n",
                     tmp_path) == [
        "6:25: model 'm': tolerance.cosine: expected a number from -1 to 1, got 1.5",
        "6:40: model 'm': tolerance.topk.k: expected a positive integer, got 0"]
    assert _problems(BASE + "        tolerance: {precisions: {fp32: {cosine: 0.9}}}\n",
                     tmp_path) == [
        "6:30: model 'm': tolerance.precisions: 'fp32' is not a reduced precision; use one of "
        "fp16, int8-dynamic, int8 (fp32 cases use the tolerance around it)"]


@pytest.mark.gpu
def test_fp16_on_cuda_runs_real_fp16_kernels_and_its_overflow_is_named(
        tmp_path: Path, run_cli: Callable[..., Any]) -> None:
    shutil.copy(FIXTURES / "faulty_models.py", tmp_path / "faulty_models.py")
    spec = tmp_path / "parity.yaml"
    spec.write_text(textwrap.dedent("""\
        version: 1
        targets:
          cuda: {providers: [CUDAExecutionProvider, CPUExecutionProvider],
                 provider_options: {CUDAExecutionProvider: {use_tf32: 0}}}
        models:
          - name: encoder
            torch: faulty_models.py:make_encoder
            args: {overflow: true}
            inputs: {x: {shape: [batch, 6]}}
            precisions: [fp32, fp16]
            targets: [cuda]
        """))
    _, _, _, report = run_cli(spec)
    cases = by_id(report)
    assert cases["encoder[opset18-cuda-random-b1]"]["status"] == "passed"
    fp16 = cases["encoder[opset18-fp16-cuda-random-b1]"]
    assert fp16["status"] == "failed"
    assert fp16["details"]["providers"]["active"][0] == "CUDAExecutionProvider"
    assert fp16["details"]["divergence"]["headline"].startswith("fp16 overflow: ")
