"""The spec's inputs reach forward() by name when every one is named after a parameter of it
(keyword-only ones too), by position when none is, and a spec that mixes the two is refused
where the module is loaded, naming the input and forward()'s parameters."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn

from fixtures import models
from helpers import by_id
from onnx_parity.backends.pytorch import Binding, bind_inputs, torch_outputs
from onnx_parity.errors import LoadError, RunError
from onnx_parity.prepare.export import export_model
from onnx_parity.spec import InputSpec, ModelSpec


def _model(*names: str) -> ModelSpec:
    return ModelSpec(name="m", line=1, inputs=tuple(InputSpec(n, ("batch", 4)) for n in names))


class _Star(nn.Module):
    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        return tensors[0]


class _HeadAndRest(nn.Module):
    def forward(self, a: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
        return a


def test_inputs_named_after_forward_parameters_bind_by_name_in_its_order() -> None:
    assert bind_inputs(models.make_two_sizes(), _model("wide", "narrow")) == Binding(
        by_name=("narrow", "wide"))
    assert bind_inputs(models.make_keyword_only(), _model("scale", "x")) == Binding(
        by_name=("x", "scale"))


def test_inputs_named_otherwise_bind_by_position_as_before() -> None:
    assert bind_inputs(models.make_linear(), _model("x")) == Binding()  # forward(input)
    assert bind_inputs(models.make_two_sizes(), ModelSpec(name="m", line=1)) == Binding()


def test_where_forward_names_nothing_the_inputs_go_by_position_with_a_note() -> None:
    scripted = torch.jit.script(models.make_linear())
    assert bind_inputs(scripted, _model("input")) == Binding(note=(
        "inputs go to forward() by position, in the spec's order (input): the names of its "
        "parameters cannot be known (a TorchScript module)"))
    assert bind_inputs(_Star(), _model("a", "b")) == Binding(note=(
        "inputs go to forward() by position, in the spec's order (a, b): the names of its "
        "parameters cannot be known (forward(*args))"))
    assert bind_inputs(_HeadAndRest(), _model("a", "b")) == Binding(note=(
        "inputs go to forward() by position, in the spec's order (a, b): 'b' names no parameter"
        " of forward(), which takes *args"))


def test_a_spec_that_mixes_names_and_positions_is_refused_with_the_parameters() -> None:
    with pytest.raises(LoadError) as caught:
        bind_inputs(models.make_two_sizes(), _model("narrow", "wdie"))
    assert caught.value.message == (
        "input 'wdie' of model 'm' names no parameter of forward(), while 'narrow' does: "
        "forward() takes narrow, cache, wide (did you mean 'wide'?); name every input after a "
        "parameter of forward(), to pass them by name, or none of them, to pass them by "
        "position in the spec's order")


def test_by_position_the_reversed_spec_would_not_even_run() -> None:
    """What binding by name fixes: the spec lists forward()'s parameters the other way round."""
    module = models.make_two_sizes().eval()
    sample = {"wide": np.ones((2, 6), np.float32), "narrow": np.ones((2, 4), np.float32)}
    with pytest.raises(RunError):
        torch_outputs(module, sample)
    binding = bind_inputs(module, _model("wide", "narrow"))
    (by_name,) = torch_outputs(module, sample, binding=binding)
    expected = module(torch.ones(2, 4), wide=torch.ones(2, 6)).detach().numpy()
    np.testing.assert_array_equal(by_name, expected)


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_the_graph_keeps_the_spec_names_in_forward_order(exporter: str, tmp_path: Path) -> None:
    module = models.make_two_sizes().eval()
    inputs = [InputSpec("wide", ("batch", 6)), InputSpec("narrow", ("batch", 4))]
    wide, narrow = torch.randn(2, 6), torch.randn(2, 4)
    path = tmp_path / "two.onnx"
    export_model(module, [wide, narrow], inputs, ["y"], 18, exporter, path,
                 by_name=["narrow", "wide"])
    assert [i.name for i in onnx.load(str(path)).graph.input] == ["narrow", "wide"]
    feeds = {"wide": np.ones((3, 6), np.float32), "narrow": np.full((3, 4), 0.5, np.float32)}
    (got,) = ort.InferenceSession(str(path)).run(None, feeds)
    expected = module(torch.from_numpy(feeds["narrow"]), wide=torch.from_numpy(feeds["wide"]))
    np.testing.assert_allclose(got, expected.detach().numpy(), atol=1e-6)


def test_by_name_keyword_only_and_by_position_end_to_end(
        write_spec: Callable[[str], Path], run_cli: Callable[..., Any]) -> None:
    code, out, _, report = run_cli(write_spec("""
        version: 1
        models:
          - name: reversed
            torch: models.py:make_two_sizes
            inputs: {wide: [batch, 6], narrow: [batch, 4]}
            exporters: [dynamo, torchscript]
            datasets: [r]
          - name: keyword-only
            torch: models.py:make_keyword_only
            inputs: {x: [batch, 4], scale: [batch, 1]}
            exporters: [dynamo, torchscript]
          - name: sequential
            torch: models.py:make_linear
            inputs: {x: [batch, 4]}
          - name: mixed
            torch: models.py:make_two_sizes
            inputs: {narrow: [batch, 4], wdie: [batch, 6]}
        datasets:
          r: {kind: random, batch_sizes: [1, 3]}
    """), "--localize", "always")
    assert code == 1, out
    cases = by_id(report)
    mixed = cases.pop("mixed[opset18-cpu-random-b1]")
    assert mixed["status"] == "error" and mixed["stage"] == "load"
    assert mixed["message"].startswith("input 'wdie' of model 'mixed' names no parameter of "
                                       "forward(), while 'narrow' does")
    assert sorted(cases) == [
        "keyword-only[opset18-dynamo-cpu-random-b1]",
        "keyword-only[opset18-torchscript-cpu-random-b1]",
        "reversed[opset18-dynamo-cpu-r-b1]", "reversed[opset18-dynamo-cpu-r-b3]",
        "reversed[opset18-torchscript-cpu-r-b1]", "reversed[opset18-torchscript-cpu-r-b3]",
        "sequential[opset18-cpu-random-b1]",
    ]
    for case in cases.values():
        assert case["status"] == "passed", (case["id"], case["message"])
        assert not case["notes"]
        # The localization's PyTorch run binds the inputs as the reference run did: by
        # position, the reversed spec would not even run there.
        divergence = case["details"]["divergence"]
        assert divergence["verdict"] == "none", (case["id"], divergence["summary"])
