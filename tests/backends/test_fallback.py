"""Execution-provider fall-back, for real: onnxruntime-gpu is installed here without CUDA, so a
`cuda` target really falls back to the CPU, and the reports must say so and why."""

from __future__ import annotations

import dataclasses
import os
import textwrap
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from helpers import DATA, EXAMPLES, by_id
from onnx_parity.backends import (
    OrtTarget,
    Placement,
    SessionFacts,
    native_stderr,
    placement_from_profile,
    probe_cuda,
    tidy_log,
)
from onnx_parity.errors import RunError
from onnx_parity.plan.cases import plan
from onnx_parity.run.flow import judge_fallback
from onnx_parity.run.record import CaseRecord
from onnx_parity.spec import PREDEFINED_TARGETS, TargetSpec, parse_spec

DOCTOR = DATA / "doctor"
MLP = EXAMPLES / "artifacts" / "mlp.onnx"
CUDA_FIRST = ("CUDAExecutionProvider", "CPUExecutionProvider")
ORT_REASON = "Failed to create CUDAExecutionProvider. Require cuDNN 9.* and CUDA 13.*"

SPEC = """
    version: 1
    targets:
      gpu-warn: {providers: [CUDAExecutionProvider, CPUExecutionProvider], fallback: warn}
      gpu-allow: {providers: [CUDAExecutionProvider, CPUExecutionProvider], fallback: allow}
      gpu-only: {providers: [CUDAExecutionProvider], disable_cpu_ep_fallback: true}
    models:
      - name: lin
        torch: models.py:make_linear
        inputs: {x: {shape: [batch, 4]}}
        exporter: torchscript
        targets: [cpu, cuda, gpu-warn, gpu-allow, gpu-only]
"""


@pytest.fixture(scope="module")
def cuda_missing() -> None:
    if probe_cuda()[0]:
        pytest.skip("CUDA works here: these tests need onnxruntime-gpu without CUDA")


@pytest.mark.slow
@pytest.mark.usefixtures("cuda_missing")
def test_each_policy_reports_the_real_fall_back(write_spec: Callable[[str], Path],
                                                run_cli: Callable[..., Any],
                                                tmp_path: Path) -> None:
    junit, summary = tmp_path / "junit.xml", tmp_path / "summary.md"
    code, out, _, report = run_cli(write_spec(SPEC), "--junit", str(junit),
                                   "--summary", str(summary))
    assert code == 1
    cases = by_id(report)

    cpu = cases["lin[opset18-cpu-random-b1]"]
    assert cpu["status"] == "passed" and "providers" not in cpu["details"]

    fail = cases["lin[opset18-cuda-random-b1]"]  # the predefined target: fallback: fail
    assert fail["status"] == "error" and fail["stage"] == "run"
    assert fail["message"].startswith("target 'cuda' asked for CUDAExecutionProvider, but ONNX "
                                      "Runtime runs on CPUExecutionProvider: ")
    assert ORT_REASON in fail["message"] and fail["message"].endswith("(fallback: fail)")
    providers = fail["details"]["providers"]
    assert providers["requested"] == list(CUDA_FIRST)
    assert providers["active"] == ["CPUExecutionProvider"]
    assert list(providers["nodes"]) == ["CPUExecutionProvider"]  # every node, counted by op
    assert sum(providers["nodes"]["CPUExecutionProvider"].values()) >= 1
    assert ORT_REASON in providers["fallback_reason"]

    warn = cases["lin[opset18-gpu-warn-random-b1]"]
    assert warn["status"] == "passed"
    assert len(warn["notes"]) == 1 and ORT_REASON in warn["notes"][0]
    assert warn["details"]["providers"]["nodes"] == providers["nodes"]

    allow = cases["lin[opset18-gpu-allow-random-b1]"]
    assert allow["status"] == "passed" and allow["notes"] == []
    assert allow["details"]["providers"]["active"] == ["CPUExecutionProvider"]  # still on record

    only = cases["lin[opset18-gpu-only-random-b1]"]
    assert only["status"] == "error"
    assert "fallback to CPU EP has been explicitly disabled" in only["message"]
    assert ORT_REASON in only["message"]  # what ONNX Runtime logged while refusing

    # The preflight leads every report, so the reason sits next to the failures.
    preflight = report["environment"]["preflight"]
    assert preflight["usable"] is False and preflight["gpu_cases"] == 4
    assert out.startswith("GPU preflight: CUDA is NOT usable here")
    suites = ET.parse(junit).getroot()
    first = suites[0]
    assert first.get("name") == "environment" and first[0].get("name") == "environment"
    assert first[0].find("failure") is not None
    assert suites.get("tests") == str(len(cases) + 1)
    markdown = summary.read_text()
    assert markdown.index("GPU preflight") < markdown.index("### ❌ lin")
    assert "| driver | ❌ fail | no NVIDIA driver found" in markdown


@pytest.mark.slow
@pytest.mark.usefixtures("cuda_missing")
def test_skip_unavailable_skips_gpu_cases_with_the_preflights_reason(
        write_spec: Callable[[str], Path], run_cli: Callable[..., Any], tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    code, _, _, report = run_cli(write_spec(SPEC), "--skip-unavailable", "--junit", str(junit))
    assert code == 0
    cases = by_id(report)
    assert cases["lin[opset18-cpu-random-b1]"]["status"] == "passed"
    for target in ("cuda", "gpu-warn", "gpu-allow", "gpu-only"):
        case = cases[f"lin[opset18-{target}-random-b1]"]
        assert case["status"] == "skipped", case
        assert case["message"].startswith("no usable GPU here (--skip-unavailable): driver: ")
    assert report["environment"]["preflight"]["skipped_cases"] == 4
    environment = ET.parse(junit).getroot()[0][0]
    assert environment.find("skipped") is not None and environment.find("failure") is None


def test_placement_counts_what_is_off_the_preferred_provider() -> None:
    placement = Placement({"CUDAExecutionProvider": {"MatMul": 4},
                           "CPUExecutionProvider": {"Shape": 2, "Gather": 1}})
    assert placement.elsewhere("CUDAExecutionProvider") == {
        "CPUExecutionProvider": {"Shape": 2, "Gather": 1}}
    assert placement.elsewhere("CUDAExecutionProvider", ["Shape"]) == {
        "CPUExecutionProvider": {"Gather": 1}}
    assert placement.elsewhere("CUDAExecutionProvider", ["Shape", "Gather"]) == {}


def test_shape_arithmetic_on_the_cpu_is_not_a_fall_back(tmp_path: Path) -> None:
    """Read from a real profile: Shape → Gather → Unsqueeze → Concat feed a Reshape."""
    import json

    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    int64 = TensorProto.INT64
    graph = helper.make_graph(
        [
            helper.make_node("Shape", ["x"], ["shape"]),
            helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
            helper.make_node("Unsqueeze", ["batch", "zero_axis"], ["batch_1d"]),
            helper.make_node("Concat", ["batch_1d", "minus_one"], ["target"], axis=0),
            helper.make_node("Reshape", ["x", "target"], ["flat"]),
            helper.make_node("Relu", ["flat"], ["y"]),
        ],
        "shapes",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 12])],
        [helper.make_tensor("zero", int64, [], [0]),
         helper.make_tensor("zero_axis", int64, [1], [0]),
         helper.make_tensor("minus_one", int64, [1], [-1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "shapes.onnx"
    onnx.save(model, str(path))
    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = str(tmp_path / "profile")  # not into the working directory
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    session.run(None, {"x": np.ones((2, 3, 4), np.float32)})
    profile = Path(session.end_profiling())
    placement = placement_from_profile(json.loads(profile.read_text()))
    profile.unlink()
    assert placement.cpu_shape_nodes == {"Concat": 1, "Gather": 1, "Shape": 1, "Unsqueeze": 1}
    # Were this graph's compute on CUDA, only the float nodes would count as having left it.
    assert placement.elsewhere("CUDAExecutionProvider") == {
        "CPUExecutionProvider": {"Relu": 1, "Reshape": 1}}
    assert placement.elsewhere("CUDAExecutionProvider", ["Reshape", "Relu"]) == {}


@pytest.mark.usefixtures("cuda_missing")
def test_a_session_records_the_fall_back_its_log_and_its_placement() -> None:
    target = OrtTarget(MLP, PREDEFINED_TARGETS["cuda"])
    assert target.facts.fell_back and target.facts.active == ("CPUExecutionProvider",)
    assert any(ORT_REASON in line for line in target.facts.log)
    placement = target.placement({"x": np.zeros((2, 10), np.float32)})
    assert placement is not None and list(placement.nodes) == ["CPUExecutionProvider"]
    assert target.placement({}) is placement  # profiled once; later runs are not
    assert target.run({"x": np.ones((1, 10), np.float32)})[0].shape == (1, 3)


def test_a_cpu_target_is_not_profiled() -> None:
    target = OrtTarget(MLP, PREDEFINED_TARGETS["cpu"])
    assert not target.facts.can_fall_back
    assert target.placement({"x": np.zeros((1, 10), np.float32)}) is None


def test_a_refused_session_is_an_error_with_what_ort_logged() -> None:
    strict = TargetSpec("strict", ("CUDAExecutionProvider",), disable_cpu_ep_fallback=True)
    if probe_cuda()[0]:
        pytest.skip("CUDA works here")
    with pytest.raises(RunError, match="could not create a session for target 'strict'"):
        OrtTarget(MLP, strict)


def test_tidy_log_keeps_what_onnx_runtime_said_and_drops_the_decoration() -> None:
    lines = tidy_log((DOCTOR / "ort-1.31.1-without-cuda.log").read_text())
    assert lines == (
        "Failed to load library libonnxruntime_providers_cuda.so with error: libcublasLt.so.13: "
        "cannot open shared object file: No such file or directory",
        "Failed to create CUDAExecutionProvider. Require cuDNN 9.* and CUDA 13.*.",
    )


def test_native_stderr_collects_what_c_code_writes_to_fd_2() -> None:
    with native_stderr() as lines:
        os.write(2, b"[W:onnxruntime:, x.cc:1 f] from native code\n")
    assert lines == ["[W:onnxruntime:, x.cc:1 f] from native code"]
    # the sink is kept for the next capture: it holds only what came after, and one nested
    # inside another has its own
    with native_stderr() as outer:
        os.write(2, b"short\n")
        with native_stderr() as inner:
            os.write(2, b"inner\n")
    assert (outer, inner) == (["short"], ["inner"])


def test_probe_says_why_cuda_is_not_usable_here(cuda_missing: None) -> None:
    usable, reason = probe_cuda()
    assert not usable and ORT_REASON in reason


@pytest.mark.gpu
def test_cuda_target_runs_every_node_on_cuda(write_spec: Callable[[str], Path],
                                             run_cli: Callable[..., Any]) -> None:
    spec = write_spec("""
        version: 1
        models:
          - name: lin
            torch: models.py:make_linear
            inputs: {x: {shape: [batch, 4]}}
            targets: [cuda]
    """)
    code, out, _, report = run_cli(spec)
    assert code == 0, out
    (case,) = report["cases"]
    # No note but the latency's (a one-layer model is slower on ONNX Runtime's CUDA provider
    # than in PyTorch: 0.29 against 0.059 ms per call on an H100).
    assert case["status"] == "passed"
    assert [note for note in case["notes"] if "slower than PyTorch" not in note] == []
    providers = case["details"]["providers"]
    assert providers["active"][0] == "CUDAExecutionProvider"
    assert list(providers["nodes"]) == ["CUDAExecutionProvider"], providers
    assert report["environment"]["preflight"]["usable"] is True


class GpuSession:
    """A CUDA session's facts as recorded on a GPU machine: CUDA active, but shape nodes (and
    one Gather) placed on the CPU, as ONNX Runtime does for shape computations."""

    facts = SessionFacts(CUDA_FIRST, CUDA_FIRST)

    def placement(self, feeds: object) -> Placement:
        return Placement({"CUDAExecutionProvider": {"MatMul": 4, "MemcpyToHost": 1},
                          "CPUExecutionProvider": {"Shape": 2, "Gather": 1}})


@pytest.mark.parametrize(
    ("policy", "allowed", "outcome"),
    [
        ("fail", "[]", "error"),
        ("warn", "[]", "note"),
        ("allow", "[]", "nothing"),
        ("fail", "[Shape, Gather]", "nothing"),
    ],
)
def test_nodes_off_the_gpu_follow_the_policy(tmp_path: Path, policy: str, allowed: str,
                                             outcome: str) -> None:
    spec = parse_spec(textwrap.dedent(f"""\
        version: 1
        targets:
          gpu: {{providers: [CUDAExecutionProvider, CPUExecutionProvider], fallback: {policy},
                allow_cpu_ops: {allowed}}}
        models:
          - {{name: m, torch: pkg.mod:build, inputs: {{x: {{shape: [1, 3]}}}}, targets: [gpu]}}
        """), tmp_path / "parity.yaml")
    (case,) = plan(spec)
    record = CaseRecord(case)
    sample = SimpleNamespace(inputs={"x": np.zeros((1, 3), np.float32)})

    def judge() -> None:
        judge_fallback(record, GpuSession(), [sample])

    if outcome == "error":
        with pytest.raises(RunError) as caught:
            judge()
        assert str(caught.value) == (
            "target 'gpu' asked for CUDAExecutionProvider, but 3 nodes ran elsewhere: "
            "CPUExecutionProvider: Shape ×2, Gather ×1 (list op types ONNX Runtime puts on the "
            "CPU on purpose in the target's allow_cpu_ops) (fallback: fail)")
    else:
        judge()
        assert (record.notes != []) == (outcome == "note")
    providers = record.details.providers
    assert providers is not None and providers.nodes is not None
    assert providers.nodes["CPUExecutionProvider"] == {"Shape": 2, "Gather": 1}
    assert (providers.fallback_reason is not None) == (allowed == "[]")


# -- the policy itself, from recorded facts -----------------------------------------------------

_CUDA_FIRST = ("CUDAExecutionProvider", "CPUExecutionProvider")


@pytest.mark.parametrize("active, nodes, shape_nodes, allow, policy, action, said", [
    # every node on CUDA: nothing to say, whatever the policy
    (_CUDA_FIRST, {"CUDAExecutionProvider": {"Gemm": 2}}, {}, (), "fail", "none", ""),
    # the CPU ran only shape arithmetic, which ONNX Runtime puts there on purpose
    (_CUDA_FIRST, {"CUDAExecutionProvider": {"Gemm": 2}, "CPUExecutionProvider": {"Shape": 1}},
     {"Shape": 1}, (), "fail", "none", ""),
    # a real node on the CPU: fails, warns or passes as the policy says
    (_CUDA_FIRST, {"CUDAExecutionProvider": {"Gemm": 2}, "CPUExecutionProvider": {"Det": 1}},
     {}, (), "fail", "fail", "1 node ran elsewhere: CPUExecutionProvider: Det ×1"),
    (_CUDA_FIRST, {"CUDAExecutionProvider": {"Gemm": 2}, "CPUExecutionProvider": {"Det": 1}},
     {}, (), "warn", "warn", "1 node ran elsewhere"),
    (_CUDA_FIRST, {"CUDAExecutionProvider": {"Gemm": 2}, "CPUExecutionProvider": {"Det": 1}},
     {}, (), "allow", "none", "1 node ran elsewhere"),
    # ... unless the target allows that op type on the CPU
    (_CUDA_FIRST, {"CUDAExecutionProvider": {"Gemm": 2}, "CPUExecutionProvider": {"Det": 1}},
     {}, ("Det",), "fail", "none", ""),
    # the session itself fell back: said once, at session level, not again per node
    (("CPUExecutionProvider",), {"CPUExecutionProvider": {"Gemm": 2}}, {}, (), "fail", "fail",
     "but ONNX Runtime runs on CPUExecutionProvider: Failed to load library libcudnn.so.9"),
])
def test_the_fall_back_policy_judges_recorded_facts(
        active: tuple[str, ...], nodes: dict[str, dict[str, int]], shape_nodes: dict[str, int],
        allow: tuple[str, ...], policy: str, action: str, said: str) -> None:
    from onnx_parity.backends.fallback import judge_placement
    from onnx_parity.backends.placement import Placement
    from onnx_parity.backends.session import SessionFacts

    target = TargetSpec(name="cuda", providers=_CUDA_FIRST, allow_cpu_ops=allow,
                        fallback=policy)  # type: ignore[arg-type]
    facts = SessionFacts(requested=_CUDA_FIRST, active=active,
                         log=("Failed to load library libcudnn.so.9: cannot open shared object "
                              "file: No such file or directory",))
    judgement = judge_placement(target, facts, Placement(nodes, shape_nodes))
    assert judgement.action == action
    assert said in judgement.message
    assert bool(judgement.problems) == bool(said)
    assert judgement.providers.requested == _CUDA_FIRST
    if judgement.problems:
        assert judgement.message.startswith("target 'cuda' asked for CUDAExecutionProvider")
        assert judgement.providers.fallback_reason


_TRT_FIRST = ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")


@pytest.mark.parametrize(("nodes", "allow_cuda", "action", "said"), [
    # TensorRT took everything but ONNX Runtime's copies and the CPU's shape arithmetic
    ({"TensorrtExecutionProvider": {"TRTKernel": 2},
      "CUDAExecutionProvider": {"MemcpyFromHost": 1, "MemcpyToHost": 1},
      "CPUExecutionProvider": {"Shape": 1}}, (), "none", ""),
    # nodes TensorRT did not take ran on CUDA: a fall-back that says what to do about it
    ({"TensorrtExecutionProvider": {"TRTKernel": 1},
      "CUDAExecutionProvider": {"NonZero": 2}}, (), "fail",
     "target 'tensorrt' asked for TensorrtExecutionProvider, but 2 nodes ran elsewhere: "
     "CUDAExecutionProvider: NonZero ×2 (TensorRT did not take the nodes on CUDA; list the op "
     "types CUDA may run in the target's allow_cuda_ops) (fallback: fail)"),
    ({"TensorrtExecutionProvider": {"TRTKernel": 1},
      "CUDAExecutionProvider": {"NonZero": 2}}, ("NonZero",), "none", ""),
    # allowed on CUDA is not allowed on the CPU
    ({"TensorrtExecutionProvider": {"TRTKernel": 1}, "CPUExecutionProvider": {"NonZero": 1}},
     ("NonZero",), "fail", "CPUExecutionProvider: NonZero ×1 (list op types ONNX Runtime puts "
                           "on the CPU on purpose in the target's allow_cpu_ops)"),
])
def test_a_tensorrt_target_judges_what_cuda_and_the_cpu_ran(
        nodes: dict[str, dict[str, int]], allow_cuda: tuple[str, ...], action: str,
        said: str) -> None:
    from onnx_parity.backends.fallback import judge_placement

    target = dataclasses.replace(PREDEFINED_TARGETS["tensorrt"], allow_cuda_ops=allow_cuda)
    facts = SessionFacts(requested=_TRT_FIRST, active=_TRT_FIRST)
    judgement = judge_placement(target, facts, Placement(nodes, {"Shape": 1}))
    assert judgement.action == action
    assert said in judgement.message and bool(said) == bool(judgement.problems)
    assert judgement.providers.nodes == nodes


def test_tensorrt_that_did_not_load_is_a_session_fall_back_with_its_reason() -> None:
    from onnx_parity.backends.fallback import judge_placement

    log = ("Failed to load library libonnxruntime_providers_tensorrt.so with error: "
           "libnvinfer.so.10: cannot open shared object file: No such file or directory",)
    facts = SessionFacts(requested=_TRT_FIRST, active=_TRT_FIRST[1:], log=log)
    judgement = judge_placement(PREDEFINED_TARGETS["tensorrt"], facts,
                                Placement({"CUDAExecutionProvider": {"Gemm": 1}}))
    assert judgement.action == "fail"
    assert judgement.message == (
        "target 'tensorrt' asked for TensorrtExecutionProvider, but ONNX Runtime runs on "
        f"CUDAExecutionProvider, CPUExecutionProvider: {log[0]} (fallback: fail)")


def test_tensorrts_fused_nodes_are_counted_as_one_op_type() -> None:
    def event(provider: str, op: str) -> dict[str, Any]:
        return {"cat": "Node", "name": f"{op}_kernel_time",
                "args": {"provider": provider, "op_name": op}}

    placement = placement_from_profile([
        event("TensorrtExecutionProvider", "TRTKernel_graph_main_graph_1234567890_0_0"),
        event("TensorrtExecutionProvider", "TRTKernel_graph_main_graph_1234567890_1_1"),
        event("CUDAExecutionProvider", "NonZero")])
    assert placement.nodes == {"CUDAExecutionProvider": {"NonZero": 1},
                               "TensorrtExecutionProvider": {"TRTKernel": 2}}


def test_tensorrt_libraries_are_looked_for_in_pips_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the preflight finds is what the session builder loads: site-packages/tensorrt_libs
    (this machine has no TensorRT; a file that is not a library shows the search)."""
    from onnx_parity.backends import session

    (tmp_path / "tensorrt_libs").mkdir()
    (tmp_path / "tensorrt_libs" / "libnvinfer.so.10").write_text("not a library\n" * 10)
    monkeypatch.setattr(session, "default_pip_roots", lambda: [tmp_path])
    said = session.preload_tensorrt_libraries.__wrapped__("1.31.1")
    assert len(said) == 1 and said[0].startswith(f"{tmp_path}/tensorrt_libs/libnvinfer.so.10: ")
    assert session.preload_tensorrt_libraries.__wrapped__("1.17.3") == ()  # wants TensorRT 8


def test_onnx_runtimes_own_assignment_counts_a_fused_provider_by_its_nodes() -> None:
    from onnx_parity.backends.placement import Placement, with_assignment

    profiled = Placement({"OpenVINOExecutionProvider": {"OpenVINO-EP-subgraph_1": 1},
                          "CPUExecutionProvider": {"Shape": 1, "Gather": 1}}, {"Shape": 1})
    assigned = [["OpenVINOExecutionProvider", [["mm", "MatMul"], ["a", "Tanh"], ["b", "Tanh"]]],
                ["CPUExecutionProvider", [["s", "Shape"]]]]
    placement = with_assignment(profiled, assigned)
    assert placement.nodes == {"CPUExecutionProvider": {"Gather": 1, "Shape": 1},
                               "OpenVINOExecutionProvider": {"MatMul": 1, "Tanh": 2}}
    assert placement.elsewhere("OpenVINOExecutionProvider") == {
        "CPUExecutionProvider": {"Gather": 1}}  # the CPU's shape arithmetic stays allowed
    for unreadable in (None, [], [["OpenVINOExecutionProvider"]], "x"):
        assert with_assignment(profiled, unreadable) is profiled
