"""Rebuilds the example's shipped files: ONNX artifacts, recorded inputs and golden test data.

Run from the repository root: `python examples/make_artifacts.py`. The outputs are committed, so
the examples run without this script; it documents where each file came from.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
import torch
from onnx import helper, numpy_helper

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from models import make_cnn, make_mlp, make_stream  # noqa: E402


def export(module: torch.nn.Module, example: torch.Tensor, path: Path, dynamic: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    module.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module, (example,), str(path), dynamo=False, opset_version=17,
            input_names=["x" if example.ndim == 2 else "image"], output_names=["y"],
            dynamic_axes={("x" if example.ndim == 2 else "image"): {0: "batch"}} if dynamic
            else None,
        )


def drifting_stream(path: Path) -> None:
    """The streaming GRU exported as it is, then one recurrent weight of its first layer nudged
    by 1e-4 of itself: one call barely moves, but the state fed back compounds it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            make_stream().eval(), (torch.randn(3, 1, 4), torch.randn(2, 1, 8)), str(path),
            dynamo=False, opset_version=18, input_names=["frames", "state"],
            output_names=["scores", "state_next"],
            dynamic_axes={"frames": {1: "batch"}, "state": {1: "batch"},
                          "scores": {1: "batch"}, "state_next": {1: "batch"}})
    model = onnx.load(str(path))
    gru = next(n for n in model.graph.node if n.op_type == "GRU")
    recurrent = next(i for i in model.graph.initializer if i.name == gru.input[2])  # R
    weights = numpy_helper.to_array(recurrent).copy()
    weights[0, 0, 0] *= 1 + 1e-4
    recurrent.CopyFrom(numpy_helper.from_array(weights, recurrent.name))
    onnx.save(model, str(path))


def golden_model() -> onnx.ModelProto:
    """A classifier head built with onnx.helper: no PyTorch source, only recorded outputs."""
    rng = np.random.default_rng(7)
    weight = rng.standard_normal((6, 4)).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["features", "W"], ["logits_raw"], name="head/MatMul"),
            helper.make_node("Add", ["logits_raw", "b"], ["logits"], name="head/Add"),
            helper.make_node("Softmax", ["logits"], ["probs"], axis=-1, name="head/Softmax"),
        ],
        "golden_head",
        [helper.make_tensor_value_info("features", onnx.TensorProto.FLOAT, ["batch", 6])],
        [helper.make_tensor_value_info("probs", onnx.TensorProto.FLOAT, ["batch", 4])],
        [numpy_helper.from_array(weight, "W"), numpy_helper.from_array(bias, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="onnx-parity-example")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def softmax_head(model: onnx.ModelProto, features: np.ndarray) -> np.ndarray:
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    logits = features @ weights["W"] + weights["b"]
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def write_test_data(folder: Path, sets: list[tuple[np.ndarray, np.ndarray]]) -> None:
    for index, (features, probs) in enumerate(sets):
        target = folder / f"test_data_set_{index}"
        target.mkdir(parents=True, exist_ok=True)
        (target / "input_0.pb").write_bytes(
            numpy_helper.from_array(features, "features").SerializeToString())
        (target / "output_0.pb").write_bytes(
            numpy_helper.from_array(probs, "probs").SerializeToString())


def main() -> None:
    torch.manual_seed(0)
    export(make_mlp(hidden=16), torch.randn(2, 10), HERE / "artifacts/mlp.onnx", dynamic=True)
    # The stale artifact: exported from weights that have since been retrained (another seed).
    export(make_mlp(hidden=16, seed=1), torch.randn(2, 10), HERE / "artifacts/mlp_stale.onnx",
           dynamic=True)
    # Exported with a fixed batch of 1, then fed batches of 4.
    export(make_cnn(), torch.randn(1, 3, 8, 8), HERE / "artifacts/cnn_batch1.onnx", dynamic=False)
    drifting_stream(HERE / "artifacts/stream_drift.onnx")

    rng = np.random.default_rng(3)
    np.savez(HERE / "data/mlp_inputs.npz", x=rng.standard_normal((8, 10)).astype(np.float32))

    model = golden_model()
    (HERE / "golden").mkdir(exist_ok=True)
    onnx.save(model, str(HERE / "golden/head.onnx"))
    feats = [rng.standard_normal((b, 6)).astype(np.float32) for b in (1, 1, 4)]
    write_test_data(HERE / "golden/data", [(f, softmax_head(model, f)) for f in feats])
    # Recorded before a change to the head: what a golden test must flag.
    drifted = [(f, softmax_head(model, f * 1.05)) for f in feats[:2]]
    write_test_data(HERE / "golden/drifted", drifted)


if __name__ == "__main__":
    main()
