"""The dimension named `batch` is the batch wherever it stands (an RNN's state is
[layers, batch, hidden]): in random data, in the export's example, in the spec's checks and in
recorded data cut into batches; a first dimension of another name stays the batch, as before."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, save

from helpers import by_id
from onnx_parity.backends import OrtTarget
from onnx_parity.errors import LoadError, SpecError
from onnx_parity.plan.shapes import concrete_shape
from onnx_parity.prepare.inputs import random_samples, recorded_samples
from onnx_parity.spec import PREDEFINED_TARGETS, DatasetSpec, InputSpec, parse_spec

X = InputSpec("x", ("batch", "seq", 4))
H = InputSpec("h", (1, "batch", 8))


def test_the_batch_is_the_dimension_named_batch_wherever_it_stands() -> None:
    assert concrete_shape(H, 3, {}) == (1, 3, 8)
    assert concrete_shape(InputSpec("x", ("seq", "batch", 4)), 3, {"seq": 5}) == (5, 3, 4)
    assert concrete_shape(InputSpec("x", ("n", 10)), 3, {}) == (3, 10)  # axis 0, as before
    # One dataset per batch size with dims {batch: N} was the way before: it still is.
    assert concrete_shape(H, 3, {"batch": 3}) == (1, 3, 8)
    with pytest.raises(LoadError, match="named dimension 'seq' at axis 0"):
        concrete_shape(InputSpec("x", ("seq", "batch", 4)), 3, {})


def test_random_data_gives_every_batch_dimension_the_batch_size() -> None:
    (sample,) = random_samples(DatasetSpec("d", "random", samples=1), 3, [X, H], {"seq": 5})
    assert sample.inputs["x"].shape == (3, 5, 4) and sample.inputs["h"].shape == (1, 3, 8)


def _problems(text: str, folder: Path) -> list[str]:
    try:
        parse_spec(textwrap.dedent(text), folder / "parity.yaml")
    except SpecError as exc:
        return [p.message for p in exc.problems]
    return []


def test_the_spec_asks_a_size_for_every_named_dimension_but_the_batch(tmp_path: Path) -> None:
    spec = """
        version: 1
        models:
          - name: m
            torch: pkg.mod:build
            inputs: {x: [batch, seq, 4], h: [1, batch, 8]}
            datasets: [r]
        datasets:
          r: {kind: random, dims: {seq: 5}}
    """
    assert _problems(spec, tmp_path) == []
    assert _problems(spec.replace("[batch, seq, 4]", "[seq, batch, 4]").replace(
        "dims: {seq: 5}", "batch_sizes: [2]"), tmp_path) == [
        "input 'x' of model 'm': random data needs a size for the named dimension 'seq' at "
        "axis 0: set dims: {seq: N} on dataset 'r'"]


def test_recorded_data_is_cut_along_each_inputs_batch_axis(tmp_path: Path) -> None:
    path = tmp_path / "rec.npz"
    x = np.arange(6 * 5 * 4, dtype=np.float32).reshape(6, 5, 4)
    h = np.arange(6 * 8, dtype=np.float32).reshape(1, 6, 8)
    np.savez(path, x=x, h=h, out=x[:, :, :2])
    samples = recorded_samples(DatasetSpec("rec", "npz", path=path, batch_sizes=(3,)), 3,
                               [X, H], ["out"])
    assert len(samples) == 2
    np.testing.assert_array_equal(samples[1].inputs["x"], x[3:6])
    np.testing.assert_array_equal(samples[1].inputs["h"], h[:, 3:6])
    np.testing.assert_array_equal(samples[1].reference_by_name["out"], x[3:6, :, :2])


def test_batch_sizes_that_disagree_name_the_input_and_the_axis(tmp_path: Path) -> None:
    path = tmp_path / "rec.npz"
    np.savez(path, x=np.zeros((2, 5, 4), np.float32), h=np.zeros((1, 3, 8), np.float32))
    with pytest.raises(LoadError) as whole:
        recorded_samples(DatasetSpec("rec", "npz", path=path), None, [X, H], [])
    assert whole.value.message == (
        "dataset 'rec', sample 1: input 'h' has 3 on axis 1, its batch dimension, but input 'x'"
        " has 2 on axis 0; record the inputs with one batch size, or, if that axis is not the "
        "batch, give it another name than batch in inputs.h.shape")
    with pytest.raises(LoadError) as cut:
        recorded_samples(DatasetSpec("rec", "npz", path=path, batch_sizes=(1,)), 1, [X, H], [])
    assert cut.value.message == (
        f"{path}: array 'h' has 3 rows on axis 1, its batch axis, 'x' has 2 on axis 0")


def test_a_recurrent_state_takes_the_batch_at_every_batch_size(
        write_spec: Callable[[str], Path], run_cli: Callable[..., Any]) -> None:
    """A GRU's x is [batch, seq, 4] and its state [1, batch, 8]: batch 3 feeds both batch 3,
    and the export's example both batch 2. The spec that fed the state one dataset per batch
    size, with dims {batch: N}, passes as it is."""
    code, out, _, report = run_cli(write_spec("""
        version: 1
        models:
          - name: gru
            torch: models.py:make_recurrent
            inputs: {x: [batch, seq, 4], h: [1, batch, 8]}
            exporters: [dynamo, torchscript]
            datasets: [r]
          - name: by-dataset
            torch: models.py:make_recurrent
            inputs: {x: [batch, seq, 4], h: [1, batch, 8]}
            datasets: [one, three]
        datasets:
          r: {kind: random, batch_sizes: [1, 3], dims: {seq: 5}}
          one: {kind: random, batch_sizes: [1], dims: {seq: 5, batch: 1}}
          three: {kind: random, batch_sizes: [3], dims: {seq: 5, batch: 3}}
    """))
    assert code == 0, out
    assert sorted(by_id(report)) == [
        "by-dataset[opset18-cpu-one-b1]", "by-dataset[opset18-cpu-three-b3]",
        "gru[opset18-dynamo-cpu-r-b1]", "gru[opset18-dynamo-cpu-r-b3]",
        "gru[opset18-torchscript-cpu-r-b1]", "gru[opset18-torchscript-cpu-r-b3]",
    ]
    for case in report["cases"]:
        assert case["status"] == "passed", (case["id"], case["message"])
        assert len(case["outputs"]) == 2


def test_a_model_file_that_names_its_batch_keeps_it_where_it_stands(tmp_path: Path) -> None:
    """Inputs read from an ONNX file: a dim it names `batch` is the batch; without one, the
    first axis is, whatever the file declares there (named, so that random data feeds it the
    batch size; not `batch`, which the file did not say, so recorded data is not held to it)."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["h"], ["y"]), helper.make_node("Identity", ["x"], ["z"])],
        "state",
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, "batch", 8]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "batch", 8]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4])])
    path = tmp_path / "state.onnx"
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
         str(path))
    specs = OrtTarget(path, PREDEFINED_TARGETS["cpu"]).input_specs()
    assert [(s.name, s.shape) for s in specs] == [("h", (1, "batch", 8)), ("x", ("dim0", 4))]
    assert concrete_shape(specs[1], 3, {}) == (3, 4)
