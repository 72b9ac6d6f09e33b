from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from onnx import numpy_helper

from onnx_parity.errors import LoadError
from onnx_parity.plan.cases import batch_sizes
from onnx_parity.plan.shapes import concrete_shape
from onnx_parity.prepare.inputs import random_samples, recorded_samples
from onnx_parity.spec import DatasetSpec, InputSpec

X = InputSpec("x", ("batch", 10), "float32")
TOKENS = InputSpec("tokens", ("batch", 7), "int64", low=3, high=9)
FLAGS = InputSpec("flags", ("batch", 2), "bool")


def test_random_is_deterministic_per_input_whatever_else_the_spec_holds() -> None:
    data = DatasetSpec("d", "random", seed=5, samples=2, batch_sizes=(4,))
    alone = random_samples(data, 4, [X], {})
    together = random_samples(data, 4, [TOKENS, X, FLAGS], {})
    for a, b in zip(alone, together, strict=True):
        np.testing.assert_array_equal(a.inputs["x"], b.inputs["x"])
    assert not np.array_equal(alone[0].inputs["x"], alone[1].inputs["x"])
    other_seed = random_samples(DatasetSpec("d", "random", seed=6), 4, [X], {})
    assert not np.array_equal(alone[0].inputs["x"], other_seed[0].inputs["x"])


def test_random_dtypes_ranges_and_shapes() -> None:
    sample = random_samples(DatasetSpec("d", "random"), 3, [X, TOKENS, FLAGS], {})[0]
    assert sample.inputs["x"].dtype == np.float32 and sample.inputs["x"].shape == (3, 10)
    tokens = sample.inputs["tokens"]
    assert tokens.dtype == np.int64 and tokens.min() >= 3 and tokens.max() < 9
    assert sample.inputs["flags"].dtype == np.bool_
    assert list(sample.inputs) == ["x", "tokens", "flags"]


def test_uniform_distribution_respects_bounds() -> None:
    data = DatasetSpec("u", "random", distribution="uniform", low=-2.0, high=-1.0)
    x = random_samples(data, 64, [X], {})[0].inputs["x"]
    assert x.min() >= -2.0 and x.max() < -1.0


def test_named_dims_other_than_batch_need_a_size() -> None:
    seq = InputSpec("tokens", ("batch", "seq"), "int64", high=5)
    assert concrete_shape(seq, 2, {"seq": 9}) == (2, 9)
    with pytest.raises(LoadError, match="named dimension 'seq' at axis 1"):
        concrete_shape(seq, 2, {})


def test_npz_split_into_batches_with_named_references(tmp_path: Path) -> None:
    path = tmp_path / "rec.npz"
    x = np.arange(80, dtype=np.float32).reshape(8, 10)
    np.savez(path, x=x, y=x.sum(axis=1, keepdims=True))
    data = DatasetSpec("rec", "npz", path=path, batch_sizes=(3,))
    assert batch_sizes(data) == (3,)
    samples = recorded_samples(data, 3, [X], ["y"])
    assert len(samples) == 2  # 8 rows make two whole batches of 3
    np.testing.assert_array_equal(samples[1].inputs["x"], x[3:6])
    np.testing.assert_array_equal(samples[1].reference_by_name["y"], x[3:6].sum(1, keepdims=True))


def test_npz_without_batch_sizes_is_fed_as_recorded_scalars_included(tmp_path: Path) -> None:
    path = tmp_path / "rec.npz"
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    np.savez(path, x=x, scale=np.float32(2.0), y=x * 2)
    data = DatasetSpec("rec", "npz", path=path)
    assert batch_sizes(data) == (None,)
    (sample,) = recorded_samples(data, None, [X, InputSpec("scale", ())], ["y"])
    np.testing.assert_array_equal(sample.inputs["x"], x)
    assert sample.inputs["scale"].shape == () and sample.reference_by_name["y"].shape == (2, 4)


def test_npz_missing_input_names_what_it_holds(tmp_path: Path) -> None:
    path = tmp_path / "rec.npz"
    np.savez(path, image=np.zeros((2, 3), np.float32))
    with pytest.raises(LoadError, match=r"no array for input\(s\) x; it holds image"):
        recorded_samples(DatasetSpec("rec", "npz", path=path), 2, [X], [])


def _write_set(folder: Path, inputs: list[np.ndarray], outputs: list[np.ndarray]) -> None:
    folder.mkdir(parents=True)
    for i, a in enumerate(inputs):
        (folder / f"input_{i}.pb").write_bytes(numpy_helper.from_array(a).SerializeToString())
    for i, a in enumerate(outputs):
        (folder / f"output_{i}.pb").write_bytes(numpy_helper.from_array(a).SerializeToString())


def test_onnx_test_data_groups_sets_by_batch(tmp_path: Path) -> None:
    one, four = np.ones((1, 10), np.float32), np.ones((4, 10), np.float32)
    _write_set(tmp_path / "test_data_set_0", [one], [one * 2])
    _write_set(tmp_path / "test_data_set_1", [four], [four * 2])
    _write_set(tmp_path / "test_data_set_2", [one * 3], [one * 6])
    # As recorded: every set, whatever its batch.
    data = DatasetSpec("zoo", "onnx-test-data", path=tmp_path)
    assert batch_sizes(data) == (None,)
    assert len(recorded_samples(data, None, [X], ["y"])) == 3
    # Asked for a batch size: the sets whose first input has it.
    batched = DatasetSpec("zoo", "onnx-test-data", path=tmp_path, batch_sizes=(1,))
    assert batch_sizes(batched) == (1,)
    samples = recorded_samples(batched, 1, [X], ["y"])
    assert len(samples) == 2
    np.testing.assert_array_equal(samples[1].reference_by_position[0], one * 6)
    # One data set given directly, not its parent folder.
    single = DatasetSpec("one", "onnx-test-data", path=tmp_path / "test_data_set_1")
    (sample,) = recorded_samples(single, None, [X], ["y"])
    assert sample.inputs["x"].shape == (4, 10)


def test_unreadable_recorded_data_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "test_data_set_0").mkdir()
    (tmp_path / "test_data_set_0" / "input_0.pb").write_bytes(b"\xff\xff not a tensor")
    with pytest.raises(LoadError, match=r"test_data_set_0/input_0.pb is not a serialized "
                                        r"TensorProto \(tensor\)"):
        recorded_samples(DatasetSpec("zoo", "onnx-test-data", path=tmp_path), None, [X], [])


def test_a_data_set_without_input_0_names_what_is_missing(tmp_path: Path) -> None:
    (tmp_path / "test_data_set_0").mkdir()
    (tmp_path / "test_data_set_0" / "output_0.pb").write_bytes(
        numpy_helper.from_array(np.ones((1, 2), np.float32)).SerializeToString())
    with pytest.raises(LoadError, match=r"test_data_set_0 has no input_0.pb; the model has"
                                        r" inputs \(x\)"):
        recorded_samples(DatasetSpec("zoo", "onnx-test-data", path=tmp_path), None, [X], [])


def test_recorded_data_traces_its_own_sizes_and_floats_for_integers_are_refused(
        tmp_path: Path, write_spec: Any, run_cli: Any) -> None:
    """A named dimension besides the batch, fed only recorded data: the export is traced at
    the recorded sizes (before, it asked for `dims`, which a recorded dataset does not take);
    recorded floats for an input of integers are refused, naming both types."""
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "rec.npz", x=rng.random((2, 7, 4), dtype=np.float32),
             ids=rng.random((2, 5)).astype(np.float32))
    (tmp_path / "seqs.py").write_text(
        "import torch\n\n\ndef make_seq():\n    torch.manual_seed(0)\n"
        "    return torch.nn.Sequential(torch.nn.Linear(4, 3))\n\n\n"
        "def make_emb():\n    torch.manual_seed(0)\n    return torch.nn.Embedding(64, 4)\n")
    spec = write_spec("""
        version: 1
        defaults: {exporter: torchscript}
        datasets:
          rec: {kind: npz, path: rec.npz}
        models:
          - name: seq
            torch: seqs.py:make_seq
            datasets: [rec]
            inputs: {x: {shape: [batch, seq, 4]}}
          - name: emb
            torch: seqs.py:make_emb
            datasets: [rec]
            inputs: {ids: {shape: [batch, seq], dtype: int64, high: 64}}
        """)
    code, _, _, report = run_cli(spec)
    assert code == 1
    cases = {c["model"]: c for c in report["cases"]}
    assert cases["seq"]["status"] == "passed", cases["seq"]["message"]
    emb = cases["emb"]
    assert (emb["status"], emb["stage"]) == ("error", "load")
    assert emb["message"] == (
        "dataset 'rec', sample 1: input 'ids' holds float32 values, and the model's input is "
        "int64: record it as int64 (numpy: array.astype(np.int64)), or give inputs.ids.dtype "
        "the type it was recorded in")
