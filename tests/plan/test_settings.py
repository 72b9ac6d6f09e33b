"""A case's tolerances and settings (the texts a report compares with the baseline's): what many
cases share (a target's words, a tolerance) is made once per value, and always of the case's
own values."""

from __future__ import annotations

from pathlib import Path

import pytest

from onnx_parity.plan import cases as planning
from onnx_parity.plan.cases import plan
from onnx_parity.spec import parse_spec
from onnx_parity.spec.tolerance import resolve

SPEC = """\
version: 1
targets:
  loose: {providers: [CPUExecutionProvider], tolerance: {atol: 0.01}}
datasets: {d: {kind: random, samples: 1, batch_sizes: [1]}}
models:
  - {name: a, torch: "models.py:make", inputs: {x: {shape: [batch, 2]}}, datasets: [d],
     targets: [cpu, loose], tolerance: {rtol: %s}}
"""


def _settings(tmp_path: Path, rtol: str) -> dict[str, dict[str, str]]:
    (tmp_path / "models.py").write_text("def make():\n    raise NotImplementedError\n")
    spec = parse_spec(SPEC % rtol, tmp_path / "parity.yaml")
    return {case.target.name: case.settings() for case in plan(spec)}


def test_each_case_says_its_own_target_and_tolerance(tmp_path: Path) -> None:
    first = _settings(tmp_path, "0.002")
    assert first["cpu"]["tolerance"] == "atol 1e-4 + rtol 2e-3·|e|"
    assert first["loose"]["tolerance"] == "atol 1e-2 + rtol 2e-3·|e|"
    assert "CPUExecutionProvider" in first["loose"]["target"]
    # the same words from a new spec whose values are equal; other words where one is not
    assert _settings(tmp_path, "0.002") == first
    assert _settings(tmp_path, "0.005")["cpu"]["tolerance"] == "atol 1e-4 + rtol 5e-3·|e|"


def test_each_case_resolves_its_own_tolerance(tmp_path: Path) -> None:
    (tmp_path / "models.py").write_text("def make():\n    raise NotImplementedError\n")
    for rtol in ("0.002", "0.005"):
        by_target = {case.target.name: case for case in plan(parse_spec(
            SPEC % rtol, tmp_path / "parity.yaml"))}
        for name, atol in (("cpu", 1e-4), ("loose", 1e-2)):
            case = by_target[name]
            assert case.tolerance_for("y") == case.tolerance_for() == resolve(
                case.model.tolerances, name, "y", "fp32")
            assert (case.tolerance_for().atol, case.tolerance_for().rtol) == (atol, float(rtol))


def test_the_memo_of_shared_words_stays_small(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(planning, "MAX_SHARED", 3)
    for rtol in ("0.001", "0.002", "0.003", "0.004"):
        said = _settings(tmp_path, rtol)
        assert said["cpu"]["tolerance"] == f"atol 1e-4 + rtol {rtol[-1]}e-3·|e|"
        assert len(planning._SHARED) <= 3
