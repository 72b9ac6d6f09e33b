"""The cause ladder's rungs proven on the CPU: int8 saturation by a variant remade with
reduce_range=True, the exporter by the same case with the other exporter. (TF32's rung is
judged from recorded facts in test_causes.py; stale weights in test_weights.py.)"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers import FIXTURES, by_id
from onnx_parity.machine.cpu import has_vnni

INT8 = """
    version: 1
    datasets: {calib: {kind: random, seed: 7, samples: 4, batch_sizes: [8]}}
    models:
      - {name: mlp, torch: models.py:make_wide, inputs: {x: {shape: [batch, 8]}},
         datasets: [calib], precisions: [int8-dynamic, int8], calibration: calib}
"""


@pytest.mark.slow
def test_int8_saturation_is_named_with_the_fix_where_the_cpu_has_no_vnni(
        write_spec: Callable[[str], Path], run_cli: Callable[..., Any]) -> None:
    code, out, _, report = run_cli(write_spec(INT8), "--localize", "never")
    cases = by_id(report)
    if has_vnni() is not False:  # a VNNI CPU (or another architecture) runs int8 as it is
        assert code == 0, out
        return
    assert code == 1
    for precision, call in (("int8-dynamic", "quantize_dynamic"), ("int8", "quantize_static")):
        case = cases[f"mlp[opset18-{precision}-cpu-calib-b8]"]
        assert case["status"] == "failed"  # the verdict stays: this CPU really loses quality
        cause = case["details"]["cause"]
        assert cause["kind"] == "int8" and cause["proven"], cause
        assert cause["message"].startswith(
            "int8 saturation: with the variant remade with reduce_range=True it passes"
            " (cosine 0.99"), cause["message"]
        assert "this CPU has no VNNI" in cause["message"]
        assert f"{call}(..., reduce_range=True)" in cause["message"]
        assert cause["before"]["required_atol"] > 0 and cause["after"]["passed"] is True
        assert "💡 int8 saturation" in out or "int8 saturation: with" in out


@pytest.mark.slow
def test_int8_loss_that_reduce_range_does_not_fix_is_ruled_out(
        write_spec: Callable[[str], Path], run_cli: Callable[..., Any]) -> None:
    spec = write_spec("""
        version: 1
        datasets: {rows: {kind: random, seed: 2, samples: 4, batch_sizes: [8]}}
        models:
          - name: outlier
            torch: models.py:make_outlier
            inputs: {x: {shape: [batch, 16]}}
            datasets: [rows]
            precisions: [int8]
            tolerance: {precisions: {int8: {cosine: 0.99}}}
    """)
    _, _, _, report = run_cli(spec, "--localize", "never")
    (case,) = report["cases"]
    assert case["status"] == "failed" and "cause" not in case["details"]
    (ruled_out,) = [c for c in case["details"]["causes_ruled_out"] if c["kind"] == "int8"]
    assert not ruled_out["proven"]
    assert ruled_out["message"].startswith(
        "int8 saturation ruled out: with the variant remade with reduce_range=True the case"
        " still fails (cosine "), ruled_out["message"]


def _branch_spec(tmp_path: Path, traced: float, exported: float) -> Path:
    shutil.copy(FIXTURES / "faulty_models.py", tmp_path / "faulty_models.py")
    spec = tmp_path / "parity.yaml"
    spec.write_text(f"""version: 1
models:
  - name: branch
    torch: faulty_models.py:make_exporter_branch
    args: {{traced: {traced}, exported: {exported}}}
    inputs: {{x: {{shape: [batch, 6]}}}}
    exporters: [dynamo, torchscript]
""")
    return spec


def test_the_other_exporter_passing_names_the_exporter(
        tmp_path: Path, run_cli: Callable[..., Any]) -> None:
    code, _, _, report = run_cli(_branch_spec(tmp_path, traced=1.5, exported=1.0),
                                 "--localize", "never")
    cases = by_id(report)
    assert code == 1
    assert cases["branch[opset18-dynamo-cpu-random-b1]"]["status"] == "passed"
    traced = cases["branch[opset18-torchscript-cpu-random-b1]"]
    assert traced["status"] == "failed"
    cause = traced["details"]["cause"]
    assert cause["kind"] == "exporter" and cause["proven"]
    assert cause["message"].startswith(
        "the torchscript exporter: with exporter: dynamo it passes (max abs "), cause["message"]
    assert "; as exported by torchscript, it needs atol ≥ 7.8e-1;" in cause["message"]
    assert "the drift comes from the torchscript export, not the model" in cause["message"]


def test_no_exporter_hint_when_the_other_exporter_fails_too(
        tmp_path: Path, run_cli: Callable[..., Any]) -> None:
    # The dynamo export is off too, by less (a tenth of the error would "prove" an arithmetic cause,
    # but an exporter is named only when the other exporter's case passes).
    _, _, _, report = run_cli(_branch_spec(tmp_path, traced=2.0, exported=1.05),
                              "--localize", "never")
    cases = by_id(report)
    assert {c["status"] for c in cases.values()} == {"failed"}
    for case in cases.values():
        assert "cause" not in case["details"], case["details"]["cause"]
        graph, ruled_out = case["details"]["causes_ruled_out"]
        assert graph["kind"] == "graph" and not graph["proven"]  # not ONNX Runtime's either
        assert graph["message"].startswith("graph optimizations ruled out: with"
                                           " graph_optimization_level: disable_all the case"
                                           " still fails (max abs ")
        assert ruled_out["kind"] == "exporter" and not ruled_out["proven"]
        assert " ruled out: with exporter: " in ruled_out["message"]
        assert "the case still fails (max abs " in ruled_out["message"]


def test_causes_never_tries_no_rung(tmp_path: Path, run_cli: Callable[..., Any]) -> None:
    _, _, _, report = run_cli(_branch_spec(tmp_path, traced=1.5, exported=1.0),
                              "--localize", "never", "--causes", "never")
    traced = by_id(report)["branch[opset18-torchscript-cpu-random-b1]"]
    assert traced["status"] == "failed"
    assert "cause" not in traced["details"] and "causes_ruled_out" not in traced["details"]


def test_graph_optimizations_are_named_with_the_level_where_the_numbers_change(
        tmp_path: Path) -> None:
    # No fusion of ONNX Runtime's changes a tiny model's numbers on the CPU provider beyond a
    # tolerance, so the re-runs are recorded facts: the case's outputs drift at the default
    # level and at extended, and agree with graph optimizations off and at basic.
    import numpy as np

    from onnx_parity.compare.outputs import compare_case
    from onnx_parity.explain import followups
    from onnx_parity.explain.evidence import Evidence
    from onnx_parity.plan.cases import plan
    from onnx_parity.spec import parse_spec

    shutil.copy(FIXTURES / "models.py", tmp_path / "models.py")
    spec = parse_spec("version: 1\nmodels: [{name: m, torch: models.py:make_wide,"
                      " inputs: {x: {shape: [batch, 8]}}}]\n", tmp_path / "parity.yaml")
    (case,) = plan(spec)
    feeds = [{"x": np.ones((1, 8), np.float32)}]
    truth, drifted = [[np.ones((1, 4), np.float32)]], [[np.full((1, 4), 1.5, np.float32)]]
    before = compare_case(["y"], truth, drifted, case.tolerance_for)
    evidence = Evidence(case, tmp_path / "m.onnx", feeds, ["y"], truth, drifted, before)

    class Session:
        def __init__(self, outputs: list[list[Any]]) -> None:
            self.outputs = outputs

        def run(self, feeds: Any) -> list[Any]:
            return self.outputs[0]

        def output_names(self) -> list[str]:
            return ["y"]

    class Reruns:
        def __init__(self) -> None:
            self.asked: list[str] = []

        def on_target(self, variant: Any) -> Session:
            level = variant.session_options["graph_optimization_level"]
            self.asked.append(level)
            return Session(truth if level in ("disable_all", "basic") else drifted)

        def remade(self, reduce_range: bool) -> Any:
            raise AssertionError("an fp32 case has no variant to remake")

        def exported_with(self, exporter: str) -> Any:
            raise AssertionError("the spec checks one exporter")

        def optimized_ops(self, variant: Any) -> dict[str, int]:
            level = variant.session_options["graph_optimization_level"]
            fused = {"com.microsoft.FusedMatMul": 1} if level == "extended" else {}
            return {"MatMul": 1, **fused}

    reruns = Reruns()
    details = followups.find_cause(evidence, None, reruns)
    cause = details.cause
    assert cause is not None and cause.kind == "graph" and cause.proven
    assert reruns.asked == ["disable_all", "basic", "extended"]  # the walk stops where it fails
    assert cause.message.startswith(
        "graph optimizations: with graph_optimization_level: disable_all it passes (max abs 0);"
        " optimized, it needs atol ≥ ")
    assert cause.message.endswith(
        "; it passes below level 'extended' and fails from it on: graph_optimization_level:"
        " basic is the highest that keeps its numbers; nodes only level 'extended' makes:"
        " com.microsoft.FusedMatMul (1)")


def test_the_optimized_graph_says_which_nodes_a_level_makes(tmp_path: Path) -> None:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from onnx_parity.backends.session import optimized_ops
    from onnx_parity.spec import PREDEFINED_TARGETS

    weight = numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
    bias = numpy_helper.from_array(np.ones((3,), np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [weight, bias])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(path))
    cpu = PREDEFINED_TARGETS["cpu"]
    plain = optimized_ops(path, cpu.with_session_options(graph_optimization_level="disable_all"),
                          tmp_path / "work", threads=1)
    fused = optimized_ops(path, cpu.with_session_options(graph_optimization_level="basic"),
                          tmp_path / "work", threads=1)
    assert plain == {"MatMul": 1, "Add": 1}
    assert "MatMul" not in fused and sum(fused.values()) == 1  # MatMul + Add made one node
    assert not list((tmp_path / "work").glob("*.optimized.onnx"))  # nothing left behind
