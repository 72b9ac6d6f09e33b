"""Selections: a first difference made by an op that picks elements (TopK, NonMaxSuppression,
ArgMax, ArgMin), or by what takes elements by its indices, among scores that agree.

Among equal scores the order is not specified: ONNX Runtime keeps the lower index, PyTorch's
kernels need not, so the indices, and everything gathered by them, differ while every score is
bit-identical (random-init detectors give every box the same score). That is no rounding and no
exporter bug, and no tolerance makes the two agree; the verdict says so instead.

A selection is named only when the values it picked from show it: exact ties among the scores
at the chosen positions (the k chosen and the next one) in the target's own tensors, ties
within the tolerance where the scores are known to agree with the reference, or ties within the
scores' own rounding where they are not known to.

A selection also amplifies: scores that differ by rounding alone (a detector's scores off by an
ulp, out of a tight tolerance) flip which of two near-equal ones it picks, and every box after it
differs by a whole box. Where the first difference is rounding and a selection between it and a
failing output picks from what it reached (find_amplifier), that selection is named, not the
rounding; a detector's outputs compared as sets (`compare: detections`) are immune to both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping, Sequence

import numpy as np

from onnx_parity.compare.sentences import error_brief
from onnx_parity.explain.localize.graph import Array, GraphInfo, GraphNode
from onnx_parity.explain.localize.tensors import ROUNDING_ULPS, TensorCheck
from onnx_parity.frozen import frozen
from onnx_parity.results import Tolerance
from onnx_parity.wording import fmt_measured

# op type -> (the inputs it picks by: scores, boxes; the output holding what it picked)
SELECTION_OPS: Mapping[str, tuple[tuple[int, ...], int]] = {
    "TopK": ((0,), 1), "ArgMax": ((0,), 0), "ArgMin": ((0,), 0),
    "NonMaxSuppression": ((0, 1), 0),
}
GATHER_OPS = frozenset({"Gather", "GatherElements", "GatherND"})
# Ops whose output holds only values of their data inputs (moved, repeated, cast): a tensor made
# by one from tensors that agree with the reference agrees too.
_MOVING_OPS = frozenset({"Identity", "Cast", "Reshape", "Squeeze", "Unsqueeze", "Flatten",
                         "Expand", "Transpose", "Slice", "Concat", "Split", "Tile"})
_DEPTH = 8  # moving ops followed back from a selection's inputs; deeper is not known to agree


@frozen
class Ties:
    """Equal scores among the chosen positions, counted per row (per selected box for
    NonMaxSuppression): `exact` bit-equal, `near` within the tolerance (exact ones included)."""

    exact: int
    near: int
    rows: int
    k: int = 1  # how many each row chose


@frozen
class TiedPick:
    """The op that picked among tied scores, and the op that took elements by its indices when
    that is what first differs."""

    node: GraphNode
    ties: Ties
    agree: bool  # its scores are known to agree with the reference (compared, or moved from)
    gather: GraphNode | None = None
    amplified: TensorCheck | None = None  # the rounding-level first difference it picked from
    width: str = "tolerance"  # what its near ties are within: "tolerance" or "rounding"
    sets: bool = False  # the outputs are compared as sets already (compare: detections)

    @property
    def tied(self) -> str:
        return "tied" if self.ties.exact else "near-tied"

    def headline(self, where: str) -> str:
        if self.amplified is not None:
            return (f"{_op(self.node)}{where} picked different elements from scores that differ"
                    " only by rounding: a selection amplifies the difference, not arithmetic")
        return (f"{_op(self.node)}{where} picked different elements among {self.tied} scores: a"
                " selection, not arithmetic")

    def summary(self, where: str, origin: TensorCheck, goal: TensorCheck, reference: str) -> str:
        taken = (f", which {_op(self.gather)} takes elements by," if self.gather is not None
                 else "")
        c = origin.comparison
        follows = f", and so does '{goal.tensor}'" if goal.tensor != origin.tensor else ""
        differs = (f"{c.mismatches} of {c.elements} elements" if c.required_atol is not None
                   and c.elements else error_brief(c))
        if self.amplified is not None:
            first = self.amplified
            ties = self._ties_text()
            return (f"{_op(self.node)}{where} picked different elements than {reference} from"
                    f" scores that differ only by rounding: the first difference, '{first.tensor}',"
                    f" is off by {fmt_measured(first.comparison.max_abs)}, within rounding of"
                    f" values up to {fmt_measured(first.scale)}, and it reaches the scores"
                    f" {_op(self.node)} picks from, where {ties}; so '{origin.tensor}'{taken}"
                    f" differs ({differs}){follows}. A selection amplifies the difference, not"
                    " arithmetic: rounding swaps two near-equal scores, and no tolerance"
                    f" makes the two sides pick alike; {self._advice()}")
        agree = (f"its scores agree with {reference} within tolerance" if self.agree else
                 f"{reference} has no value for its scores here")
        return (f"{_op(self.node)}{where} picked different elements than {reference} among"
                f" {self.tied} scores: {agree}, and {self._ties_text()}; so '{origin.tensor}'"
                f"{taken} differs ({differs}){follows}. A selection, not arithmetic: the order"
                " among equal scores is not specified, and no tolerance makes the two sides pick"
                f" alike; {self._advice('break the ties in the model')}")

    def _advice(self, *first: str) -> str:
        """What to do instead of a tolerance: compare a detector's outputs as sets, unless they
        are already, or leave them out."""
        options = [*first]
        if not self.sets:
            options.append("compare a detector's boxes, scores and labels as sets with compare:"
                           " {detections: {boxes: …, scores: …, labels: …}}, which matches"
                           " boxes by label and IoU instead of by position")
        options.append("leave the outputs that depend on the order out of the comparison"
                       " (ignore_outputs)")
        return ", ".join(options[:-1]) + f", or {options[-1]}" if len(options) > 1 else (
            options[0])

    def _ties_text(self) -> str:
        t = self.ties
        if self.node.op_type == "NonMaxSuppression":
            what = f"of the {t.rows} boxes it selected share their score with another box"
            return (f"{t.exact} {what} of their class" if t.exact else
                    f"no score is tied exactly, but {t.near} {what} within {self.width}")
        among = (f"their {t.k} largest scores and the next" if t.k > 1 else
                 "their largest score and the next")
        if self.node.op_type == "ArgMin" or (self.node.op_type == "TopK"
                                             and self.node.attribute("largest", 1) == 0):
            among = among.replace("largest", "smallest")
        if t.exact:
            return f"{t.exact} of its {t.rows} rows hold equal scores among {among}"
        return (f"no score is tied exactly, but {t.near} of its {t.rows} rows hold scores within"
                f" {self.width} of each other among {among}")


def _op(node: GraphNode | None) -> str:
    return "" if node is None else f"{node.op_type} '{node.label}'"


def find_selection(graph: GraphInfo, origin: TensorCheck, segment: Sequence[GraphNode],
                   checks: Mapping[str, TensorCheck], actual: Mapping[str, Array],
                   tolerance_for: Callable[[str], Tolerance],
                   cache: MutableMapping[int, Ties | None] | None = None) -> TiedPick | None:
    """The selection in the origin's segment whose picks reach the origin, when its scores
    show ties; None when there is none (the first difference is arithmetic, or a bug)."""
    inside = {node.order for node in segment}
    reached = _reached(graph, origin.tensor, inside)
    found = cache if cache is not None else {}
    for node in segment:
        if node.op_type not in SELECTION_OPS:
            continue
        scores, picked = SELECTION_OPS[node.op_type]
        if picked >= len(node.outputs) or node.outputs[picked] not in reached:
            continue  # its values reach the origin, not its picks
        agree = all(_agrees(graph, node.inputs[i], checks, _DEPTH) for i in scores
                    if i < len(node.inputs))
        if node.order not in found:
            found[node.order] = _ties(node, actual, tolerance_for(origin.tensor))
        ties, width = found[node.order], "tolerance"
        if ties is not None and not (ties.exact or (agree and ties.near)):
            # Scores not known to agree but within their own rounding of each other: as good
            # as tied, since the arithmetic before the op may round them either way.
            ties, width = _ties(node, actual, _rounding_of(actual.get(_scores(node)))), "rounding"
        if ties is None or not (ties.exact or ((width == "rounding" or agree) and ties.near)):
            continue
        below = graph.descendants(node.outputs[picked])
        taker = origin.node
        gather = (taker if taker is not None and taker.op_type in GATHER_OPS
                  and len(taker.inputs) > 1 and taker.inputs[1] in below else None)
        return TiedPick(node, ties, agree, gather, width=width)
    return None


def find_amplifier(graph: GraphInfo, first: TensorCheck, goal: TensorCheck,
                   checks: Mapping[str, TensorCheck], actual: Mapping[str, Array],
                   ) -> TiedPick | None:
    """The selection that turned a rounding-level first difference into a failing output: the
    first one, in graph order, whose scores the difference reaches, whose picks reach `goal`,
    whose scores come from compared tensors all within tolerance or within rounding, and whose
    chosen scores are within rounding of the next (so rounding can swap them). Its picks are
    known to differ where they are compared, else from `goal`, which is off by more than
    rounding. None where there is no such selection (the rounding just grows)."""
    if not first.rounding or goal.rounding:
        return None
    drifted = graph.descendants(first.tensor)
    toward = graph.ancestors([goal.tensor])
    for node in graph.nodes:
        if node.op_type not in SELECTION_OPS:
            continue
        scores, picked = SELECTION_OPS[node.op_type]
        if picked >= len(node.outputs) or node.outputs[picked] not in toward:
            continue
        picks = node.outputs[picked]
        inputs = [node.inputs[i] for i in scores if i < len(node.inputs)]
        if not any(t in drifted for t in inputs) or (picks in checks and checks[picks].passed):
            continue
        upstream = [checks[t] for t in graph.ancestors(inputs) if t in checks]
        if not all(c.passed or c.rounding for c in upstream):
            continue  # more than rounding reaches it: not the selection's doing
        ties = _ties(node, actual, _rounding_of(actual.get(_scores(node))))
        if ties is None or not ties.near:
            continue  # its choices stand apart by more than rounding can move them
        below = graph.descendants(picks)
        gather = next((n for n in graph.nodes if n.op_type in GATHER_OPS and len(n.inputs) > 1
                       and n.inputs[1] in below and n.outputs and n.outputs[0] in toward), None)
        return TiedPick(node, ties, True, gather, first, width="rounding")
    return None


def _scores(node: GraphNode) -> str:
    return node.inputs[1] if node.op_type == "NonMaxSuppression" else node.inputs[0]


def _rounding_of(scores: Array | None) -> Tolerance:
    """A tolerance as wide as the scores' own rounding (ROUNDING_ULPS of their largest)."""
    values = np.asarray(scores) if scores is not None else np.zeros(0, np.float32)
    if values.dtype.kind != "f" or not values.size:
        return Tolerance(atol=0.0, rtol=0.0)
    finite = np.abs(values[np.isfinite(values)].astype(np.float64))
    largest = float(finite.max()) if finite.size else 0.0
    return Tolerance(atol=ROUNDING_ULPS * float(np.finfo(values.dtype).eps) * largest, rtol=0.0)


def _reached(graph: GraphInfo, tensor: str, inside: set[int]) -> set[str]:
    """The tensors the segment's nodes compute `tensor` from, `tensor` included."""
    seen = {tensor}
    stack = [tensor]
    while stack:
        node = graph.node_of(stack.pop())
        if node is None or node.order not in inside:
            continue
        for name in node.inputs:
            if name not in seen:
                seen.add(name)
                stack.append(name)
    return seen


def _agrees(graph: GraphInfo, tensor: str, checks: Mapping[str, TensorCheck],
            depth: int) -> bool:
    """Known to agree with the reference: a constant, a graph input, a compared tensor within
    tolerance, or values moved by a few ops from such tensors."""
    if tensor not in graph.dynamic or tensor in graph.inputs:
        return True
    if tensor in checks:
        return checks[tensor].passed
    node = graph.node_of(tensor)
    if node is None or node.op_type not in _MOVING_OPS or depth <= 0:
        return False
    data = node.inputs if node.op_type == "Concat" else node.inputs[:1]
    return all(_agrees(graph, t, checks, depth - 1) for t in data)


def _ties(node: GraphNode, actual: Mapping[str, Array], tolerance: Tolerance) -> Ties | None:
    """Ties among the scores the target picked from, in its own tensors; None where they
    are not at hand (a constant) or not floating."""
    scores = actual.get(_scores(node)) if node.inputs else None
    picked = actual.get(node.outputs[SELECTION_OPS[node.op_type][1]])
    if scores is None or picked is None or np.asarray(scores).dtype.kind not in "fiu":
        return None
    values = np.asarray(scores).astype(np.float64)
    if node.op_type == "NonMaxSuppression":
        return _box_ties(values, np.asarray(picked), tolerance)
    if values.ndim == 0 or values.size == 0:
        return None
    axis = node.attribute("axis", -1 if node.op_type == "TopK" else 0) % values.ndim
    largest = node.op_type == "ArgMax" or (node.op_type == "TopK"
                                           and node.attribute("largest", 1) != 0)
    k = np.asarray(picked).shape[axis] if node.op_type == "TopK" else 1
    rows = np.moveaxis(values, axis, -1).reshape(-1, values.shape[axis])
    ordered = np.sort(rows, axis=-1)
    if largest:
        ordered = ordered[:, ::-1]
    top = ordered[:, : k + 1]  # the chosen and the first one left out
    if top.shape[1] < 2:
        return Ties(0, 0, len(rows), k)
    gaps = np.abs(np.diff(top, axis=-1))
    near = gaps <= tolerance.atol + tolerance.rtol * np.abs(top[:, 1:])
    return Ties(int((gaps == 0).any(axis=-1).sum()), int(near.any(axis=-1).sum()), len(rows), k)


def _box_ties(scores: Array, selected: Array, tolerance: Tolerance) -> Ties | None:
    """NonMaxSuppression: selected boxes whose score another box of their class shares."""
    if scores.ndim != 3 or selected.ndim != 2 or selected.shape[1] != 3:
        return None
    exact = near = 0
    for batch, kind, box in selected.astype(np.int64):
        row = scores[batch, kind]
        score = row[box]
        exact += int((row == score).sum() > 1)
        near += int((np.abs(row - score) <= tolerance.atol + tolerance.rtol * abs(score)).sum() > 1)
    return Ties(exact, near, len(selected))
