"""Targets that say what deployments say: session options, config entries and custom op
libraries, from the spec (located errors) to the session (really applied, read back) to the
case's facts, its notes and its repro bundle; the predefined TensorRT target and its caches."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import yaml
from onnx import TensorProto, helper

from onnx_parity.backends.options import TENSORRT_CACHE_FOLDER, provider_list
from onnx_parity.backends.session import create_session
from onnx_parity.errors import RunError, SpecError
from onnx_parity.explain.causes import numerics
from onnx_parity.spec import PREDEFINED_TARGETS, TargetSpec, load_spec, parse_spec
from onnx_parity.spec.model import (
    RESERVED_SESSION_OPTIONS,
    SESSION_OPTIONS,
    session_option_problem,
)

CPU = ("CPUExecutionProvider",)
TRT = "TensorrtExecutionProvider"


def _model(nodes: list[Any], inputs: list[Any], outputs: list[Any],
           initializers: list[Any] = (), domains: tuple[tuple[str, int], ...] = ()) -> bytes:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    opsets = [helper.make_opsetid("", 17), *(helper.make_opsetid(d, v) for d, v in domains)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8).SerializeToString()


def _float(name: str, shape: list[int]) -> Any:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


# x → Identity → Add(+0): ONNX Runtime's basic level removes the Identity; its Add passes a
# denormal through unless denormals are zero.
IDENTITY_ADD = _model(
    [helper.make_node("Identity", ["x"], ["i"]), helper.make_node("Add", ["i", "zero"], ["y"])],
    [_float("x", [2])], [_float("y", [2])],
    [helper.make_tensor("zero", TensorProto.FLOAT, [1], [0.0])])


def _spec(folder: Path, targets: str) -> Any:
    entries = textwrap.indent(textwrap.dedent(targets).lstrip("\n"), "  ")
    text = "version: 1\ntargets:\n" + entries + (
        "models:\n  - name: m\n    torch: pkg.mod:build\n    inputs: {x: [1, 3]}\n")
    return parse_spec(text, folder / "parity.yaml")


def _problems(folder: Path, targets: str) -> list[tuple[int, int, str]]:
    with pytest.raises(SpecError) as caught:
        _spec(folder, targets)
    assert {p.file for p in caught.value.problems} == {str(folder / "parity.yaml")}
    return [(p.line, p.column, p.message) for p in caught.value.problems]


# -- the spec --------------------------------------------------------------------------------

def test_session_settings_resolve_onto_the_target(tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libops.so").write_bytes(b"")
    spec = _spec(tmp_path, """
        deployed:
          providers: [CPUExecutionProvider]
          session_options:
            graph_optimization_level: disable_all
            execution_mode: parallel
            inter_op_num_threads: 2
            enable_mem_pattern: false
            config_entries: {session.set_denormal_as_zero: true, session.intra_op.allow_spinning: 0}
          custom_op_libraries: [lib/libops.so]
        """)
    target = spec.targets["deployed"]
    assert target.session_options == {"graph_optimization_level": "disable_all",
                                      "execution_mode": "parallel", "inter_op_num_threads": 2,
                                      "enable_mem_pattern": False}
    assert target.config_entries == {"session.set_denormal_as_zero": "1",
                                     "session.intra_op.allow_spinning": "0"}
    assert target.custom_op_libraries == ((tmp_path / "lib" / "libops.so").resolve(),)
    assert target.sets_session and not spec.targets["cpu"].sets_session


def test_session_problems_are_located_at_their_keys(tmp_path: Path) -> None:
    assert _problems(tmp_path, """
        t:
          providers: [CPUExecutionProvider]
          session_options:
            graph_optimisation_level: disable_all
            execution_mode: paralel
            enable_profiling: true
            intra_op_num_threads: -1
            config_entries: {session.disable_cpu_ep_fallback: 1}
          custom_op_libraries: [missing/libops.so]
        """) == [
        (6, 7, "unknown key 'graph_optimisation_level' in session_options of target 't'; did "
               "you mean 'graph_optimization_level'?"),
        (7, 23, "target 't': session_options.execution_mode: expected one of 'sequential', "
                "'parallel', got 'paralel'; did you mean 'parallel'?"),
        (8, 7, "'enable_profiling' in session_options of target 't' is not a target's to set: "
               "onnx-parity profiles a GPU target's first run to see where each node ran"),
        (9, 29, "target 't': session_options.intra_op_num_threads: expected an integer >= 0, "
                "got -1"),
        (10, 24, "target 't': session_options.config_entries: "
                 "'session.disable_cpu_ep_fallback' is not a target's to set: write the "
                 "target's disable_cpu_ep_fallback: true, which the spec checks against its "
                 "providers"),
        (11, 27, f"target 't': custom op library not found: {tmp_path / 'missing/libops.so'}"),
    ]


def test_config_entries_within_onnx_runtimes_limits(tmp_path: Path) -> None:
    long_key, long_value = "k" * 129, "v" * 1025
    assert _problems(tmp_path, f"""
        t:
          providers: [CPUExecutionProvider]
          session_options:
            config_entries: {{{long_key}: 1, session.x: {long_value}}}
        """) == [
        (6, 24, "target 't': session_options.config_entries: a config entry's key must be 1 "
                "to 128 characters long"),
        (6, 169, "target 't': session_options.config_entries.session.x: a config entry's value "
                 "must be at most 1024 characters long"),
    ]


def test_every_session_option_is_a_settable_sessionoptions_attribute() -> None:
    options = ort.SessionOptions()
    for name, kind in SESSION_OPTIONS.items():
        assert hasattr(options, name), name
        value = getattr(options, name)
        if kind is bool:
            assert isinstance(value, bool), name
        elif kind is int:
            assert isinstance(value, int) and not isinstance(value, bool), name
        else:
            assert type(value).__name__ in ("GraphOptimizationLevel", "ExecutionMode",
                                            "ExecutionOrder"), name
    for name in RESERVED_SESSION_OPTIONS:
        assert hasattr(options, name), name


def test_a_variant_with_other_session_options_is_one_call() -> None:
    """What a re-run with graph optimizations off needs (the cause ladder): the same target,
    one setting changed, under a name of its own."""
    cuda = PREDEFINED_TARGETS["cuda"]
    plain = cuda.with_session_options(graph_optimization_level="disable_all")
    assert plain.name == "cuda (graph_optimization_level=disable_all)"
    assert plain.session_options == {"graph_optimization_level": "disable_all"}
    assert plain.providers == cuda.providers and plain.fallback == cuda.fallback
    named = plain.with_session_options("again", config_entries={"session.x": 1})
    assert named.name == "again" and named.config_entries == {"session.x": "1"}
    assert named.session_options == plain.session_options
    with pytest.raises(ValueError, match="takes one of disable_all"):
        cuda.with_session_options(graph_optimization_level="none")
    with pytest.raises(ValueError, match="not a target's to set"):
        cuda.with_session_options(enable_profiling=True)
    assert "is not a session option" in session_option_problem("graph_optimisation_level", 1)


def test_the_predefined_tensorrt_target_and_its_keys(tmp_path: Path) -> None:
    tensorrt = PREDEFINED_TARGETS["tensorrt"]
    assert tensorrt.providers == (TRT, "CUDAExecutionProvider", "CPUExecutionProvider")
    assert tensorrt.fallback == "fail"
    spec = _spec(tmp_path, """
        trt-fp16:
          providers: [TensorrtExecutionProvider, CUDAExecutionProvider, CPUExecutionProvider]
          provider_options:
            TensorrtExecutionProvider:
              trt_fp16_enable: true
              trt_builder_optimization_level: 3
              trt_engine_cache_enable: true
              trt_engine_cache_path: caches/engines
          allow_cuda_ops: [NonZero]
        """)
    target = spec.targets["trt-fp16"]
    assert target.allow_cuda_ops == ("NonZero",)
    assert target.provider_options[TRT] == {
        "trt_fp16_enable": True, "trt_builder_optimization_level": 3,
        "trt_engine_cache_enable": True,
        "trt_engine_cache_path": str(tmp_path / "caches" / "engines")}
    assert _problems(tmp_path, """
        c:
          providers: [CUDAExecutionProvider, CPUExecutionProvider]
          allow_cuda_ops: [NonZero]
        """) == [(5, 5, "target 'c': 'allow_cuda_ops' applies only to targets whose first "
                        "provider is TensorrtExecutionProvider (or NvTensorRTRTXExecutionProvider)"
                        " with CUDAExecutionProvider after it, where CUDA runs the nodes TensorRT "
                        "does not take")]


def test_tensorrt_caches_go_to_the_work_folder_unless_the_spec_says(tmp_path: Path) -> None:
    on = {"trt_engine_cache_enable": "1", "trt_timing_cache_enable": True}
    target = TargetSpec("t", (TRT, "CUDAExecutionProvider"), {TRT: on})
    ((name, options), cuda) = provider_list(target, tmp_path)
    assert name == TRT and cuda == "CUDAExecutionProvider"
    assert options["trt_engine_cache_path"] == str(tmp_path / TENSORRT_CACHE_FOLDER)
    assert options["trt_timing_cache_path"] == str(tmp_path / TENSORRT_CACHE_FOLDER)
    own = TargetSpec("t", (TRT,), {TRT: {**on, "trt_engine_cache_path": "/cache"}})
    assert provider_list(own, tmp_path)[0][1]["trt_engine_cache_path"] == "/cache"
    off = TargetSpec("t", (TRT,), {TRT: {"trt_engine_cache_enable": "0"}})
    assert provider_list(off, tmp_path) == [(TRT, {"trt_engine_cache_enable": "0"})]
    no_folder = provider_list(target, None)[0][1]["trt_engine_cache_path"]
    assert no_folder == str(Path(tempfile.gettempdir()) / f"onnx-parity-{os.getuid()}"
                            / TENSORRT_CACHE_FOLDER)


# -- the session -----------------------------------------------------------------------------

def _profiled_ops(model: bytes, target: TargetSpec, folder: Path) -> set[str]:
    session, _ = create_session(model, target, threads=1, profile_to=str(folder / "profile"))
    session.run(None, {"x": np.ones(2, np.float32)})
    events = json.loads(Path(session.end_profiling()).read_text())
    return {e["args"]["op_name"] for e in events
            if e.get("cat") == "Node" and "op_name" in e.get("args", {})}


def test_graph_optimizations_off_really_runs_the_graph_as_written(tmp_path: Path) -> None:
    plain = TargetSpec("cpu", CPU)
    assert _profiled_ops(IDENTITY_ADD, plain, tmp_path) == {"Add"}
    written = plain.with_session_options(graph_optimization_level="disable_all")
    assert _profiled_ops(IDENTITY_ADD, written, tmp_path) == {"Identity", "Add"}
    session, facts = create_session(IDENTITY_ADD, written, threads=1)
    assert session.get_session_options().graph_optimization_level == \
        ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    assert facts.session == {"graph_optimization_level": "disable_all",
                             "intra_op_num_threads": 1}


def test_config_entries_and_options_are_applied_and_read_back() -> None:
    target = TargetSpec("t", CPU).with_session_options(
        execution_order="priority_based", use_deterministic_compute=True,
        config_entries={"session.intra_op.allow_spinning": "0"})
    session, facts = create_session(IDENTITY_ADD, target, threads=1)
    made = session.get_session_options()
    assert made.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert made.execution_order == ort.ExecutionOrder.PRIORITY_BASED
    assert facts.session == {"execution_order": "priority_based",
                             "use_deterministic_compute": True, "intra_op_num_threads": 1,
                             "config_entries": {"session.intra_op.allow_spinning": "0"}}
    recorded = numerics(facts, ())
    assert recorded is not None and recorded.as_record().session_options == facts.session
    plain = create_session(IDENTITY_ADD, TargetSpec("cpu", CPU), threads=1)[1]
    assert plain.session == {} and numerics(plain, ()) is None


def test_a_targets_own_thread_count_wins_and_is_said() -> None:
    own = TargetSpec("t", CPU).with_session_options("four", intra_op_num_threads=4)
    session, facts = create_session(IDENTITY_ADD, own, threads=1)
    assert session.get_session_options().intra_op_num_threads == 4
    assert facts.notes == ("target 'four' sets intra_op_num_threads: 4, which wins over "
                           "onnx-parity's 1 per worker: its numbers may depend on the thread "
                           "count, and its sessions share the cores with the other workers",)
    session, facts = create_session(IDENTITY_ADD, TargetSpec("cpu", CPU), threads=1)
    assert session.get_session_options().intra_op_num_threads == 1 and facts.notes == ()


def test_denormals_as_zero_stay_with_the_session_that_asks(tmp_path: Path) -> None:
    """ONNX Runtime sets flush-to-zero on the thread that makes the process's first session, for
    good: the reference and the comparison would compute without denormals too. A worker's
    first session is the one that learns what it does (backends/floatenv.py); this process's
    first may have been any other test's, so the check runs in a fresh one, as a worker is."""
    model = tmp_path / "identity_add.onnx"
    model.write_bytes(IDENTITY_ADD)
    script = textwrap.dedent(f"""\
        import numpy as np
        from onnx_parity.backends.floatenv import FloatEnvironmentSession
        from onnx_parity.backends.session import create_session
        from onnx_parity.spec import TargetSpec
        CPU = ("CPUExecutionProvider",)
        tiny = np.array([1e-40, 1.0], np.float32)
        daz = TargetSpec("daz", CPU).with_session_options(
            config_entries={{"session.set_denormal_as_zero": "1"}})
        for target in (daz, TargetSpec("cpu", CPU), daz):  # in any order, as a worker's
            session, _ = create_session({str(model)!r}, target, threads=1)
            flushed = session.run(None, {{"x": tiny}})[0][0]
            assert flushed == (0.0 if target is daz else np.float32(1e-40)), target.name
            assert isinstance(session, FloatEnvironmentSession) == (target is daz)
            assert (tiny * np.float32(1))[0] != 0  # the process keeps its denormals
        """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr


def test_an_unloadable_custom_op_library_is_the_cases_error(tmp_path: Path) -> None:
    library = tmp_path / "libnot_a_library.so"
    library.write_text("not a shared library\n" * 10)
    target = TargetSpec("ops", CPU, custom_op_libraries=(library,))
    with pytest.raises(RunError) as caught:
        create_session(IDENTITY_ADD, target, threads=1)
    message = str(caught.value)
    assert message.startswith(f"target 'ops': custom op library {library} could not be loaded: ")
    assert "invalid ELF header" in message and "[ONNXRuntimeError]" not in message


INVERSE = _model([helper.make_node("Inverse", ["x"], ["y"], domain="ai.onnx.contrib")],
                 [_float("x", [3, 3])], [_float("y", [3, 3])], domains=(("ai.onnx.contrib", 1),))


def test_a_custom_op_library_registers_its_ops() -> None:
    """onnxruntime-extensions ([dev]) is a real custom op library: its Inverse op runs only
    with it registered."""
    extensions = pytest.importorskip("onnxruntime_extensions")
    library = Path(extensions.get_library_path())
    with pytest.raises(RunError, match="Inverse"):
        create_session(INVERSE, TargetSpec("cpu", CPU), threads=1)
    target = TargetSpec("ops", CPU, custom_op_libraries=(library,))
    session, facts = create_session(INVERSE, target, threads=1)
    x = np.eye(3, dtype=np.float32) * 2
    np.testing.assert_allclose(session.run(None, {"x": x})[0], np.eye(3) / 2, rtol=1e-6)
    assert facts.session["custom_op_libraries"] == [str(library)]


# -- a run -----------------------------------------------------------------------------------

def _shipped(folder: Path, expected_shift: float) -> None:
    (folder / "m.onnx").write_bytes(IDENTITY_ADD)
    x = np.arange(2, dtype=np.float32)
    np.savez(folder / "data.npz", x=x, y=x + np.float32(expected_shift))


RUN_SPEC = """\
    version: 1
    targets:
      deployed:
        providers: [CPUExecutionProvider]
        session_options:
          graph_optimization_level: disable_all
          intra_op_num_threads: 2
          config_entries: {session.intra_op.allow_spinning: 0}
    datasets:
      recorded: {kind: npz, path: data.npz}
    models:
      - name: m
        onnx: m.onnx
        targets: [deployed]
        datasets: [recorded]
"""


def test_a_run_records_the_session_and_a_bundle_makes_it_again(
        tmp_path: Path, run_cli: Callable[..., Any]) -> None:
    _shipped(tmp_path, expected_shift=0.5)  # every case fails: the recorded outputs are off
    spec = tmp_path / "parity.yaml"
    spec.write_text(textwrap.dedent(RUN_SPEC))
    code, _, _, report = run_cli(spec, "--artifacts", str(tmp_path / "artifacts"))
    assert code == 1, [(c["id"], c["status"], c["message"]) for c in report["cases"]]
    (case,) = report["cases"]
    assert case["status"] == "failed", case["message"]
    assert case["details"]["numerics"]["session_options"] == {
        "graph_optimization_level": "disable_all", "intra_op_num_threads": 2,
        "config_entries": {"session.intra_op.allow_spinning": "0"}}
    assert any("sets intra_op_num_threads: 2, which wins" in note for note in case["notes"])
    bundle = Path(case["details"]["bundle"]["path"])
    written = yaml.safe_load((bundle / "parity.yaml").read_text())
    assert written["targets"]["deployed"]["session_options"] == {
        "graph_optimization_level": "disable_all", "intra_op_num_threads": 2,
        "config_entries": {"session.intra_op.allow_spinning": "0"}}
    again = load_spec(bundle / "parity.yaml").targets["deployed"]
    assert again.session_options == {"graph_optimization_level": "disable_all",
                                     "intra_op_num_threads": 2}
    assert again.config_entries == {"session.intra_op.allow_spinning": "0"}


def test_feeds_checked_once_by_name_and_dtype_still_fail_on_a_wrong_size(
        tmp_path: Path) -> None:
    from onnx_parity.backends.target import OrtTarget

    path = tmp_path / "m.onnx"
    path.write_bytes(_model([helper.make_node("Concat", ["x", "past"], ["y"], axis=1)],
                            [_float("x", [1, 1, 4]), helper.make_tensor_value_info(
                                "past", TensorProto.FLOAT, [1, "t", 4])],
                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "u", 4])]))
    target = OrtTarget(path, PREDEFINED_TARGETS["cpu"])
    x = np.ones((1, 1, 4), np.float32)
    for t in (1, 2, 3):  # a growing state, as a rollout feeds it: checked once, then passed
        (y,) = target.run({"x": x, "past": np.zeros((1, t, 4), np.float32)})
        assert y.shape == (1, t + 1, 4)
    bad = [({"x": np.ones((1, 2, 4), np.float32), "past": x},
            "model expects size 1 on axis 1 on input 'x', data has 2"),
           ({"x": x, "past": np.zeros((1, 2), np.float32)},
            "input 'past': model expects rank 3 [1, t, 4], data has shape (1, 2)"),
           ({"x": x.astype(np.float64), "past": x}, "model declares float32, data has float64"),
           ({"x": x}, "missing past")]
    for feeds, said in bad:
        with pytest.raises(RunError, match=re.escape(said)):
            target.run(feeds)
