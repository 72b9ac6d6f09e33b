"""Selections among tied scores: TopK (and what gathers by its indices) picks different elements
on the two sides while every score agrees. The localization names the op that picked, as a
selection, and never calls it rounding or advises a looser tolerance.
"""

from __future__ import annotations

import shutil
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from helpers import FIXTURES, by_id
from onnx_parity.explain.localize import find_origin, read_graph
from onnx_parity.results import Tolerance

sys.path.insert(0, str(FIXTURES))
import faulty_models as fm

TOLERANCE = Tolerance(atol=1e-4, rtol=1e-3)
LOOSER = ("tolerance is tighter", "loosen", "needs atol", "rounding")


def _no_looser_tolerance(*texts: str) -> None:
    for text in texts:
        assert not any(words in text for words in LOOSER), text


# -- the verdict on a hand-built graph -----------------------------------------------------------


def _topk_graph() -> Any:
    """s → Relu (r) → TopK(k=2, axis 1) → vals, idx; GatherElements(f, idx) → picked."""
    outputs = [helper.make_tensor_value_info(name, kind, [2, 2]) for name, kind in (
        ("vals", TensorProto.FLOAT), ("idx", TensorProto.INT64), ("picked", TensorProto.FLOAT))]
    return read_graph(helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["s"], ["r"], name="relu"),
         helper.make_node("TopK", ["r", "k"], ["vals", "idx"], name="topk", axis=1),
         helper.make_node("GatherElements", ["f", "idx"], ["picked"], name="take", axis=1)],
        "select",
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, [2, 4]),
         helper.make_tensor_value_info("f", TensorProto.FLOAT, [2, 4])],
        outputs, [helper.make_tensor("k", TensorProto.INT64, [1], [2])]),
        opset_imports=[helper.make_opsetid("", 17)]))


def _sides(scores: np.ndarray) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The tensors of a run that picked the first two columns and of one that picked the last
    two, from the same scores."""
    features = np.arange(8, dtype=np.float32).reshape(2, 4)
    shared = {"s": scores, "f": features, "r": np.maximum(scores, 0)}
    sides = []
    for picked in ([[0, 1], [0, 1]], [[3, 2], [3, 2]]):
        idx = np.array(picked, np.int64)
        sides.append({**shared, "idx": idx, "vals": np.take_along_axis(scores, idx, 1),
                      "picked": np.take_along_axis(features, idx, 1)})
    return sides[0], sides[1]


def test_a_topk_that_picks_otherwise_among_tied_scores_is_a_selection() -> None:
    actual, reference = _sides(np.full((2, 4), 0.5, np.float32))
    found = find_origin(_topk_graph(), actual, reference, lambda _: TOLERANCE,
                        reference_name="the CPU provider")
    assert found.verdict == "selection"
    record = found.as_record()
    assert (record.verdict, record.node, record.op_type, record.tensor) == (
        "selection", "topk", "TopK", "idx")
    assert found.headline == ("TopK 'topk' picked different elements among tied scores: a"
                              " selection, not arithmetic")
    assert "its scores agree with the CPU provider within tolerance" in found.summary
    assert "2 of its 2 rows hold equal scores among their 2 largest scores and the next" in (
        found.summary)
    _no_looser_tolerance(found.headline, found.summary)
    assert [(step.tensor, step.within) for step in record.path] == [("r", True), ("idx", False)]
    passing = find_origin(_topk_graph(), actual, reference, lambda _: TOLERANCE,
                          reference_name="the CPU provider", case_failed=False)
    assert passing.headline == f"with every intermediate tensor kept, {found.headline}"
    assert passing.summary.startswith("the outputs pass, but with every intermediate tensor kept")


def test_scores_that_agree_within_tolerance_are_near_ties() -> None:
    scores = np.array([[0.5, 0.50001, 0.50002, 0.50003]] * 2, np.float32)
    actual, reference = _sides(scores)
    found = find_origin(_topk_graph(), actual, reference, lambda _: TOLERANCE,
                        reference_name="PyTorch")
    assert found.verdict == "selection"
    assert "among near-tied scores" in found.headline
    assert "no score is tied exactly, but 2 of its 2 rows hold scores within tolerance" in (
        found.summary)


def test_different_picks_among_distinct_scores_are_no_selection_but_an_origin() -> None:
    """Scores far apart that both sides agree on: picking otherwise is a bug (an exporter's
    `largest` flipped, say), and the verdict names the op as where the drift starts."""
    actual, reference = _sides(np.array([[0.9, 0.8, 0.1, 0.2]] * 2, np.float32))
    found = find_origin(_topk_graph(), actual, reference, lambda _: TOLERANCE,
                        reference_name="the CPU provider")
    assert found.verdict == "origin"
    assert found.headline == "drift starts at TopK 'topk'"


def test_non_max_suppression_among_boxes_of_one_score_is_a_selection() -> None:
    """Four disjoint boxes of one score, two kept: which two is a tie either side may break."""
    graph = read_graph(helper.make_model(helper.make_graph(
        [helper.make_node("NonMaxSuppression", ["boxes", "scores", "most"], ["keep"],
                          name="nms")],
        "nms", [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 4, 4]),
                helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, 4])],
        [helper.make_tensor_value_info("keep", TensorProto.INT64, [2, 3])],
        [helper.make_tensor("most", TensorProto.INT64, [1], [2])]),
        opset_imports=[helper.make_opsetid("", 17)]))
    boxes = np.array([[[i, i, i + 0.5, i + 0.5] for i in range(4)]], np.float32)
    shared = {"boxes": boxes, "scores": np.full((1, 1, 4), 0.7, np.float32)}
    actual = {**shared, "keep": np.array([[0, 0, 0], [0, 0, 1]], np.int64)}
    reference = {**shared, "keep": np.array([[0, 0, 3], [0, 0, 2]], np.int64)}
    found = find_origin(graph, actual, reference, lambda _: TOLERANCE, reference_name="PyTorch")
    assert (found.verdict, found.as_record().node) == ("selection", "nms")
    assert "2 of the 2 boxes it selected share their score with another box of their class" in (
        found.summary)
    _no_looser_tolerance(found.headline, found.summary)


def _amplifier_graph() -> Any:
    """s → Relu (r) → Mul (m, the scores) → TopK(k=1) → idx; GatherElements(f, idx) → picked,
    the one output: a detector's scoring, choosing and taking, with PyTorch's r, m and picked."""
    return read_graph(helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["s"], ["r"], name="relu"),
         helper.make_node("Mul", ["r", "c"], ["m"], name="scale"),
         helper.make_node("TopK", ["m", "k"], ["vals", "idx"], name="topk", axis=1),
         helper.make_node("GatherElements", ["f", "idx"], ["picked"], name="take", axis=1)],
        "amplify",
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, [2, 4]),
         helper.make_tensor_value_info("f", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("picked", TensorProto.FLOAT, [2, 1])],
        [helper.make_tensor("k", TensorProto.INT64, [1], [1]),
         helper.make_tensor("c", TensorProto.FLOAT, [], [1.0])]),
        opset_imports=[helper.make_opsetid("", 17)]))


def _picking(m: np.ndarray, scores: np.ndarray) -> dict[str, np.ndarray]:
    features = np.arange(8, dtype=np.float32).reshape(2, 4)
    idx = np.argmax(m, 1)[:, None]
    return {"r": scores, "m": m, "idx": idx, "vals": np.take_along_axis(m, idx, 1),
            "picked": np.take_along_axis(features, idx, 1)}


def test_a_selection_that_amplifies_rounding_is_named_not_gradual_growth() -> None:
    """Scores one ulp apart that swap places by rounding (off by 6e-8, out of an exact
    tolerance): the first difference is rounding, but what fails is a whole element picked
    otherwise. It was "no single origin: rounding grows gradually"; the verdict names the TopK
    and points to comparing a detector's outputs as sets."""
    up = np.nextafter(np.float32(0.5), np.float32(1))
    scores = np.array([[0.5, up, 0.1, 0.2]] * 2, np.float32)
    reference = _picking(scores, scores)
    known = {name: reference[name] for name in ("r", "m", "picked")}  # PyTorch's modules
    actual = _picking(scores[:, [1, 0, 2, 3]], scores)  # the scores' rounding swapped
    exact = Tolerance(atol=0.0, rtol=0.0)
    found = find_origin(_amplifier_graph(), actual, known, lambda _: exact,
                        reference_name="PyTorch")
    record = found.as_record()
    assert (record.verdict, record.node, record.op_type, record.tensor) == (
        "selection", "topk", "TopK", "picked")
    assert found.headline == ("TopK 'topk' picked different elements from scores that differ"
                              " only by rounding: a selection amplifies the difference, not"
                              " arithmetic")
    advice = ("compare a detector's boxes, scores and labels as sets with compare: {detections:"
              " {boxes: …, scores: …, labels: …}}, which matches boxes by label and IoU instead"
              " of by position, or leave the outputs that depend on the order out of the"
              " comparison (ignore_outputs)")
    assert found.summary == (
        "TopK 'topk' picked different elements than PyTorch from scores that differ only by"
        " rounding: the first difference, 'm', is off by 6.0e-8, within rounding of values up"
        " to 5.0e-1, and it reaches the scores TopK 'topk' picks from, where no score is tied"
        " exactly, but 2 of its 2 rows hold scores within rounding of each other among their"
        " largest score and the next; so 'picked', which GatherElements 'take' takes elements"
        " by, differs (2 of 2 elements). A selection amplifies the difference, not arithmetic:"
        " rounding swaps two near-equal scores, and no tolerance makes the two sides pick"
        f" alike; {advice}")
    assert [(step.tensor, step.within) for step in record.path] == [
        ("r", True), ("m", False), ("picked", False)]
    as_sets = find_origin(_amplifier_graph(), actual, known, lambda _: exact,
                          reference_name="PyTorch", sets=True)
    assert as_sets.summary.endswith("pick alike; leave the outputs that depend on the order out"
                                    " of the comparison (ignore_outputs)")
    # Scores far apart, which rounding cannot swap: the TopK is not what made 'picked' differ.
    apart = _picking(*[np.array([[0.5, 0.9, 0.1, 0.2]] * 2, np.float32)] * 2)
    noisy = {**apart, "m": apart["m"] + np.float32(6e-8), "picked": apart["picked"] + 0.5}
    gradual = find_origin(_amplifier_graph(), noisy, {k: apart[k] for k in ("r", "m", "picked")},
                          lambda _: exact, reference_name="PyTorch")
    assert gradual.verdict == "gradual", gradual.summary
    # More than rounding before the selection: a bug there, named where it starts.
    wrong = {**actual, "m": actual["m"] * 0.5}
    assert find_origin(_amplifier_graph(), wrong, known, lambda _: exact,
                       reference_name="PyTorch").headline == "drift starts at Mul 'scale'"


# -- a real export, checked against PyTorch -------------------------------------------------------


def _topk_node(path: Path) -> str:
    return next(n.name for n in onnx.load(str(path)).graph.node if n.op_type == "TopK")


@pytest.mark.slow
def test_tied_scores_in_a_real_model_are_named_a_selection(
        tmp_path: Path, run_cli: Callable[..., Any]) -> None:
    """A shipped export of the tied model, checked against the same model whose PyTorch scores
    carry a tie-breaking ramp far below the tolerance: PyTorch picks the last candidates, ONNX
    Runtime the first, on every machine. Beside it the same model exported as it is, where the
    two sides break exact ties each their own way (they differ on most machines)."""
    import torch

    from onnx_parity.prepare.export import export_model
    from onnx_parity.spec import InputSpec

    shutil.copy(FIXTURES / "faulty_models.py", tmp_path / "faulty_models.py")
    nodes = {}
    for exporter in ("torchscript", "dynamo"):
        path = tmp_path / f"tied-{exporter}.onnx"
        export_model(fm.make_tied_scores(), [torch.randn(2, 10, 4)],
                     [InputSpec("x", ("batch", 10, 4))], ["values", "indices", "picked"], 18,
                     exporter, path)
        nodes[f"shipped-{exporter}"] = _topk_node(path)
    spec = tmp_path / "parity.yaml"
    spec.write_text(textwrap.dedent("""\
        version: 1
        defaults: {datasets: [few]}
        datasets: {few: {kind: random, seed: 1, samples: 2, batch_sizes: [2]}}
        models:
          - {name: shipped-torchscript, onnx: tied-torchscript.onnx,
             torch: faulty_models.py:make_tied_scores, args: {tie_break: 1.0e-6}}
          - {name: shipped-dynamo, onnx: tied-dynamo.onnx,
             torch: faulty_models.py:make_tied_scores, args: {tie_break: 1.0e-6}}
          - name: exported
            torch: faulty_models.py:make_tied_scores
            inputs: {x: {shape: [batch, 10, 4]}}
            outputs: [values, indices, picked]
            exporter: torchscript
        """))
    code, out, err, report = run_cli(spec, "--jobs", "1")
    cases = {case["model"]: case for case in by_id(report).values()}
    assert set(cases) == {*nodes, "exported"}, out + err
    for name, node in nodes.items():
        case = cases[name]
        assert case["status"] == "failed", (name, case["message"])
        divergence = case["details"]["divergence"]
        assert divergence["verdict"] == "selection", (name, divergence["summary"])
        assert (divergence["node"], divergence["op_type"]) == (node, "TopK")
        assert divergence["headline"] == (
            f"TopK '{node}' in the top-level module (TiedScores) picked different elements"
            " among tied scores: a selection, not arithmetic")
        assert "its scores agree with PyTorch within tolerance" in divergence["summary"]
        assert "2 of its 2 rows hold equal scores" in divergence["summary"]
        _no_looser_tolerance(divergence["headline"], divergence["summary"], case["message"])
        assert f"picked differently among tied scores by TopK '{node}', which no atol fixes" \
            in case["message"]
        # the weights are the module's: no stale artifact behind it
        weights, graph = case["details"]["causes_ruled_out"]
        assert graph["kind"] == "graph" and not graph["proven"]  # ties are no fusion's doing
        assert weights["message"].startswith("stale weights ruled out")
        assert "picked different elements among tied scores" in out
    exported = cases["exported"]
    if exported["status"] == "failed":  # this machine's PyTorch breaks ties otherwise
        divergence = exported["details"]["divergence"]
        assert divergence["verdict"] == "selection", divergence["summary"]
        assert divergence["op_type"] == "TopK"
        _no_looser_tolerance(divergence["headline"], divergence["summary"], exported["message"])
    else:
        assert exported["status"] == "passed", exported["message"]
    assert code == 1


def test_scores_within_their_own_rounding_are_ties_where_their_agreement_is_unknown() -> None:
    """The two largest scores one ulp apart, and PyTorch with no value for them (no module
    output between): the arithmetic before the TopK may round them either way, so the two
    sides listing them in other orders is a selection. Scores 1e-5 apart, within the tolerance
    but not within rounding, are not, without PyTorch's word that they agree."""
    up = np.nextafter(np.float32(0.5), np.float32(1))
    features = np.arange(8, dtype=np.float32).reshape(2, 4)
    for second, verdict in ((up, "selection"), (np.float32(0.50001), "origin")):
        scores = np.array([[0.5, second, 0.1, 0.2]] * 2, np.float32)
        sides = []
        for order in ([1, 0], [0, 1]):
            idx = np.array([order] * 2, np.int64)
            sides.append({"s": scores, "f": features, "r": scores, "idx": idx,
                          "vals": np.take_along_axis(scores, idx, 1),
                          "picked": np.take_along_axis(features, idx, 1)})
        unknown = {k: v for k, v in sides[1].items() if k not in ("r", "s", "f")}
        found = find_origin(_topk_graph(), sides[0], unknown, lambda _: TOLERANCE,
                            reference_name="PyTorch")
        assert found.verdict == verdict, found.summary
        if verdict == "selection":
            assert found.headline == ("TopK 'topk' picked different elements among near-tied"
                                      " scores: a selection, not arithmetic")
            assert ("PyTorch has no value for its scores here, and no score is tied exactly, but"
                    " 2 of its 2 rows hold scores within rounding of each other among their 2"
                    " largest scores and the next") in found.summary
            _no_looser_tolerance(found.headline)
