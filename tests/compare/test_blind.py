"""Tests for compare/blind.py: an output whose reference is all zero, or the same for samples
whose inputs differ, checks nothing before it, so it is not a pass (a zero-initialised head
once hid a fault planted in the layers before it)."""

from __future__ import annotations

import textwrap
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from onnx_parity.compare.blind import Watch, blindness, distinct_inputs

FACTORIES = '''
import torch


class Net(torch.nn.Module):
    def __init__(self, head_bias=0.0):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU())
        self.head = torch.nn.Linear(16, 4)
        torch.nn.init.zeros_(self.head.weight)  # a zero-initialised head, as torchvision's ViT
        torch.nn.init.constant_(self.head.bias, head_bias)

    def forward(self, x):
        return self.head(self.body(x))


def zero_head():
    return Net()


def constant_head():
    return Net(head_bias=0.5)
'''


def _spec(folder: Path, extra: str = "", factory: str = "zero_head") -> Path:
    (folder / "nets.py").write_text(FACTORIES)
    path = folder / "parity.yaml"
    path.write_text(textwrap.dedent(f"""\
        version: 1
        models:
          - name: net
            torch: nets.py:{factory}
            inputs: {{x: [batch, 8]}}
            outputs: [y]
            {extra}
        """))
    return path


def test_a_zero_initialised_head_is_not_a_pass_and_says_what_to_do(
        tmp_path: Path, run_cli: Callable[..., Any]) -> None:
    code, out, _, report = run_cli(_spec(tmp_path))
    assert code == 1
    for case in report["cases"]:
        assert case["status"] == "error" and case["stage"] == "compare"
        (output,) = case["outputs"]
        assert output["kind"] == "zero" and not output["passed"]
        assert case["message"] == (
            "y: the reference output is all zero for every sample: nothing before it is checked"
            " (a zero-initialised layer hides the whole model before it); give the model"
            " weights, or list the output under `constant_outputs` if it is constant by design")
    assert "is all zero for every sample" in out


def test_a_fault_planted_before_a_zero_head_no_longer_passes(
        tmp_path: Path, run_cli: Callable[..., Any]) -> None:
    """The export's first layer scaled by 1.5 changes nothing a zero head lets through: the
    case must not read as a pass."""
    import onnx
    import torch
    from onnx import numpy_helper

    spec = _spec(tmp_path, extra="onnx: shipped.onnx")
    import importlib.util

    found = importlib.util.spec_from_file_location("nets", tmp_path / "nets.py")
    assert found is not None and found.loader is not None
    nets = importlib.util.module_from_spec(found)
    found.loader.exec_module(nets)
    torch.manual_seed(0)  # as the tool seeds every factory call
    module = nets.zero_head().eval()
    with warnings.catch_warnings():  # the legacy exporter's notice: chosen on purpose
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(module, (torch.randn(2, 8),), str(tmp_path / "shipped.onnx"),
                          input_names=["x"], output_names=["y"], dynamo=False,
                          dynamic_axes={"x": {0: "batch"}})
    model = onnx.load(str(tmp_path / "shipped.onnx"))
    first = next(i for i in model.graph.initializer if i.name == "body.0.weight")
    first.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(first) * 1.5, first.name))
    onnx.save(model, str(tmp_path / "shipped.onnx"))
    code, _, _, report = run_cli(spec)
    assert code == 1
    assert {case["status"] for case in report["cases"]} == {"error"}


def test_an_output_the_same_for_differing_inputs_is_not_a_pass(
        tmp_path: Path, run_cli: Callable[..., Any]) -> None:
    code, _, _, report = run_cli(_spec(tmp_path, factory="constant_head"))
    assert code == 1
    (case,) = report["cases"]
    assert case["outputs"][0]["kind"] == "constant"
    assert "is the same for all 2 samples, whose inputs differ" in case["message"]


def test_an_output_constant_by_design_is_named_and_passes(
        tmp_path: Path, run_cli: Callable[..., Any]) -> None:
    code, out, _, report = run_cli(_spec(tmp_path, extra="constant_outputs: [y]"))
    assert code == 0, out
    assert [case["status"] for case in report["cases"]] == ["passed"]


def test_a_misspelt_constant_output_is_a_spec_error(tmp_path: Path,
                                                    run_cli: Callable[..., Any]) -> None:
    code, _, err, _ = run_cli(_spec(tmp_path, extra="constant_outputs: [why]"))
    assert code == 2
    assert "constant_outputs names 'why', which is not among its outputs (y)" in err


@pytest.mark.parametrize(("expected", "watch", "found"), [
    # recorded data of one sample: zero may be the op's right answer (a reduction over an
    # empty set in the ONNX node suite), so it stays checkable
    ([np.zeros(3, np.float32)], Watch(), None),
    ([np.zeros(3, np.float32)], Watch(from_model=True), "zero"),
    ([np.zeros(3, np.float32)] * 2, Watch(distinct=True), "zero"),
    ([np.ones(3, np.float32)] * 2, Watch(distinct=True), "constant"),
    ([np.ones(3, np.float32)] * 2, Watch(), None),  # the same inputs: nothing to tell
    ([np.ones(3, np.float32), np.full(3, 2, np.float32)], Watch(distinct=True), None),
    ([np.zeros(3, np.int64)] * 2, Watch(distinct=True), None),  # integers: shapes, indices
    ([np.zeros(3, np.float32)] * 2, Watch(distinct=True, constant=frozenset({"y"})), None),
])
def test_blindness_needs_evidence(expected: list[Any], watch: Watch, found: str | None) -> None:
    assert blindness("y", expected, watch) == found


def test_inputs_are_distinct_only_when_every_sample_differs() -> None:
    a, b = {"x": np.zeros(2)}, {"x": np.ones(2)}
    assert distinct_inputs([a, b]) and not distinct_inputs([a]) and not distinct_inputs([a, a])
