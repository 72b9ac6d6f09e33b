"""Which tolerance applies to a case: the precedence table of docs/spec.md, layer by layer."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from onnx_parity.errors import SpecError
from onnx_parity.plan.cases import plan
from onnx_parity.results import Tolerance
from onnx_parity.spec import parse_spec
from onnx_parity.spec.tolerance import resolve

LAYERED = """\
version: 1
defaults:
  targets: [cpu, cuda]
  tolerance: {atol: 1.0e-4, rtol: 1.0e-3}
targets:
  cuda:
    providers: [CUDAExecutionProvider, CPUExecutionProvider]
    tolerance:
      atol: 2.0e-3
      outputs: {logits: {rtol: 5.0e-3}}
models:
  - name: plain
    torch: pkg.mod:build
    inputs: {x: {shape: [1, 3]}}
    outputs: [logits, hidden]
  - name: tight
    torch: pkg.mod:build
    inputs: {x: {shape: [1, 3]}}
    outputs: [logits, hidden]
    tolerance:
      atol: 1.0e-5
      outputs: {hidden: {atol: 1.0e-6}}
      targets:
        cuda:
          rtol: 1.0e-2
          outputs: {hidden: {atol: 3.0e-3}}
"""


@pytest.fixture
def spec_models(tmp_path: Path) -> dict[str, object]:
    spec = parse_spec(LAYERED, tmp_path / "parity.yaml")
    return {m.name: m for m in spec.models}


def test_target_tolerance_beats_defaults(spec_models: dict) -> None:  # type: ignore[type-arg]
    rules = spec_models["plain"].tolerances
    assert resolve(rules, "cpu", "logits") == Tolerance(atol=1e-4, rtol=1e-3)
    assert resolve(rules, "cuda", "hidden") == Tolerance(atol=2e-3, rtol=1e-3)
    # the target's per-output key beats the target's own; unset keys come from the target
    assert resolve(rules, "cuda", "logits") == Tolerance(atol=2e-3, rtol=5e-3)


def test_model_beats_target_and_model_on_target_beats_model(
        spec_models: dict) -> None:  # type: ignore[type-arg]
    rules = spec_models["tight"].tolerances
    assert resolve(rules, "cpu", "logits") == Tolerance(atol=1e-5, rtol=1e-3)
    # the model's atol beats the cuda target's; its cuda rtol beats everything below it
    assert resolve(rules, "cuda", "logits") == Tolerance(atol=1e-5, rtol=1e-2)
    # per output: the model-on-target output beats the model's output beats the rest
    assert resolve(rules, "cpu", "hidden") == Tolerance(atol=1e-6, rtol=1e-3)
    assert resolve(rules, "cuda", "hidden") == Tolerance(atol=3e-3, rtol=1e-2)


def test_cases_carry_their_targets_tolerance(tmp_path: Path) -> None:
    spec = parse_spec(LAYERED, tmp_path / "parity.yaml")
    cases = {c.id: c for c in plan(spec)}
    assert cases["plain[opset18-cuda-random-b1]"].tolerance_for("hidden").atol == 2e-3
    assert cases["plain[opset18-cpu-random-b1]"].tolerance_for("hidden").atol == 1e-4
    assert cases["tight[opset18-cuda-random-b1]"].tolerance_for().rtol == 1e-2


def _problems(text: str, tmp_path: Path) -> list[tuple[int, int, str]]:
    with pytest.raises(SpecError) as caught:
        parse_spec(textwrap.dedent(text), tmp_path / "parity.yaml")
    return [(p.line, p.column, p.message) for p in caught.value.problems]


def test_tolerance_for_an_undefined_target_is_located(tmp_path: Path) -> None:
    text = LAYERED.replace("        cuda:\n          rtol", "        cdua:\n          rtol")
    assert _problems(text, tmp_path) == [
        (24, 9, "model 'tight': tolerance for undefined target 'cdua'; did you mean 'cuda'?")]


def test_unknown_keys_and_outputs_in_target_tolerances_are_located(tmp_path: Path) -> None:
    text = LAYERED.replace("      atol: 2.0e-3\n", "      atoll: 2.0e-3\n")
    assert _problems(text, tmp_path) == [
        (9, 7, "unknown key 'atoll' in tolerance of target 'cuda'; did you mean 'atol'?")]
    text = LAYERED.replace("outputs: {hidden: {atol: 3.0e-3}}", "outputs: {hiden: {atol: 3.0e-3}}")
    assert _problems(text, tmp_path) == [
        (26, 21, "model 'tight': tolerance.targets.cuda: tolerance for output 'hiden', which is"
                 " not among its outputs (logits, hidden); did you mean 'hidden'?")]
    text = LAYERED.replace("          rtol: 1.0e-2\n", "          rtol: -1\n")
    assert _problems(text, tmp_path) == [
        (25, 17, "model 'tight': tolerance.targets.cuda.rtol: expected a number >= 0, got -1")]


ULPS = """\
version: 1
defaults:
  targets: [cpu, cuda]
  tolerance: {ulp: 64, precisions: {fp16: {ulp: 8}}}
targets:
  cuda:
    providers: [CUDAExecutionProvider, CPUExecutionProvider]
    tolerance: {ulp: 16, outputs: {logits: {ulp: 12}}}
models:
  - name: m
    torch: pkg.mod:build
    inputs: {x: {shape: [1, 3]}}
    outputs: [logits, hidden]
    tolerance:
      cosine: 0.99
      outputs: {hidden: {ulp: 2}}
      targets: {cuda: {ulp: 4}}
"""


def test_ulp_is_a_tolerance_key_wherever_the_other_metrics_are(tmp_path: Path) -> None:
    (model,) = parse_spec(ULPS, tmp_path / "parity.yaml").models
    rules = model.tolerances
    assert resolve(rules, "cpu", "logits").metrics == {"cosine": 0.99, "ulp": 64}  # defaults
    assert resolve(rules, "cpu", "hidden").metrics == {"cosine": 0.99, "ulp": 2}  # output
    assert resolve(rules, "cuda", "logits").metrics == {"cosine": 0.99, "ulp": 4}  # on target
    assert resolve(rules, "cuda", "hidden").metrics == {"cosine": 0.99, "ulp": 2}
    assert resolve(rules, "cpu", "logits", "fp16").metrics == {"ulp": 8}  # the precision's


@pytest.mark.parametrize("value", ["-1", "1.5", "'4'"])
def test_ulp_takes_a_whole_number_of_ulps(tmp_path: Path, value: str) -> None:
    text = ULPS.replace("ulp: 64", f"ulp: {value}")
    with pytest.raises(SpecError, match="ulp"):
        parse_spec(text, tmp_path / "parity.yaml")
