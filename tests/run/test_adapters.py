"""The adapters' home: one registration that names the spec's adapters, and the run stage
asking for an ability by its protocol, never by an adapter's name."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np

from onnx_parity.run.adapters import PLAIN, adapter_for, adapters
from onnx_parity.run.adapters.base import OwnExport, Padded, RolloutJudge, TeacherForced
from onnx_parity.run.adapters.plain import Feedback
from onnx_parity.spec.model import ADAPTERS as SPEC_ADAPTERS

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "onnx_parity"


def test_the_registration_names_every_adapter_the_spec_takes() -> None:
    assert sorted(adapters()) == sorted(SPEC_ADAPTERS)
    assert all(isinstance(adapter, OwnExport) for adapter in adapters().values())
    assert not isinstance(PLAIN, OwnExport)


def test_a_model_without_an_adapter_is_the_plain_model(tmp_path: Path) -> None:
    from onnx_parity.spec import parse_spec

    (tmp_path / "m.py").write_text("")
    spec = parse_spec("""version: 1
models:
  - name: plain
    torch: m.py:make
    inputs: {x: [1, 4]}
  - name: lm
    torch: m.py:make
    adapter: causal-lm
    inputs:
      input_ids: {shape: [1, 4], dtype: int64, high: 64}
""", tmp_path / "parity.yaml")
    assert adapter_for(spec.models[0]) is PLAIN
    assert adapter_for(spec.models[1]) is adapters()["causal-lm"]


def test_a_feedback_rollout_has_none_of_the_language_models_abilities() -> None:
    stepper = Feedback(3, {"state_out": "state"})
    assert not isinstance(stepper, TeacherForced | Padded | RolloutJudge)
    following = stepper.next_feed(1, {"x": np.zeros(2), "state": np.zeros(2)},
                                  {"state_out": np.ones(2)})
    assert following["state"].tolist() == [1.0, 1.0] and following["x"].tolist() == [0.0, 0.0]


def test_no_stage_outside_the_home_and_the_spec_names_an_adapter() -> None:
    """An adapter's name as a string, or a stepper's hook looked up by getattr, is found
    nowhere outside run/adapters/ and spec/."""
    names = set(SPEC_ADAPTERS)
    hooks = {"forced_feed", "real_positions", "judge", "judged_outputs", "feedback",
             "check_encoder"}
    found = []
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith(("run/adapters/", "spec/")):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare):
                for side in (node.left, *node.comparators):
                    if isinstance(side, ast.Constant) and side.value in names:
                        found.append(f"{relative}:{node.lineno}")
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                    and node.func.id in {"getattr", "hasattr"} and len(node.args) > 1
                    and isinstance(node.args[1], ast.Constant)
                    and node.args[1].value in hooks):
                found.append(f"{relative}:{node.lineno}")
    assert not found, found
