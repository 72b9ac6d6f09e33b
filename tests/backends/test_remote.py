"""`python:` targets: a model on the OpenVINO build in its own interpreter, what ran recorded,
a silent fall-back that is no pass, and an interpreter without onnxruntime said as such."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from helpers import by_id
from onnx_parity.errors import RunError
from onnx_parity.spec import TargetSpec

SCALE, EDITED = np.float32(1.3579), np.float32(1.75)  # Mul 'out''s constant, and as planted


def small_model(folder: Path) -> Path:
    """m.onnx: y = tanh(x @ w) * SCALE through MatMul 'mm', Tanh 'act' and Mul 'out';
    data.npz: a batch of x and its y."""
    import onnx
    from onnx import TensorProto, helper

    weights = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
         helper.make_node("Tanh", ["h"], ["t"], name="act"),
         helper.make_node("Mul", ["t", "scale"], ["y"], name="out")], "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor("w", TensorProto.FLOAT, [4, 3], weights.ravel().tolist()),
         helper.make_tensor("scale", TensorProto.FLOAT, [], [float(SCALE)])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path = folder / "m.onnx"
    onnx.save(model, str(path))
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    np.savez(folder / "data.npz", x=x, y=SCALE * np.tanh(x @ weights))
    return path


def edited_runtime(folder: Path, python: Path) -> Path:
    """An interpreter that runs `python`'s onnxruntime on a model edited as it loads: Mul
    'out''s constant SCALE becomes EDITED (its 4 bytes, the only such in the file) in every
    session it makes: a runtime that computes one node differently, planted."""
    site = folder / "edit-site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(textwrap.dedent(f"""\
        import onnxruntime

        _made = onnxruntime.InferenceSession.__init__

        def _edited(self, model, *args, **kwargs):
            data = open(model, "rb").read() if isinstance(model, str) else model
            data = data.replace({SCALE.tobytes()!r}, {EDITED.tobytes()!r})
            _made(self, data, *args, **kwargs)

        onnxruntime.InferenceSession.__init__ = _edited
        """))
    wrapper = folder / "edited-python"
    # The runner is started isolated (-I), which ignores PYTHONPATH: dropped here.
    wrapper.write_text(f'#!/bin/sh\n[ "$1" = -I ] && shift\n'
                       f'PYTHONPATH={site} exec {python} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def test_openvino_passes_and_names_itself_and_a_silent_fall_back_is_no_pass(
        tmp_path: Path, openvino_python: Path, run_cli: Callable[..., Any]) -> None:
    small_model(tmp_path)
    spec = tmp_path / "parity.yaml"
    spec.write_text(textwrap.dedent(f"""\
        version: 1
        targets:
          openvino:
            python: {openvino_python}
            providers: [OpenVINOExecutionProvider]
            provider_options: {{OpenVINOExecutionProvider: {{device_type: CPU}}}}
          ov-bf16:
            python: {openvino_python}
            providers: [OpenVINOExecutionProvider, CPUExecutionProvider]
            provider_options: {{OpenVINOExecutionProvider: {{device_type: CPU, precision: BF16}}}}
          ov-hint:
            python: {openvino_python}
            providers: [OpenVINOExecutionProvider]
            provider_options:
              OpenVINOExecutionProvider:
                device_type: CPU
                load_config: {{CPU: {{INFERENCE_PRECISION_HINT: bf16}}}}
        datasets:
          rec: {{kind: npz, path: data.npz}}
          shifted: {{kind: npz, path: off.npz}}
        models:
          - name: m
            onnx: m.onnx
            datasets: [rec]
            targets: [openvino, ov-bf16]
          - name: drifted
            onnx: m.onnx
            datasets: [shifted]
            targets: [ov-hint]
        """))
    with np.load(tmp_path / "data.npz") as data:  # outputs 1% off: a drift to explain
        np.savez(tmp_path / "off.npz", x=data["x"], y=data["y"] * np.float32(1.01))
    code, out, _, report = run_cli(spec, "--allow-outside-repo")
    cases = by_id(report)
    assert code == 1, out
    ran = cases["m[onnx-openvino-rec]"]
    assert ran["status"] == "passed", ran["message"]
    providers = ran["details"]["providers"]
    assert providers["runtime"]["package"] == "onnxruntime-openvino"
    assert providers["runtime"]["onnxruntime"] == "1.24.1"
    assert providers["active"][0] == "OpenVINOExecutionProvider"
    # Every node there, by its own op type: ONNX Runtime 1.24's own report of what each provider
    # took, where the profile has one fused OpenVINO-EP-subgraph node.
    assert providers["nodes"] == {"OpenVINOExecutionProvider": {"MatMul": 1, "Mul": 1, "Tanh": 1}}
    assert any("onnxruntime-openvino 1.24.1" in note for note in ran["notes"])
    from onnx_parity.report.jsonfile import read_json

    read = {c.id: c for c in read_json(tmp_path / "report.json").cases}  # kept when read back
    runtime = read["m[onnx-openvino-rec]"].details.providers
    assert runtime is not None and runtime.runtime == providers["runtime"]
    assert "OpenVINOExecutionProvider's precision is FP32, by the OpenVINO provider's default " \
           "on CPU" in ran["notes"]
    # BF16 is refused on this CPU and ONNX Runtime goes on on its CPU provider, saying so only
    # in its log: the same model, right numbers, and still no pass.
    fell = cases["m[onnx-ov-bf16-rec]"]
    assert fell["status"] == "error"
    assert "runs on CPUExecutionProvider" in fell["message"]
    assert "Unsupported inference precision" in fell["message"]
    assert fell["details"]["providers"]["nodes"] == {"CPUExecutionProvider": {
        "MatMul": 1, "Mul": 1, "Tanh": 1}}
    # A bf16 hint is a setting, not a fact: this CPU has no bfloat16 and OpenVINO computes in
    # float32. The re-run in full precision says so instead of naming it the cause.
    hinted = cases["drifted[onnx-ov-hint-shifted]"]
    assert hinted["status"] == "failed"
    assert any(n.startswith("OpenVINOExecutionProvider's precision is BF16, by load_config's "
                            "INFERENCE_PRECISION_HINT") for n in hinted["notes"])
    assert "cause" not in hinted["details"]
    (ruled,) = [c for c in hinted["details"]["causes_ruled_out"] if c["kind"] == "precision"]
    assert ruled["setting"] == "precision=ACCURACY" and not ruled["proven"]


def test_an_interpreter_without_onnxruntime_is_a_clear_error(tmp_path: Path) -> None:
    from onnx_parity.backends.remote import RemoteTarget

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")],
                   check=True)
    python = tmp_path / "bare" / "bin" / "python"
    target = TargetSpec(name="bare", providers=("CPUExecutionProvider",), python=python)
    with pytest.raises(RunError, match=r"target 'bare': its python: .*bare/bin/python has no "
                       r"usable onnxruntime \(ModuleNotFoundError"):
        RemoteTarget(small_model(tmp_path), target)
    gone = TargetSpec(name="gone", providers=("CPUExecutionProvider",),
                      python=tmp_path / "missing" / "python")
    with pytest.raises(RunError, match=r"target 'gone': its python: .* cannot be run"):
        RemoteTarget(small_model(tmp_path), gone)


def test_an_older_onnxruntime_as_the_reference_passes_and_localizes_a_planted_difference(
        tmp_path: Path, older_python: Path, run_cli: Callable[..., Any]) -> None:
    small_model(tmp_path)
    spec = tmp_path / "parity.yaml"
    spec.write_text(textwrap.dedent(f"""\
        version: 1
        targets:
          older: {{python: {older_python}, providers: [CPUExecutionProvider]}}
          edited: {{python: {edited_runtime(tmp_path, older_python)},
                    providers: [CPUExecutionProvider]}}
        datasets:
          few: {{kind: random, samples: 2, batch_sizes: [2]}}
        models:
          - name: m
            onnx: m.onnx
            reference: older
            datasets: [few]
            targets: [cpu, edited, older]
        """))
    code, out, _, report = run_cli(spec, "--allow-outside-repo", "--artifacts",
                                   str(tmp_path / "artifacts"))
    cases = by_id(report)
    assert code == 1, out
    assert sorted(cases) == ["m[onnx-cpu-few-b2]", "m[onnx-edited-few-b2]"]  # none on older
    # The upgrade: this process's onnxruntime against 1.23.2, on a clean model.
    clean = cases["m[onnx-cpu-few-b2]"]
    assert clean["status"] == "passed", clean["message"]
    assert any("compared against target 'older'" in note for note in clean["notes"])
    planted = cases["m[onnx-edited-few-b2]"]
    assert planted["status"] == "failed", planted
    drift = planted["details"]["divergence"]
    assert (drift["verdict"], drift["node"], drift["op_type"]) == ("origin", "out", "Mul"), drift
    assert [step["node"] for step in drift["path"]] == ["act", "out"]  # mm and act agree
    assert "target 'older' (onnxruntime 1.23.2; this target: onnxruntime 1.23.2)" in (
        drift["summary"])
    # Its repro bundle runs the same build: the target keeps its interpreter.
    bundle = Path(planted["details"]["bundle"]["path"])
    assert f"python: {tmp_path / 'edited-python'}" in (bundle / "parity.yaml").read_text()
