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


def small_model(folder: Path, scale: float = 1.0) -> Path:
    """m.onnx: y = tanh(x @ w) through MatMul 'mm' and Tanh 'act', then Mul 'out' by 2;
    data.npz: two samples' worth of x and its y. `scale` edits w (a planted difference)."""
    import onnx
    from onnx import TensorProto, helper

    weights = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3) * np.float32(scale)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
         helper.make_node("Tanh", ["h"], ["t"], name="act"),
         helper.make_node("Mul", ["t", "two"], ["y"], name="out")], "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor("w", TensorProto.FLOAT, [4, 3], weights.ravel().tolist()),
         helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path = folder / ("m.onnx" if scale == 1.0 else "edited.onnx")
    onnx.save(model, str(path))
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    np.savez(folder / "data.npz", x=x, y=2 * np.tanh(x @ weights))
    return path


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
        datasets:
          rec: {{kind: npz, path: data.npz}}
        models:
          - name: m
            onnx: m.onnx
            datasets: [rec]
            targets: [openvino, ov-bf16]
        """))
    code, out, _, report = run_cli(spec, "--allow-outside-repo")
    cases = by_id(report)
    assert code == 1, out
    ran = cases["m[onnx-openvino-rec]"]
    assert ran["status"] == "passed", ran
    providers = ran["details"]["providers"]
    assert providers["runtime"]["package"] == "onnxruntime-openvino"
    assert providers["runtime"]["onnxruntime"] == "1.24.1"
    assert providers["active"][0] == "OpenVINOExecutionProvider"
    assert list(providers["nodes"]) == ["OpenVINOExecutionProvider"]  # every node there
    assert any("onnxruntime-openvino 1.24.1" in note for note in ran["notes"])
    # BF16 is refused on this CPU and ONNX Runtime goes on on its CPU provider, saying so only
    # in its log: the same model, right numbers, and still no pass.
    fell = cases["m[onnx-ov-bf16-rec]"]
    assert fell["status"] == "error"
    assert "runs on CPUExecutionProvider" in fell["message"]
    assert "Unsupported inference precision" in fell["message"]
    assert fell["details"]["providers"]["nodes"] == {"CPUExecutionProvider": {
        "MatMul": 1, "Mul": 1, "Tanh": 1}}


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
