"""A cause named only when a second run proves it: TF32 on a CUDA target.

The GPU's facts here are the kind ONNX Runtime's CUDA provider reports through
get_provider_options(); the second run's result is faked at the session boundary, and the real
thing runs under the `gpu` marker.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from onnx_parity.backends.session import SessionFacts
from onnx_parity.explain import causes, ladder
from onnx_parity.explain.bundle import write_test_data
from onnx_parity.findings import Gpu, NumericsRecord
from onnx_parity.frozen import replaced
from onnx_parity.plan.cases import plan
from onnx_parity.report.console import case_line
from onnx_parity.report.github import annotations
from onnx_parity.report.junit import junit_xml_string
from onnx_parity.report.summary import summary_markdown
from onnx_parity.results import OutputComparison, RunReport
from onnx_parity.run.flow import run_case
from onnx_parity.run.memo import ModelMemo
from onnx_parity.run.protocol import WorkerTask
from onnx_parity.spec import PREDEFINED_TARGETS, TargetSpec, parse_spec

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"
H100 = Gpu(0, "NVIDIA H100 80GB HBM3", 81559, "9.0")
V100 = Gpu(0, "Tesla V100-SXM2-16GB", 16160, "7.0")


def _facts(options: dict[str, str], active: tuple[str, ...] = (CUDA, CPU)) -> SessionFacts:
    return SessionFacts((CUDA, CPU), active, (), {CUDA: options} if CUDA in active else {})


def test_numerics_record_what_is_in_effect_and_the_gpu() -> None:
    found = causes.numerics(_facts({"device_id": "0", "use_tf32": "1",
                                    "cudnn_conv_algo_search": "EXHAUSTIVE"}), [H100])
    assert found is not None and found.tf32 is True
    assert found.as_record() == NumericsRecord(
        provider_options={CUDA: {"device_id": "0", "use_tf32": "1",
                                 "cudnn_conv_algo_search": "EXHAUSTIVE"}},
        gpu="NVIDIA H100 80GB HBM3", compute_capability="9.0", tf32=True)
    # a GPU without TF32 units, TF32 turned off, an onnxruntime that does not say, no GPU ran
    assert causes.numerics(_facts({"use_tf32": "1"}), [V100]).tf32 is False  # type: ignore[union-attr]
    assert causes.numerics(_facts({"use_tf32": "0"}), [H100]).tf32 is False  # type: ignore[union-attr]
    assert causes.numerics(_facts({"device_id": "0"}), [H100]).tf32 is None  # type: ignore[union-attr]
    assert causes.numerics(_facts({}, active=(CPU,)), [H100]) is None


def test_the_gpu_is_the_one_the_session_uses() -> None:
    second = Gpu(1, "NVIDIA A100-SXM4-40GB", 40960, "8.0")
    found = causes.numerics(_facts({"device_id": "1", "use_tf32": "1"}), [H100, second])
    assert found is not None and found.gpu == second


def test_tf32_is_suspected_only_where_it_is_in_effect(tmp_path: Path) -> None:
    spec = parse_spec(textwrap.dedent("""\
        version: 1
        targets:
          gpu1:
            providers: [CUDAExecutionProvider, CPUExecutionProvider]
            provider_options: {CUDAExecutionProvider: {device_id: 1}}
        models: [{name: m, torch: pkg.mod:build, inputs: {x: {shape: [1, 3]}}}]
        """), tmp_path / "parity.yaml")
    target = spec.targets["gpu1"]
    suspect = causes.tf32_suspect(target, causes.numerics(_facts({"use_tf32": "1"}), [H100]))
    assert suspect is not None and suspect.kind == "tf32"
    variant = suspect.rerun(_Variants())
    assert variant.providers == target.providers
    assert variant.provider_options == {CUDA: {"device_id": 1, "use_tf32": 0}}
    assert causes.tf32_suspect(target, causes.numerics(_facts({"use_tf32": "1"}), [V100])) is None
    assert causes.tf32_suspect(target, None) is None


class _Variants:
    """Reruns that hand back what they were asked for instead of a session."""

    def on_target(self, variant: TargetSpec) -> TargetSpec:
        return variant

    def remade(self, reduce_range: bool) -> bool:
        return reduce_range

    def exported_with(self, exporter: str) -> str:
        return exporter


def _output(passed: bool, max_abs: float, required: float | None) -> OutputComparison:
    return OutputComparison(name="logits", passed=passed, atol=1e-4, rtol=1e-3, elements=30,
                            mismatches=0 if passed else 7, max_abs=max_abs,
                            required_atol=required, expected_dtype="float32",
                            actual_dtype="float32")


def _suspect() -> causes.Suspect:
    found = causes.numerics(_facts({"use_tf32": "1"}), [H100])
    suspect = causes.tf32_suspect(PREDEFINED_TARGETS["cuda"], found)
    assert suspect is not None
    return suspect


def test_a_second_run_that_passes_proves_the_cause() -> None:
    verdict = causes.prove(_suspect(), [_output(False, 6.1e-4, 6.0e-4)],
                           [_output(True, 2.1e-6, 0.0)])
    assert verdict.proven and verdict.kind == "tf32"
    assert verdict.message == (
        "TF32: with use_tf32=0 it passes (max abs 2.1e-6); with TF32 on it needs atol ≥ 6.0e-4;"
        " check strict float32 with provider_options {CUDAExecutionProvider: {use_tf32: 0}} on "
        "target 'cuda', or give it a tolerance of its own (targets.cuda.tolerance)")
    assert verdict.before == {"max_abs": 6.1e-4, "required_atol": 6.0e-4}
    assert verdict.after["passed"] is True


def test_an_error_ten_times_smaller_proves_it_too_and_less_does_not() -> None:
    falls = causes.prove(_suspect(), [_output(False, 5e-2, 5e-2)], [_output(False, 4e-3, 4e-3)])
    assert falls.proven
    assert falls.message.startswith(
        "TF32: with use_tf32=0 the error falls from max abs 5.0e-2 to 4.0e-3")
    stays = causes.prove(_suspect(), [_output(False, 5e-2, 5e-2)], [_output(False, 1e-2, 1e-2)])
    assert not stays.proven
    assert stays.message == ("TF32 ruled out: with use_tf32=0 the case still fails "
                                "(max abs 1.0e-2)")


def test_an_output_failed_by_a_metric_with_no_atol_needed_is_proven_only_by_a_pass() -> None:
    # `ulp: 0` failed while every element lay within rtol: the output needs atol >= 0 before
    # and after; an unchanged second run must not read as an error that fell tenfold.
    before = replaced(_output(False, 6e-8, 0.0), mismatches=0, failed=("ulp",),
                      thresholds={"ulp": 0.0}, metrics={"ulp": 6.0})
    after = replaced(before, max_abs=6e-8)
    same = causes.prove(_suspect(), [before], [after])
    assert not same.proven
    assert same.message.startswith("TF32 ruled out: with use_tf32=0 the case still fails")
    passes = causes.prove(_suspect(), [before],
                          [replaced(before, passed=True, failed=(), metrics={"ulp": 0.0})])
    assert passes.proven


def test_only_floating_failures_are_worth_a_second_run() -> None:
    assert causes.floating_failure([_output(False, 1.0, 1.0)])
    integer = OutputComparison(name="ids", passed=False, atol=0, rtol=0, expected_dtype="int64")
    assert not causes.floating_failure([integer, _output(True, 0.0, 0.0)])


class _Recorded:
    """The second run's session, faked: it returns the recorded outputs, as strict float32
    would on a GPU where only TF32 made the difference."""

    def __init__(self, outputs: dict[bytes, list[np.ndarray]]) -> None:
        self.outputs = outputs

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return self.outputs[b"".join(a.tobytes() for a in feeds.values())]

    def output_names(self) -> list[str]:
        return ["y"]


def test_the_worker_attaches_a_proven_cause_and_every_report_says_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A shipped head whose recorded outputs it no longer matches: the case fails.
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((2, 8)).astype(np.float32)} for _ in range(2)]
    truth = [[f["x"] @ np.ones((8, 3), np.float32)] for f in feeds]
    drifted = [[t[0] + np.float32(3e-3)] for t in truth]
    write_test_data(tmp_path / "data", feeds, drifted, ["y"])
    _matmul_model(tmp_path / "head.onnx")
    spec = parse_spec(textwrap.dedent("""\
        version: 1
        datasets: {recorded: {kind: onnx-test-data, path: data}}
        models: [{name: head, onnx: head.onnx, datasets: [recorded]}]
        """), tmp_path / "parity.yaml")
    case = plan(spec)[0]
    recorded = {f["x"].tobytes(): d for f, d in zip(feeds, drifted, strict=True)}
    variant = TargetSpec(name="cpu (use_tf32=0)", providers=(CPU,))
    suspect = causes.Suspect("tf32", "use_tf32=0", lambda reruns: reruns.on_target(variant),
                             "check strict float32")
    monkeypatch.setattr(ladder, "suspects", lambda case, found: (suspect,))
    from onnx_parity.run import prepared

    real = prepared.session

    def session(memo: ModelMemo, record: Any, path: Path, target: Any = None) -> Any:
        return _Recorded(recorded) if target is variant else real(memo, record, path, target)

    monkeypatch.setattr(prepared, "session", session)
    memo = ModelMemo(WorkerTask(spec.root, case.model, (case,), tmp_path / "work"))
    result = run_case(memo, case)
    assert result.status == "failed"  # the user's tolerance decides the status
    cause = result.details.cause
    assert cause is not None and cause.proven and cause.message.startswith(
        "TF32: with use_tf32=0 it passes (max abs 0); with TF32 on it needs atol ≥ ")
    assert cause.before["max_abs"] == pytest.approx(3e-3, rel=1e-3)
    report = RunReport("parity.yaml", {}, (result,))
    assert cause.message in case_line(result)
    assert cause.message in annotations(report, "parity.yaml")[0]
    assert "💡 TF32: with use\\_tf32=0 it passes" in summary_markdown(report)
    assert "TF32: with use_tf32=0 it passes" in junit_xml_string(report)


def _matmul_model(path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.ones((8, 3), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "head",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, str(path))


@pytest.mark.gpu
def test_tf32_drift_is_named_on_a_real_gpu(tmp_path: Path, write_spec: Any,
                                           run_cli: Any) -> None:
    # Wide matrix products against a strict float32 tolerance: TF32's 10-bit mantissa shows.
    # A batch of 8: at batch 1 cuBLAS takes a matrix-vector path that TF32 does not touch
    # (measured on an H100 with onnxruntime-gpu 1.31.1: max abs 1.5e-8 at batch 1, 1.7e-4 at 4).
    spec = write_spec("""
        version: 1
        datasets:
          eight: {kind: random, seed: 0, samples: 1, batch_sizes: [8]}
        defaults: {datasets: [eight]}
        models:
          - name: wide
            torch: models.py:make_wide_mlp
            inputs: {x: {shape: [batch, 512]}}
            targets: [cuda]
            tolerance: {atol: 1.0e-5, rtol: 0.0}
        """)
    code, _, _, report = run_cli(spec)
    (case,) = report["cases"]
    assert case["status"] == "failed"
    assert case["details"]["numerics"]["tf32"] is True
    assert case["details"]["cause"]["kind"] == "tf32" and case["details"]["cause"]["proven"]
    assert code == 1
