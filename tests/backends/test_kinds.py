"""The kinds of target behind one protocol: the factory picks a target's kind, and each kind
makes its sessions, names its runtime, runs a graph with every output kept, says its precision
and writes its repro bundle's entry; nothing outside the home asks which kind a target is."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnxruntime as ort
from test_remote import small_model

from helpers import ROOT
from onnx_parity.backends.kinds import (
    REFERENCE,
    InProcess,
    OtherInterpreter,
    TargetKind,
    make_target,
    runs_as_reference,
    target_kind,
)
from onnx_parity.backends.precision import RuntimePrecision
from onnx_parity.backends.remote import RemoteTarget
from onnx_parity.backends.target import OrtTarget
from onnx_parity.spec import PREDEFINED_TARGETS, TargetSpec

OPENVINO = "OpenVINOExecutionProvider"


def _precision(precision: str | None) -> RuntimePrecision:
    return RuntimePrecision(OPENVINO, precision, "by the OpenVINO provider's default on CPU",
                            {"precision": "ACCURACY"})


def test_the_factory_picks_each_targets_kind(tmp_path: Path) -> None:
    python = tmp_path / "python"
    other = TargetSpec(name="ov", providers=(OPENVINO,), python=python)
    kinds: dict[str, TargetKind] = {name: target_kind(spec) for name, spec in {
        "cpu": PREDEFINED_TARGETS["cpu"], "tensorrt": PREDEFINED_TARGETS["tensorrt"],
        "reference": REFERENCE, "ov": other}.items()}
    assert kinds == {"cpu": InProcess(PREDEFINED_TARGETS["cpu"]),
                     "tensorrt": InProcess(PREDEFINED_TARGETS["tensorrt"]),
                     "reference": InProcess(REFERENCE), "ov": OtherInterpreter(other, python)}
    assert all(kind.spec.name == name for name, kind in kinds.items())
    assert REFERENCE.providers == ("CPUExecutionProvider",)
    assert runs_as_reference(("CPUExecutionProvider",))
    assert not runs_as_reference(("CUDAExecutionProvider", "CPUExecutionProvider"))
    assert not runs_as_reference(())


def test_in_process_sessions_and_graph_runs(tmp_path: Path) -> None:
    path = small_model(tmp_path)
    x = np.load(tmp_path / "data.npz")["x"]
    kind = target_kind(PREDEFINED_TARGETS["cpu"])
    session = kind.open(path, 1)
    assert type(session) is OrtTarget and session.facts.active == ("CPUExecutionProvider",)
    assert type(make_target(path, PREDEFINED_TARGETS["cpu"], 1)) is OrtTarget
    assert kind.runtime() == f"onnxruntime {ort.__version__}"
    outputs, active = kind.run_graph(path.read_bytes(), tmp_path, {"x": x}, 1)
    assert active == ("CPUExecutionProvider",)
    np.testing.assert_allclose(outputs["y"], session.run({"x": x})[0], rtol=0, atol=0)


def test_another_interpreter_sessions_and_graph_runs(tmp_path: Path, older_python: Path) -> None:
    path = small_model(tmp_path)
    data = np.load(tmp_path / "data.npz")
    target = TargetSpec(name="older", providers=("CPUExecutionProvider",), python=older_python)
    kind = target_kind(target)
    session = kind.open(path, 1)
    try:
        assert type(session) is RemoteTarget
        assert session.facts.runtime["onnxruntime"] == "1.23.2"
    finally:
        session.close()
    assert kind.runtime() == "onnxruntime 1.23.2"
    outputs, active = kind.run_graph(path.read_bytes(), tmp_path, {"x": data["x"]}, 1)
    assert active == ("CPUExecutionProvider",)
    np.testing.assert_allclose(outputs["y"], data["y"], rtol=1e-6, atol=1e-6)


def test_each_kind_says_its_precision_and_writes_its_bundle_entry(tmp_path: Path) -> None:
    spec = TargetSpec(name="ov", providers=(OPENVINO, "CPUExecutionProvider"),
                      provider_options={OPENVINO: {"device_type": "CPU"}},
                      config_entries={"session.intra_op.allow_spinning": "0"})
    here = target_kind(spec)
    there = target_kind(TargetSpec(name="ov", providers=spec.providers,
                                   provider_options=spec.provider_options,
                                   config_entries=spec.config_entries,
                                   python=tmp_path / "python"))
    full, reduced, unknown = _precision("FP32"), _precision("BF16"), _precision(None)
    assert not full.reduced and reduced.reduced
    # Another build's float32 is said; this process's goes without saying.
    assert here.precision_note(full) is None
    assert here.precision_note(reduced) == reduced.text
    assert here.precision_note(unknown) == unknown.text
    assert there.precision_note(full) == full.text
    entry = {"providers": [OPENVINO, "CPUExecutionProvider"], "fallback": spec.fallback,
             "provider_options": {OPENVINO: {"device_type": "CPU"}},
             "session_options": {"config_entries": {"session.intra_op.allow_spinning": "0"}}}
    assert here.bundle_entry() == entry
    assert there.bundle_entry() == {**entry, "python": str(tmp_path / "python")}
    assert list(there.bundle_entry())[-1] == "python"


def test_no_stage_outside_the_home_asks_which_kind_a_target_is() -> None:
    """The spec reads and checks `python:`; the home alone branches on it."""
    package = ROOT / "src" / "onnx_parity"
    asks = re.compile(r"\.python\b(?! *[:=])")
    home = {"backends/kinds.py", "backends/remote.py"}
    found = [f"{path.relative_to(package)}:{number}"
             for path in sorted(package.rglob("*.py"))
             if path.relative_to(package).as_posix() not in home
             and not path.relative_to(package).as_posix().startswith("spec/")
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if asks.search(line) and "self.python" not in line]
    assert not found, found
