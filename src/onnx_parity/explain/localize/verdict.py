"""The verdict: the first tensor out of tolerance whose inputs are within it, and its words."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from onnx_parity.compare.sentences import error_brief, error_phrase
from onnx_parity.explain.localize.graph import Array, GraphInfo, GraphNode
from onnx_parity.explain.localize.tensors import TensorCheck, check_tensor
from onnx_parity.explain.localize.ties import (
    SELECTION_OPS,
    TiedPick,
    Ties,
    find_amplifier,
    find_selection,
)
from onnx_parity.explain.localize.torchref import TorchReference
from onnx_parity.findings import DriftRecord, PathStep
from onnx_parity.frozen import frozen
from onnx_parity.results import Tolerance
from onnx_parity.wording import fmt_measured

PATH_LIMIT = 64  # entries kept in divergence["path"]; reports show fewer
Verdict = Literal["origin", "selection", "gradual", "none", "vanished", "no-reference",
                  "unlocalized"]


# -- the verdict ---------------------------------------------------------------------------------


@frozen
class Divergence:
    """Where the drift starts, or why that cannot be said."""

    verdict: Verdict
    summary: str  # the verdict in full, with its numbers
    headline: str  # the verdict in a few words, for one-line reports
    reference: str = ""  # "PyTorch", "the CPU provider", ...
    sample: int | None = None
    origin: TensorCheck | None = None  # the first tensor out of tolerance (also when gradual)
    segment: tuple[GraphNode, ...] = ()  # the nodes between its compared inputs and it
    frontier: tuple[str, ...] = ()  # those inputs: compared tensors and graph inputs
    path: tuple[TensorCheck, ...] = ()
    compared: int = 0
    module: str | None = None
    module_type: str | None = None
    independent: int = 0  # other tensors that drift while their own inputs are within tolerance
    selection: GraphNode | None = None  # the op that picked among tied scores ("selection")

    def as_record(self) -> DriftRecord:
        """The case's record of it (results.py), which the reports read."""
        named = self.verdict in ("origin", "selection") and self.origin is not None
        origin = self.origin if named else None
        node = self.selection or (origin.node if origin is not None else None)
        return DriftRecord(
            verdict=self.verdict, headline=self.headline, summary=self.summary,
            reference=self.reference, sample=self.sample, compared=self.compared,
            node=node.label if node is not None else None,
            op_type=node.op_type if node is not None else None,
            module=self.module if named else None,
            max_abs=_max_abs(origin) if origin is not None else None,
            path=tuple(_step(check) for check in self.path),
            tensor=origin.tensor if origin is not None else None,
            module_type=self.module_type if origin is not None else None,
            other_origins=self.independent if origin is not None else 0,
            segment=tuple(n.label for n in self.segment)
            if origin is not None and len(self.segment) > 1 else (),
        )


def unlocalized(reason: str) -> DriftRecord:
    """The record when localization itself failed: the case keeps its verdict."""
    return DriftRecord(verdict="unlocalized", headline=f"could not localize the drift: {reason}",
                       summary=f"could not localize the drift: {reason}")


def _max_abs(check: TensorCheck) -> float:
    return check.comparison.max_abs if check.comparison.required_atol is not None else math.inf


def _step(check: TensorCheck) -> PathStep:
    node = check.node
    return PathStep(tensor=check.tensor, node=node.label if node is not None else None,
                    op_type=node.op_type if node is not None else None,
                    module=node.module if node is not None else None,
                    max_abs=_max_abs(check), within=check.passed)


def find_origin(
    graph: GraphInfo,
    actual: Mapping[str, Array],
    reference: Mapping[str, Array],
    tolerance_for: Callable[[str], Tolerance],
    *,
    reference_name: str,
    case_failed: bool = True,
    sample: int | None = None,
    matched: TorchReference | None = None,
    sets: bool = False,
) -> Divergence:
    """The first tensor out of tolerance whose compared inputs are within it; its summary
    ends with what of PyTorch's was left uncompared, where anything was.

    `reference` holds what is known of the tensors (a subset, for PyTorch); `matched`, against
    PyTorch, names the modules: of tensors matched by value where the graph has no scopes, the
    module paths' class names ("" for the top-level class), and which call of a module
    called several times. `sets`: the outputs are compared as sets already (compare:
    detections), so a selection's advice does not suggest it.
    """
    found = _judged(graph, actual, reference, tolerance_for, reference_name, case_failed,
                    sample, matched, sets)
    left_out = matched.left_out() if matched is not None else ""
    return dataclasses.replace(found, summary=f"{found.summary}; {left_out}") if left_out \
        else found


def _judged(graph: GraphInfo, actual: Mapping[str, Array], reference: Mapping[str, Array],
            tolerance_for: Callable[[str], Tolerance], reference_name: str, case_failed: bool,
            sample: int | None, matched: TorchReference | None, sets: bool) -> Divergence:
    """find_origin's verdict, before what PyTorch left uncompared is said."""
    checks: dict[str, TensorCheck] = {}
    for tensor, expected in reference.items():
        if tensor in actual and tensor not in graph.inputs and (
                tensor in graph.dynamic or tensor in graph.outputs):
            checks[tensor] = check_tensor(tensor, expected, actual[tensor],
                                          tolerance_for(tensor), graph.node_of(tensor))
    failing = [o for o in graph.outputs if o in checks and not checks[o].passed]
    if not failing:
        if case_failed:
            return Divergence("vanished", _vanished_text(reference_name),
                              "the drift vanishes with the intermediate tensors kept: a fused"
                              " kernel?", reference=reference_name, sample=sample,
                              compared=len(checks))
        off = sorted((c for c in checks.values() if not c.passed),
                     key=lambda c: graph.position(c.tensor))
        said = (f"all {len(checks)} tensors compared with {reference_name} are within tolerance"
                if not off else  # the outputs pass: no node is named, but none is hidden
                f"the outputs are within tolerance of {reference_name}, {len(off)} of the"
                f" {len(checks)} tensors compared {'is' if len(off) == 1 else 'are'} not,"
                f" first '{off[0].tensor}' of {_node_text(off[0].node, off[0].tensor)}"
                f" ({error_brief(off[0].comparison)}): a difference the outputs do not show")
        return Divergence("none", said, "no drift in the outputs" if off else
                          "no drift in the intermediate tensors", reference=reference_name,
                          sample=sample, compared=len(checks))
    upstream = graph.ancestors(failing)
    ordered = sorted((c for t, c in checks.items() if t in upstream),
                     key=lambda c: graph.position(c.tensor))
    origin = next(c for c in ordered if not c.passed)
    segment, frontier = _segment(graph, origin.tensor, checks)
    others = [c for c in ordered if not c.passed and c is not origin
              and all(checks[t].passed for t in _segment(graph, c.tensor, checks)[1]
                      if t in checks)]
    below = graph.descendants(origin.tensor)
    goal = max((o for o in failing if o in below), key=lambda o: checks[o].severity,
               default=failing[0])
    chain = _chain(graph, origin.tensor, goal, checks)
    inputs = sorted((checks[t] for t in frontier if t in checks),
                    key=lambda c: graph.position(c.tensor))[-2:]
    path = (*inputs, *(checks[t] for t in chain))
    if len(path) > PATH_LIMIT:
        path = (*path[: PATH_LIMIT - 8], *path[-8:])
    module, module_type = _origin_module(origin, segment, matched)
    if matched is not None and origin.tensor in matched.calls and module_type \
            and matched.modules.get(origin.tensor) == module:
        call, calls = matched.calls[origin.tensor]
        module_type = f"{module_type}, call {call + 1} of {calls}"
    ties: dict[int, Ties | None] = {}  # per selection node: its ties are counted once

    def selection_of(check: TensorCheck, nodes: Sequence[GraphNode]) -> TiedPick | None:
        found = find_selection(graph, check, nodes, checks, actual, tolerance_for, ties)
        return dataclasses.replace(found, sets=sets) if found is not None else None

    selection = selection_of(origin, segment)
    amplifier = None if selection is not None else find_amplifier(
        graph, origin, checks[goal], checks, actual)
    if amplifier is not None:
        # named by the first tensor its picks make different: itself where compared
        picks = amplifier.node.outputs[SELECTION_OPS[amplifier.node.op_type][1]]
        below = graph.descendants(picks)
        base = Divergence("selection", "", "", reference=reference_name, sample=sample,
                          origin=checks.get(picks, checks[goal]), path=path,
                          compared=len(checks))
        found = _selected(base, dataclasses.replace(amplifier, sets=sets), checks[goal],
                          [c for c in others if not c.rounding and c.tensor not in below], 0,
                          matched)
        return found if case_failed else _all_kept(found)
    if selection is not None:
        picked = [c for c in others
                  if selection_of(c, _segment(graph, c.tensor, checks)[0]) is not None]
        base = Divergence("selection", "", "", reference=reference_name, sample=sample,
                          origin=origin, path=path, compared=len(checks))
        found = _selected(base, selection, checks[goal], [c for c in others if c not in picked],
                          len(picked), matched)
        return found if case_failed else _all_kept(found)
    rounding = origin.rounding
    describe = _gradual_text if rounding else _origin_text
    where = module_text(module, module_type, _root_type(matched))
    summary = describe(origin, segment, checks[goal], reference_name, where)
    before = (f" or the {len(segment) - 1} node{'s' * (len(segment) > 2)} before it"
              if len(segment) > 1 else "")
    headline = (f"no single origin: rounding grows gradually from '{origin.tensor}'{where}"
                if rounding else
                f"drift starts at {_node_text(origin.node, origin.tensor)}{where}{before}")
    if others and not rounding:  # a second fault on another branch must not go unsaid
        other = others[0]
        named = f"'{other.tensor}' of {_node_text(other.node, other.tensor)}"
        summary += ("; 1 more tensor drifts while its inputs are within tolerance: " + named
                    if len(others) == 1 else
                    f"; {len(others)} more tensors drift while their inputs are within"
                    f" tolerance, first {named}")
    found = Divergence(
        "gradual" if rounding else "origin", summary, headline,
        reference=reference_name, sample=sample, origin=origin, segment=segment,
        frontier=frontier, path=path, compared=len(checks), module=module,
        module_type=module_type, independent=len(others),
    )
    return found if case_failed else _all_kept(found)


def _all_kept(found: Divergence) -> Divergence:
    """The verdict on a case whose outputs passed: kept tensors are stored in their own type,
    and a normal run may not be, so it says in what run the tensors drift."""
    return dataclasses.replace(
        found, summary=f"the outputs pass, but with every intermediate tensor kept: "
                       f"{found.summary}",
        headline=f"with every intermediate tensor kept, {found.headline}")


def _selected(base: Divergence, selection: TiedPick, goal: TensorCheck,
              others: Sequence[TensorCheck], picked: int,
              matched: TorchReference | None) -> Divergence:
    """The verdict when the first difference is a selection among tied scores: it names the op
    that picked, and never the tolerance, which no setting of would make the two agree. `base`
    holds the figures any verdict has (reference, sample, origin, path)."""
    assert base.origin is not None
    module, module_type = _origin_module(base.origin, (selection.node,), matched)
    where = module_text(module, module_type, _root_type(matched))
    summary = selection.summary(where, base.origin, goal, base.reference)
    if picked:
        summary += ("; 1 more tensor differs only by a selection among tied scores"
                    if picked == 1 else
                    f"; {picked} more tensors differ only by selections among tied scores")
    if others:  # a fault of another kind must not hide behind the selection
        first = f"'{others[0].tensor}' of {_node_text(others[0].node, others[0].tensor)}"
        summary += ("; 1 more tensor drifts while its inputs are within tolerance: " + first
                    if len(others) == 1 else f"; {len(others)} more tensors drift while their"
                    f" inputs are within tolerance, first {first}")
    headline = selection.headline(where)
    return dataclasses.replace(base, summary=summary, headline=headline,
                               segment=(selection.node,), module=module,
                               module_type=module_type, independent=len(others),
                               selection=selection.node)


def _segment(graph: GraphInfo, tensor: str,
             checks: Mapping[str, TensorCheck]) -> tuple[tuple[GraphNode, ...], tuple[str, ...]]:
    """The nodes from `tensor` back to the nearest compared tensors or graph inputs."""
    nodes: dict[int, GraphNode] = {}
    frontier: dict[str, None] = {}
    stack = [tensor]
    while stack:
        node = graph.node_of(stack.pop())
        if node is None or node.order in nodes:
            continue
        nodes[node.order] = node
        for name in node.inputs:
            if name not in graph.dynamic:
                continue  # an initializer or a constant: the same on both sides
            if name in checks or name in graph.inputs:
                frontier[name] = None
            else:
                stack.append(name)
    return tuple(nodes[i] for i in sorted(nodes)), tuple(frontier)


def _chain(graph: GraphInfo, start: str, goal: str,
           checks: Mapping[str, TensorCheck]) -> list[str]:
    """Compared tensors from `start` to `goal`, following the worst one at each step."""
    toward = graph.ancestors([goal])
    chain = [start]
    while chain[-1] != goal:
        following = _next_checked(graph, chain[-1], checks, toward)
        if not following:
            break
        chain.append(max(following, key=lambda t: (checks[t].severity, graph.position(t))))
    return chain


def _next_checked(graph: GraphInfo, tensor: str, checks: Mapping[str, TensorCheck],
                  toward: set[str]) -> list[str]:
    found: dict[str, None] = {}
    seen = {tensor}
    stack = [tensor]
    while stack:
        for index in graph.consumers.get(stack.pop(), ()):
            for out in graph.nodes[index].outputs:
                if out in seen or out not in toward:
                    continue
                seen.add(out)
                if out in checks:
                    found[out] = None
                else:
                    stack.append(out)
    return list(found)


def _origin_module(origin: TensorCheck, segment: Sequence[GraphNode],
                   matched: TorchReference | None) -> tuple[str | None, str | None]:
    """The module the segment's nodes share (the deepest common one), else the value match's."""
    modules = matched.modules if matched is not None else {}
    module_types = matched.module_types if matched is not None else {}
    known = [n.module for n in segment if n.module is not None]
    if known:
        common = known[0].split(".") if known[0] else []
        for path in known[1:]:
            parts = path.split(".") if path else []
            size = 0
            while size < min(len(common), len(parts)) and common[size] == parts[size]:
                size += 1
            common = common[:size]
        module: str | None = ".".join(common)
    else:
        module = modules.get(origin.tensor)
    if module is None:
        return None, None
    typed = [n.module_type for n in segment if n.module == module and n.module_type]
    return module, module_types.get(module) or (typed[0] if typed else None)


def _root_type(matched: TorchReference | None) -> str | None:
    """The top-level module's class name, where PyTorch's modules were matched."""
    return matched.module_types.get("") if matched is not None else None


# -- the words -------------------------------------------------------------------------------


def module_text(module: str | None, module_type: str | None,
                root_type: str | None = None) -> str:
    """" in module encoder.layers.1.attn (Linear)", " in the top-level module (Net)" or ""."""
    if module is None:
        return ""
    if module == "":
        kind = module_type or root_type
        return " in the top-level module" + (f" ({kind})" if kind else "")
    return f" in module {module}" + (f" ({module_type})" if module_type else "")


def _node_text(node: GraphNode | None, tensor: str) -> str:
    return f"graph input '{tensor}'" if node is None else f"{node.op_type} '{node.label}'"


def _origin_text(origin: TensorCheck, segment: Sequence[GraphNode], goal: TensorCheck,
                 reference: str, where: str) -> str:
    """`where`: module_text's words for the origin's module."""
    error = error_phrase(origin.comparison)
    if len(segment) <= 1:
        text = (f"drift starts at {_node_text(origin.node, origin.tensor)}{where}: its output is"
                f" off from {reference} by {error}, while its inputs are within tolerance")
    else:
        ops = ", ".join(n.op_type for n in segment[:8]) + (", …" if len(segment) > 8 else "")
        lowered = {n.torch_op for n in segment}
        if len(lowered) == 1 and None not in lowered:  # the dynamo exporter says which aten op
            ops = f"the lowering of {lowered.pop()}: {ops}"
        text = (f"drift starts at {_node_text(origin.node, origin.tensor)}{where}, or in the"
                f" {len(segment) - 1} node{'s' * (len(segment) > 2)} before it that {reference}"
                " has no tensor for"
                f" ({ops}): its output is off by {error}, while their inputs are within"
                " tolerance")
    if goal.tensor != origin.tensor:
        text += f"; it grows to {error_brief(goal.comparison)} at '{goal.tensor}'"
    return text


def _gradual_text(origin: TensorCheck, segment: Sequence[GraphNode], goal: TensorCheck,
                  reference: str, where: str) -> str:
    return (f"no single origin: the first tensor out of tolerance, '{origin.tensor}' of"
            f" {_node_text(origin.node, origin.tensor)}{where}, differs from {reference} by"
            f" {fmt_measured(origin.comparison.max_abs)}, within rounding of values up to"
            f" {fmt_measured(origin.scale)}, and the error grows gradually to"
            f" {error_brief(goal.comparison)} at '{goal.tensor}'; no node stands out: the"
            " tolerance is tighter than the arithmetic")


def _vanished_text(reference: str) -> str:
    return ("the drift did not reproduce with the intermediate tensors kept as outputs: every"
            f" output agrees with {reference} in that run. ONNX Runtime cannot fuse nodes whose"
            " outputs are kept, so a fused kernel (graph optimizations) is the likely origin")
