"""The checks of a model's `compare: {detections: …}`: which outputs hold a detector's boxes,
scores and labels, to be compared as sets (compare/detections.py)."""

from __future__ import annotations

from typing import Any

from onnx_parity.spec.entries import Checker
from onnx_parity.spec.model import DEFAULT_IOU, Detections
from onnx_parity.spec.values import mapping, number
from onnx_parity.spec.violations import did_you_mean, quoted
from onnx_parity.spec.yamlnodes import NodePath


def detections(checks: Checker, base: NodePath, entry: dict[str, Any],
               outputs: tuple[str, ...]) -> Detections | None:
    """Three different names, each naming one of the model's `outputs` (or the last part of
    dotted ones), where they are given; else they are checked against what the model
    returns, when it runs."""
    found = mapping(mapping(entry.get("compare")).get("detections"))
    boxes, scores, labels = (found.get(k) for k in ("boxes", "scores", "labels"))
    if not (isinstance(boxes, str) and isinstance(scores, str)):
        return None  # absent, or the schema pass said what is wrong with it
    labels = labels if isinstance(labels, str) else None
    path, place = (*base, "compare", "detections"), checks.place(base)
    seen: dict[str, str] = {}
    for key, name in (("boxes", boxes), ("scores", scores), ("labels", labels)):
        if name is None:
            continue
        if name in seen:
            checks.report((*path, key), f"{place}: compare.detections.{key} names "
                          f"{quoted(name)}, as {seen[name]} does: boxes, scores and labels "
                          "are three different outputs")
        seen[name] = key
        if outputs and not any(Detections.names(name, o) for o in outputs):
            checks.report((*path, key), f"{place}: compare.detections.{key} names "
                          f"{quoted(name)}, which is not among its outputs "
                          f"({', '.join(outputs)}){did_you_mean(name, outputs)}")
    iou = number(found.get("iou"))
    return Detections(boxes, scores, labels, DEFAULT_IOU if iou is None else iou)
