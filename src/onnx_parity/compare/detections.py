"""Detections compared as sets: a detector's boxes, scores and labels, whose order depends on ties
and NMS, matched one to one by label and IoU (the reference's highest scores first) before their
values are held to the tolerance; boxes on one side only fail the boxes output, with their count
and best score. Pure numpy.

Boxes are [N, 4] (x1, y1, x2, y2), scores and labels [N]; or [images, N, 4] and [images, N], each
image matched on its own. A list of dicts (torchvision's output) is one output per image and key
(`output_0.boxes`, `output_1.boxes`, …): the spec's `boxes: boxes` names the last part, so each
image's boxes go with that image's scores and labels.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from onnx_parity.errors import CompareError
from onnx_parity.frozen import frozen
from onnx_parity.results import Matching, OutputComparison, Tolerance
from onnx_parity.spec.model import Detections

Array = np.ndarray[Any, Any]
Pairs = Sequence[tuple[Array, Array]]
Compare = Callable[[str, Pairs, Tolerance], OutputComparison]

__all__ = ["Group", "aligned", "compare_sets", "groups", "iou_matrix", "match"]


@frozen
class Group:
    """One image's (or one batch's) detections: the positions of its boxes, scores and labels
    among the model's outputs."""

    boxes: int
    scores: int
    labels: int | None

    def keys(self) -> list[int]:
        """The positions of its outputs: boxes, scores, then labels where there are any."""
        return [k for k in (self.boxes, self.scores, self.labels) if k is not None]


def groups(names: Sequence[str], detections: Detections) -> tuple[Group, ...]:
    """The outputs `detections` names, grouped by what precedes the name (`output_0` of
    `output_0.boxes`); a group without its scores or labels is the spec's error."""

    def by_prefix(key: str | None) -> dict[str, int]:
        if key is None:
            return {}
        return {name[: len(name) - len(key)].rstrip("."): k for k, name in enumerate(names)
                if Detections.names(key, name)}

    boxes, scores = by_prefix(detections.boxes), by_prefix(detections.scores)
    labels = by_prefix(detections.labels)
    if not boxes:
        raise CompareError(f"compare.detections names boxes '{detections.boxes}', which the "
                           f"model does not output (its outputs: {', '.join(names)})")
    found = []
    for prefix, at in boxes.items():
        missing = [f"{key} '{name}'" for key, name, known in (
            ("scores", detections.scores, scores), ("labels", detections.labels, labels))
            if name is not None and prefix not in known]
        if missing:
            raise CompareError(f"compare.detections: the boxes '{names[at]}' have no "
                               f"{' or '.join(missing)} beside them (its outputs: "
                               f"{', '.join(names)})")
        found.append(Group(at, scores[prefix], labels.get(prefix)))
    return tuple(found)


def iou_matrix(a: Array, b: Array) -> Array:
    """IoU of every box of `a` [N, 4] with every box of `b` [M, 4], in float64; two boxes of no
    area have IoU 1 when they are the same box, else 0."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    low = np.maximum(a[:, None, :2], b[None, :, :2])
    high = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(high - low, 0.0, None), axis=-1)

    def area(x: Array) -> Array:
        return np.prod(np.clip(x[:, 2:] - x[:, :2], 0.0, None), axis=-1)  # type: ignore[no-any-return]

    union = area(a)[:, None] + area(b)[None, :] - inter
    same = np.all(a[:, None, :] == b[None, :, :], axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ious: Array = np.where(union > 0, inter / np.where(union > 0, union, 1.0),
                               same.astype(float))
    return ious


def match(expected: tuple[Array, Array, Array | None], actual: tuple[Array, Array, Array | None],
          iou: float) -> tuple[list[tuple[int, int]], Array, Array]:
    """Greedy one-to-one matching of one image's boxes: the reference's boxes in order of their
    scores, highest first (ties in the reference's order), each taking the free box of the
    same label with the highest IoU, at least `iou`. Returns the (reference, actual) index
    pairs and the indices left on each side."""
    e_boxes, e_scores, e_labels = expected
    a_boxes, _, a_labels = actual
    ious = iou_matrix(e_boxes, a_boxes)
    allowed = ious >= iou  # NaN never matches
    if e_labels is not None and a_labels is not None:
        allowed &= np.asarray(e_labels)[:, None] == np.asarray(a_labels)[None, :]
    free = np.ones(len(a_boxes), dtype=bool)
    pairs = []
    for i in np.argsort(-np.asarray(e_scores, dtype=np.float64), kind="stable"):
        candidates = np.flatnonzero(allowed[i] & free)
        if candidates.size:
            j = int(candidates[np.argmax(ious[i, candidates])])
            free[j] = False
            pairs.append((int(i), j))
    taken = np.zeros(len(e_boxes), dtype=bool)
    taken[[i for i, _ in pairs]] = True
    return sorted(pairs), np.flatnonzero(~taken), np.flatnonzero(free)


def compare_sets(names: Sequence[str], detections: Detections,
                 expected: Sequence[Sequence[Any]], actual: Sequence[Sequence[Any]],
                 tolerance_for: Callable[[str], Tolerance], compare: Compare,
                 reference: str = "the reference") -> dict[int, OutputComparison]:
    """The verdicts of every output `detections` names, by its position among `names`:
    `compare` judges the matched boxes, scores and labels as tensors (in the reference's order,
    so a worst index points into the reference's own output); unmatched boxes fail the boxes
    output (kind "unmatched")."""
    judged: dict[int, OutputComparison] = {}
    for group in groups(names, detections):
        judged.update(_compare_group(group, names, detections.iou, expected, actual,
                                     tolerance_for, compare, reference))
    return judged


def _compare_group(group: Group, names: Sequence[str], iou: float,
                   expected: Sequence[Sequence[Any]], actual: Sequence[Sequence[Any]],
                   tolerance_for: Callable[[str], Tolerance], compare: Compare,
                   reference: str) -> dict[int, OutputComparison]:
    keys = group.keys()
    matched: dict[int, list[tuple[Array, Array]]] = {k: [] for k in keys}
    where: list[list[tuple[int, ...]]] = []  # per sample: each matched row's reference index
    only_e: list[float] = []
    only_a: list[float] = []
    for e_sample, a_sample in zip(expected, actual, strict=True):
        e = _layout([e_sample[k] for k in keys], names, keys, "the reference")
        a = _layout([a_sample[k] for k in keys], names, keys, "ONNX Runtime")
        batched = np.ndim(e_sample[group.boxes]) == 3
        if e[0].shape[:-2] != a[0].shape[:-2]:
            raise CompareError(f"compare.detections: '{names[group.boxes]}' holds "
                               f"{a[0].shape[0]} images in ONNX Runtime's output and "
                               f"{e[0].shape[0]} in the reference")
        rows: list[tuple[int, ...]] = []
        picked_e: dict[int, list[Array]] = {k: [] for k in keys}
        picked_a: dict[int, list[Array]] = {k: [] for k in keys}
        for image in np.ndindex(*e[0].shape[:-2]):
            e_img, a_img = [x[image] for x in e], [x[image] for x in a]
            labels = group.labels is not None
            pairs, left_e, left_a = match(
                (e_img[0], e_img[1], e_img[2] if labels else None),
                (a_img[0], a_img[1], a_img[2] if labels else None), iou)
            rows += [(*image, i) if batched else (i,) for i, _ in pairs]
            for n, k in enumerate(keys):
                picked_e[k].append(e_img[n][[i for i, _ in pairs]])
                picked_a[k].append(a_img[n][[j for _, j in pairs]])
            only_e += [float(s) for s in np.asarray(e_img[1])[left_e]]
            only_a += [float(s) for s in np.asarray(a_img[1])[left_a]]
        where.append(rows)
        for k in keys:
            matched[k].append((np.concatenate(picked_e[k]), np.concatenate(picked_a[k])))
    matching = Matching(iou=iou, matched=sum(len(rows) for rows in where),
                        only_expected=len(only_e), only_actual=len(only_a),
                        best_expected=_best(only_e), best_actual=_best(only_a),
                        reference=reference)
    results = {}
    for k in keys:
        result = compare(names[k], matched[k], tolerance_for(names[k]))
        result = dataclasses.replace(
            result, matching=matching, worst_index=_in_reference(result.worst_index, where),
            expected_shape=np.shape(expected[0][k]), actual_shape=np.shape(actual[0][k]))
        if k == group.boxes and (only_e or only_a):
            result = dataclasses.replace(result, passed=False, powerless=False, kind="unmatched")
        elif k == group.boxes and not matching.matched and result.passed:
            # Nothing found on either side in any sample: a pass would have checked nothing.
            result = dataclasses.replace(result, passed=False, powerless=True, kind="empty")
        results[k] = result
    return results


def aligned(names: Sequence[str], detections: Detections, expected: Sequence[Any],
            actual: Sequence[Any]) -> list[Any]:
    """One sample's reference outputs with each set of detections put in the actual's order
    (each actual box across from the reference box it matched; boxes matched with neither
    across from each other, in order), so that a tensor-by-tensor comparison (localization)
    sees how far each box moved, not that the sets were listed in another order. A set whose
    count differs between the two sides stays as it is."""
    out = list(expected)
    try:
        found = groups(names, detections)
    except CompareError:
        return out
    for group in found:
        keys = group.keys()
        e = [np.asarray(expected[k]) for k in keys]
        a = [np.asarray(actual[k]) for k in keys]
        if any(x.shape != y.shape for x, y in zip(e, a, strict=True)):
            continue
        try:
            e3 = _layout(e, names, keys, "the reference")
            a3 = _layout(a, names, keys, "ONNX Runtime")
        except CompareError:
            continue
        moved = [x.copy() for x in e3]
        for image in np.ndindex(*e3[0].shape[:-2]):
            labels = group.labels is not None
            pairs, left_e, left_a = match(
                (e3[0][image], e3[1][image], e3[2][image] if labels else None),
                (a3[0][image], a3[1][image], a3[2][image] if labels else None), detections.iou)
            order = np.empty(len(a3[0][image]), dtype=np.int64)
            order[[j for _, j in pairs]] = [i for i, _ in pairs]
            order[left_a] = left_e
            for n in range(len(keys)):
                moved[n][image] = e3[n][image][order]
        for n, k in enumerate(keys):
            out[k] = moved[n].reshape(e[n].shape)
    return out


def _layout(arrays: list[Any], names: Sequence[str], keys: Sequence[int],
            side: str) -> list[Array]:
    """Boxes [..., N, 4] with scores and labels [..., N]: as they are, or a CompareError that
    says which shape does not fit."""
    found = [np.asarray(x) for x in arrays]
    boxes = found[0]
    fits = boxes.ndim in (2, 3) and boxes.shape[-1] == 4 and all(
        x.shape == boxes.shape[:-1] for x in found[1:])
    if not fits:
        shapes = ", ".join(f"'{names[k]}' {x.shape}" for k, x in zip(keys, found, strict=True))
        raise CompareError(f"compare.detections: {side} gives {shapes}; boxes must be [N, 4] "
                           "or [images, N, 4] and scores and labels [N] or [images, N]")
    if boxes.ndim == 2:
        return [x[None] for x in found]  # one image
    return found


def _in_reference(index: tuple[int, ...] | None,
                  where: Sequence[Sequence[tuple[int, ...]]]) -> tuple[int, ...] | None:
    """A worst index over the matched rows, (sample, row, …), as the reference's own index:
    (sample, box, …), or (sample, image, box, …) for batched boxes."""
    if index is None or len(index) < 2:
        return index
    return (index[0], *where[index[0]][index[1]], *index[2:])


def _best(scores: Sequence[float]) -> float | None:
    finite = [s for s in scores if np.isfinite(s)]
    return max(finite) if finite else (scores[0] if scores else None)
