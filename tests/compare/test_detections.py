"""Detections compared as sets (compare/detections.py): boxes matched one to one by label and
IoU, matched values held to the tolerance, boxes on one side only named with their count and
best score; end to end on a tiny torchvision-style detector whose shipped ONNX lists its boxes
in another order."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from helpers import FIXTURES, by_id
from onnx_parity.compare.detections import aligned, match
from onnx_parity.compare.outputs import compare_case
from onnx_parity.errors import CompareError, SpecError
from onnx_parity.results import Tolerance
from onnx_parity.spec.load import load_spec
from onnx_parity.spec.model import Detections

TOLERANCE = Tolerance(atol=1e-4, rtol=1e-3)
BOXES = np.array([[0, 0, 10, 10], [5, 5, 15, 15], [20, 0, 30, 10]], dtype=np.float32)
SCORES = np.array([0.9, 0.5, 0.7], dtype=np.float32)
LABELS = np.array([1, 2, 1], dtype=np.int64)
NAMES = ["output_0.boxes", "output_0.scores", "output_0.labels"]
SETS = Detections("boxes", "scores", "labels", 0.9)
PERMUTATION = [3, 0, 4, 1, 2]


def _compare(actual: list[np.ndarray], detections: Detections | None = SETS) -> Any:
    return compare_case(NAMES, [[BOXES, SCORES, LABELS]], [actual], lambda _: TOLERANCE,
                        detections=detections, reference="PyTorch")


def test_a_reordered_set_passes_as_a_set_and_fails_as_tensors() -> None:
    order = [2, 0, 1]
    shuffled = [BOXES[order], SCORES[order], LABELS[order]]
    boxes, scores, labels = _compare(shuffled)
    assert boxes.passed and scores.passed and labels.passed
    assert boxes.message == ("output_0.boxes: max abs 0 within atol 1e-4 + rtol 1e-3·|e|; "
                             "compared as a set: 3 boxes matched by label and IoU ≥ 0.9 "
                             "(positions as in PyTorch's output)")
    assert not any(c.passed for c in _compare(shuffled, None))


def test_a_moved_box_fails_at_its_place_in_the_reference() -> None:
    moved = BOXES.copy()
    moved[1, 2] += 0.5  # IoU 0.95: still matched, but far outside the tolerance
    order = [2, 1, 0]
    boxes, scores, _ = _compare([moved[order], SCORES[order], LABELS[order]])
    assert not boxes.passed and boxes.kind == "elements" and scores.passed
    assert boxes.worst_index == (0, 1, 2)  # PyTorch's box 1, coordinate x2
    assert "1 of 12 elements (8.33%) out of tolerance; max abs 5.0e-1" in boxes.message


def test_boxes_on_one_side_only_are_counted_with_their_best_score() -> None:
    extra = [np.concatenate([BOXES, [[40, 40, 50, 50], [60, 60, 70, 70]]]).astype(np.float32),
             np.concatenate([SCORES, [0.41, 0.2]]).astype(np.float32),
             np.concatenate([LABELS, [3, 1]])]
    boxes, scores, labels = _compare(extra)
    assert (boxes.passed, boxes.kind, scores.passed, labels.passed) == (
        False, "unmatched", True, True)
    assert boxes.message.startswith("output_0.boxes: 2 boxes only in ONNX Runtime, best score "
                                    "0.41; compared as a set: 3 boxes matched")
    relabelled = LABELS.copy()
    relabelled[0] = 7  # a box of another class is not the same detection
    (boxes, *_) = _compare([BOXES, SCORES, relabelled])
    assert boxes.message.startswith("output_0.boxes: 1 box only in ONNX Runtime, best score 0.9;"
                                    " 1 box only in PyTorch, best score 0.9; ")


def test_no_box_on_either_side_in_any_sample_is_not_a_pass() -> None:
    """A detector that finds nothing on the inputs compares nothing: an error with the fix, as
    for an all-zero reference; one sample with boxes is enough to judge the others."""
    empty = [np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int64)]
    nothing = compare_case(NAMES, [empty, empty], [empty, empty], lambda _: TOLERANCE,
                           detections=SETS, reference="PyTorch")
    boxes = nothing[0]
    assert (boxes.passed, boxes.powerless, boxes.kind) == (False, True, "empty")
    assert boxes.message.startswith("output_0.boxes: no box in any of the 2 samples, on either "
                                    "side: no box, score or label was compared")
    some = compare_case(NAMES, [empty, [BOXES, SCORES, LABELS]], [empty, [BOXES, SCORES, LABELS]],
                        lambda _: TOLERANCE, detections=SETS, reference="PyTorch")
    assert all(c.passed for c in some)


def test_matching_is_greedy_by_the_reference_scores() -> None:
    # Two reference boxes overlap one actual box; the higher-scored one takes it.
    e = (np.array([[0, 0, 10, 10], [0, 0, 10, 10.5]]), np.array([0.2, 0.8]), None)
    a = (np.array([[0, 0, 10, 10.4]]), np.array([0.8]), None)
    assert [tuple(x) if isinstance(x, np.ndarray) else x for x in match(e, a, 0.9)] == [
        [(1, 0)], (0,), ()]


def test_aligned_puts_the_reference_in_the_actual_order() -> None:
    order = [2, 0, 1]
    boxes, scores, labels = aligned(NAMES, SETS, [BOXES, SCORES, LABELS],
                                    [BOXES[order], SCORES[order], LABELS[order]])
    assert np.array_equal(boxes, BOXES[order]) and np.array_equal(labels, LABELS[order])
    assert np.array_equal(scores, SCORES[order])


def test_names_that_fit_no_output_are_errors() -> None:
    with pytest.raises(CompareError, match="names boxes 'bbox', which the model does not output"):
        _compare([BOXES, SCORES, LABELS], Detections("bbox", "scores"))


def test_the_spec_checks_the_names(write_spec: Callable[[str], Path]) -> None:
    with pytest.raises(SpecError) as raised:
        load_spec(write_spec("""
            version: 1
            models:
              - name: m
                torch: models.py:make_linear
                outputs: [boxes, scores]
                compare: {detections: {boxes: boxes, scores: boxes, labels: labls, iou: 1.5}}
        """))
    message = str(raised.value)
    assert "compare.detections.iou" in message or "iou" in message
    assert "compare.detections.scores names 'boxes', as boxes does" in message
    assert "compare.detections.labels names 'labls', which is not among its outputs" in message


# -- end to end: a shipped export whose sets come out in another order ---------------------------


def _ship(folder: Path) -> None:
    """det.onnx, the TorchScript export of the fixture detector, then three shipped files made
    from it: permuted.onnx lists every box in another order; moved.onnx also moves one box by
    0.5; extra.onnx also adds a box of score 0.41."""
    import importlib.util

    import onnx
    import torch
    from onnx import helper, numpy_helper

    from onnx_parity.backends.pytorch import output_names
    from onnx_parity.prepare.export import export_model
    from onnx_parity.spec import InputSpec

    found = importlib.util.spec_from_file_location("detection_models",
                                                   FIXTURES / "detection_models.py")
    assert found is not None and found.loader is not None
    models = importlib.util.module_from_spec(found)
    found.loader.exec_module(models)
    module = models.make_tiny_detector().eval()
    x = torch.randn(1, 8)
    export_model(module, [x], [InputSpec("x", (1, 8))], output_names(module(x)), 18,
                 "torchscript", folder / "det.onnx")

    def edited(name: str, after: dict[str, Callable[[str, str], list[Any]]]) -> None:
        model = onnx.load(str(folder / "det.onnx"))
        graph = model.graph
        graph.initializer.append(numpy_helper.from_array(np.array(PERMUTATION), "perm"))
        for output in graph.output:
            raw = f"{output.name}.raw"
            for node in graph.node:
                node.output[:] = [raw if o == output.name else o for o in node.output]
                node.input[:] = [raw if i == output.name else i for i in node.input]
            step = after.get(output.name.split(".")[-1])
            permuted = f"{output.name}.permuted" if step else output.name
            graph.node.append(helper.make_node("Gather", [raw, "perm"], [permuted], axis=0))
            if step:
                graph.node.extend(step(permuted, output.name))
            del output.type.tensor_type.shape.dim[:]  # the extra box changes the count
        onnx.save(model, str(folder / name))

    def constant(value: Any) -> str:
        return helper.make_tensor(f"c{constant.count}", onnx.helper.np_dtype_to_tensor_dtype(
            np.asarray(value).dtype), np.shape(value), np.asarray(value).flatten().tolist())

    def plus(value: np.ndarray, op: str = "Add") -> Callable[[str, str], list[Any]]:
        def nodes(source: str, target: str) -> list[Any]:
            held = f"{target}.constant"
            attributes = {"axis": 0} if op == "Concat" else {}
            return [helper.make_node("Constant", [], [held],
                                     value=numpy_helper.from_array(value, held)),
                    helper.make_node(op, [source, held], [target], **attributes)]
        return nodes

    shift = np.zeros((5, 4), dtype=np.float32)
    shift[PERMUTATION.index(1), 2] = 0.5  # PyTorch's box 1 grows by 0.5 (IoU about 0.95)
    edited("permuted.onnx", {})
    edited("moved.onnx", {"boxes": plus(shift)})
    edited("extra.onnx", {
        "boxes": plus(np.array([[40, 40, 50, 50]], dtype=np.float32), "Concat"),
        "scores": plus(np.array([0.41], dtype=np.float32), "Concat"),
        "labels": plus(np.array([3], dtype=np.int64), "Concat")})


@pytest.mark.slow
def test_a_detector_listed_in_another_order(tmp_path: Path, write_spec: Callable[[str], Path],
                                            run_cli: Callable[..., Any]) -> None:
    shutil.copy(FIXTURES / "detection_models.py", tmp_path / "detection_models.py")
    _ship(tmp_path)
    models = "\n".join(f"""
          - name: {name}
            torch: detection_models.py:make_tiny_detector
            onnx: {onnx}.onnx
            inputs: {{x: [1, 8]}}{sets if name != "as_tensors" else ""}"""
                       for name, onnx in (("as_sets", "permuted"), ("as_tensors", "permuted"),
                                          ("moved", "moved"), ("extra", "extra"))
                       for sets in ["\n            compare: {detections: {boxes: boxes, "
                                    "scores: scores, labels: labels, iou: 0.9}}"])
    spec = write_spec("version: 1\nmodels:" + models)
    code, _, _, report = run_cli(spec)
    assert code == 1
    cases = {c["model"]: c for c in by_id(report).values()}
    assert cases["as_sets"]["status"] == "passed", cases["as_sets"]["message"]
    # Without compare: detections, the same file fails: its boxes are in another order.
    assert cases["as_tensors"]["status"] == "failed"
    assert "output_0.boxes: " in cases["as_tensors"]["message"]
    moved = cases["moved"]
    assert moved["status"] == "failed"
    # PyTorch's box 1, its x2, in both samples (the worst in the second).
    assert moved["message"].startswith("output_0.boxes: 2 of 40 elements (5.00%) out of "
                                       "tolerance; max abs 5.0e-1; worst at sample 1 [1, 2]")
    assert "compared as a set: 10 boxes matched by label and IoU ≥ 0.9" in moved["message"]
    # Where the drift starts: at the box that moved, not at the Gather that reordered them.
    drift = moved["details"]["divergence"]
    assert drift["op_type"] == "Add", drift
    extra = cases["extra"]
    assert extra["status"] == "failed"
    assert extra["message"].startswith("output_0.boxes: 2 boxes only in ONNX Runtime, best "
                                       "score 0.41; compared as a set: 10 boxes matched")
