"""Where the drift starts: a case's intermediate tensors against a reference, in graph order.

One extra run per localized case: every intermediate tensor of the ONNX graph is marked as a
graph output and the target runs once more, on the sample where the worst output was worst.
The reference for those tensors depends on what differs:

- PyTorch against ONNX (an exporter bug, or a shipped file that no longer matches its source):
  the module's activations from one forward pass with forward hooks, matched to ONNX tensors
  through the scope each exporter leaves on its nodes (the dynamo exporter's
  `pkg.torch.onnx.name_scopes` metadata, the TorchScript exporter's `/encoder/layers.1/attn/MatMul`
  node names), and through shape and values where the graph carries no scopes at all.
- One ONNX Runtime target against another (CUDA against CPU): when the same graph on the CPU
  provider agrees with the case's reference, its tensors are the reference (a second run).

The verdict is the first compared tensor, in topological order, that is out of tolerance while
the compared tensors it is computed from are within it: the node that makes it, its op type and
the PyTorch module behind it. When that first difference is no bigger than the reference dtype's
own rounding, no node stands out (the error grows gradually) and the verdict says so instead.
"""

from __future__ import annotations

import ast
import heapq
import logging
import math
import re
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from onnx_parity.compare import compare_output
from onnx_parity.results import OutputComparison, Tolerance

if TYPE_CHECKING:
    from onnx_parity.plan import Case
    from onnx_parity.spec import TargetSpec

logger = logging.getLogger(__name__)

REFERENCE_PROVIDER = "CPUExecutionProvider"
# A first difference within this many ulps of the reference's largest value is rounding noise.
ROUNDING_ULPS = 64
PATH_LIMIT = 64  # entries kept in divergence["path"]; reports show fewer
Verdict = Literal["origin", "gradual", "none", "vanished", "no-reference", "unlocalized"]
Array = np.ndarray[Any, Any]
Records = list[tuple[str, list[Array]]]  # (module path, its tensors), call by call

_SCOPES_KEY = "pkg.torch.onnx.name_scopes"
_CLASSES_KEY = "pkg.torch.onnx.class_hierarchy"
_REPEAT = re.compile(r"@\d+$")  # the dynamo exporter's suffix for a module's second call


# -- the graph -------------------------------------------------------------------------------


@dataclass(frozen=True)
class GraphNode:
    """One node, with the PyTorch module its exporter says it came from (None: not known)."""

    order: int  # position in topological order
    name: str
    op_type: str
    inputs: tuple[str, ...]  # including names its subgraphs take from the outer graph
    outputs: tuple[str, ...]
    module: str | None = None  # dotted path; "" is the top-level module
    module_type: str | None = None
    torch_op: str | None = None  # the aten op the dynamo exporter lowered, when it says

    @property
    def label(self) -> str:
        return self.name or f"{self.op_type}#{self.order}"


@dataclass(frozen=True)
class GraphInfo:
    """The top-level graph in topological order (node order in a file need not be)."""

    nodes: tuple[GraphNode, ...]
    inputs: tuple[str, ...]  # graph inputs that are not initializers
    outputs: tuple[str, ...]
    dynamic: frozenset[str]  # tensors computed from the graph inputs
    producer: Mapping[str, int] = field(repr=False)
    consumers: Mapping[str, tuple[int, ...]] = field(repr=False)

    def node_of(self, tensor: str) -> GraphNode | None:
        index = self.producer.get(tensor)
        return None if index is None else self.nodes[index]

    def position(self, tensor: str) -> tuple[int, int]:
        """Sort key in topological order; graph inputs come first."""
        node = self.node_of(tensor)
        return (-1, 0) if node is None else (node.order, node.outputs.index(tensor))

    def ancestors(self, tensors: Iterable[str]) -> set[str]:
        seen: set[str] = set()
        stack = list(tensors)
        while stack:
            tensor = stack.pop()
            if tensor in seen:
                continue
            seen.add(tensor)
            node = self.node_of(tensor)
            if node is not None:
                stack.extend(t for t in node.inputs if t in self.dynamic)
        return seen

    def descendants(self, tensor: str) -> set[str]:
        seen = {tensor}
        stack = [tensor]
        while stack:
            for index in self.consumers.get(stack.pop(), ()):
                for out in self.nodes[index].outputs:
                    if out not in seen:
                        seen.add(out)
                        stack.append(out)
        return seen


def read_graph(model: Any) -> GraphInfo:
    """GraphInfo of an onnx.ModelProto (its external data need not be loaded)."""
    graph = model.graph
    constants = {t.name for t in graph.initializer}
    constants |= {t.values.name for t in graph.sparse_initializer}
    inputs = tuple(i.name for i in graph.input if i.name not in constants)
    raw = list(graph.node)
    needs = [_node_inputs(node) for node in raw]
    made = {out: index for index, node in enumerate(raw) for out in node.output if out}
    dynamic = set(inputs)
    nodes: list[GraphNode] = []
    for position, index in enumerate(_topological(needs, made)):
        node = raw[index]
        outputs = tuple(o for o in node.output if o)
        if any(t in dynamic for t in needs[index]):
            dynamic.update(outputs)
        module, module_type, torch_op = _scope(node)
        nodes.append(GraphNode(position, node.name, node.op_type, needs[index], outputs,
                               module, module_type, torch_op))
    producer = {out: node.order for node in nodes for out in node.outputs}
    consumers: dict[str, list[int]] = {}
    for node in nodes:
        for tensor in dict.fromkeys(node.inputs):
            consumers.setdefault(tensor, []).append(node.order)
    return GraphInfo(
        nodes=tuple(nodes), inputs=inputs, outputs=tuple(o.name for o in graph.output),
        dynamic=frozenset(dynamic), producer=producer,
        consumers={k: tuple(v) for k, v in consumers.items()},
    )


def _node_inputs(node: Any) -> tuple[str, ...]:
    """Explicit inputs, and the outer names an If/Loop/Scan body reads."""
    names = [i for i in node.input if i]
    for attribute in node.attribute:
        for body in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
            names.extend(_outer_names(body))
    return tuple(dict.fromkeys(names))


def _outer_names(body: Any) -> list[str]:
    local = {i.name for i in body.input} | {t.name for t in body.initializer}
    local |= {out for node in body.node for out in node.output}
    used = [name for node in body.node for name in _node_inputs(node)]
    return [name for name in used if name not in local]


def _topological(needs: Sequence[tuple[str, ...]], made: Mapping[str, int]) -> list[int]:
    """Kahn's algorithm, keeping the file's order among nodes that are ready together."""
    deps = [{made[t] for t in names if t in made and made[t] != i} for i, names in enumerate(needs)]
    users: list[list[int]] = [[] for _ in needs]
    for index, found in enumerate(deps):
        for dep in found:
            users[dep].append(index)
    waiting = [len(found) for found in deps]
    ready = [i for i, n in enumerate(waiting) if n == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        index = heapq.heappop(ready)
        order.append(index)
        for user in users[index]:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, user)
    placed = set(order)
    return order + [i for i in range(len(needs)) if i not in placed]  # a cycle: keep file order


def _scope(node: Any) -> tuple[str | None, str | None, str | None]:
    """(module path, module class, aten op) from what the exporter left on the node."""
    meta = {p.key: p.value for p in node.metadata_props}
    scopes = _literal_list(meta.get(_SCOPES_KEY))
    if scopes is not None:
        # [..., "encoder.layers.1", "encoder.layers.1.attn", "<fx node name>"]: qualified names
        module = _REPEAT.sub("", scopes[-2]) if len(scopes) >= 2 else ""
        classes = _literal_list(meta.get(_CLASSES_KEY)) or []
        module_type = classes[-2].rsplit(".", 1)[-1] if len(classes) >= 2 else None
        return module, module_type, (classes[-1] if classes else None)
    if node.name.startswith("/"):
        return torchscript_module(node.name.split("/")[1:-1]), None, None
    return None, None, None


def _literal_list(text: str | None) -> list[str] | None:
    if not text:
        return None
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return None
    return [str(v) for v in value] if isinstance(value, list) else None


def torchscript_module(parts: Sequence[str]) -> str:
    """The module path in a TorchScript node name's scopes.

    `/encoder/layers.0/mlp/mlp.0/Gemm` has the scopes encoder, layers.0, mlp, mlp.0: a child
    of a called container is written with the container's name in front, so `mlp.0` after
    `mlp` is `mlp`'s child 0, while `layers.0` after `encoder` is encoder's `layers.0`.
    """
    path = ""
    for part in parts:
        head, _, rest = part.partition(".")
        if rest and path and head == path.rsplit(".", 1)[-1]:
            path = f"{path}.{rest}"
        else:
            path = f"{path}.{part}" if path else part
    return path


# -- one tensor against its reference ----------------------------------------------------------


@dataclass(frozen=True)
class TensorCheck:
    """One compared tensor: the node that makes it (None for a graph input) and the numbers."""

    tensor: str
    node: GraphNode | None
    comparison: OutputComparison
    scale: float  # the reference's largest finite magnitude
    eps: float | None  # the reference dtype's machine epsilon; None for exact types

    @property
    def passed(self) -> bool:
        return self.comparison.passed

    @property
    def severity(self) -> float:
        """Larger is worse; NaN/Inf placement, shape or dtype differences rank above any number."""
        c = self.comparison
        return math.inf if c.required_atol is None or math.isnan(c.max_abs) else c.max_abs


def check_tensor(name: str, expected: Array, actual: Array, tolerance: Tolerance,
                 node: GraphNode | None = None) -> TensorCheck:
    """compare_output on one tensor; float types of different widths meet in float64 (an fp16
    graph against float32 PyTorch is a difference of values, not a dtype error)."""
    e, a = np.asarray(expected), np.asarray(actual)
    eps = _eps(e.dtype)
    if e.dtype != a.dtype and _floating(e.dtype) and _floating(a.dtype):
        e, a = e.astype(np.float64), a.astype(np.float64)
    elif e.dtype != a.dtype and e.dtype.kind in "iu" and a.dtype.kind in "iu":
        e, a = e.astype(np.int64), a.astype(np.int64)
    comparison = compare_output(name, [(e, a)], tolerance)
    scale = 0.0
    if _floating(e.dtype) and e.size:
        finite = np.abs(e.astype(np.float64))
        finite = finite[np.isfinite(finite)]
        scale = float(finite.max()) if finite.size else 0.0
    return TensorCheck(name, node, comparison, scale, eps)


def _floating(dtype: np.dtype[Any]) -> bool:
    return dtype.kind == "f" or (dtype.kind == "V" and dtype.names is None
                                 and np.can_cast(dtype, np.float64))


def _eps(dtype: np.dtype[Any]) -> float | None:
    if dtype.kind == "f":
        return float(np.finfo(dtype).eps)
    if _floating(dtype):  # bfloat16 and the other ml_dtypes floats
        import ml_dtypes

        return float(ml_dtypes.finfo(dtype).eps)  # type: ignore[no-untyped-call]  # untyped
    return None


def excess(expected: Array, actual: Array, tolerance: Tolerance) -> float:
    """max |a - e| / (atol + rtol·|e|): above 1 is out of tolerance; NaN/Inf mismatches are inf."""
    e = np.asarray(expected)
    a = np.asarray(actual)
    if e.shape != a.shape:
        return math.inf
    if e.size == 0:
        return 0.0
    try:
        e64, a64 = e.astype(np.float64), a.astype(np.float64)
    except (TypeError, ValueError):
        return 0.0 if np.array_equal(e, a) else math.inf
    same = (e64 == a64) | (np.isnan(e64) & np.isnan(a64))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        allowance = tolerance.atol + tolerance.rtol * np.abs(e64)
        ratio = np.where(same, 0.0, np.abs(a64 - e64) / allowance)
    ratio = np.where(np.isnan(ratio), math.inf, ratio)
    return float(ratio.max())


# -- the verdict ---------------------------------------------------------------------------------


@dataclass(frozen=True)
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

    def as_details(self) -> dict[str, Any]:
        """The JSON form, `details["divergence"]` of the case."""
        named = self.verdict == "origin" and self.origin is not None
        node = self.origin.node if named and self.origin is not None else None
        details: dict[str, Any] = {
            "node": node.label if node is not None else None,
            "op_type": node.op_type if node is not None else None,
            "module": self.module if named else None,
            "max_abs": _max_abs(self.origin) if named and self.origin is not None else None,
            "path": [_entry(check) for check in self.path],
            "verdict": self.verdict,
            "headline": self.headline,
            "summary": self.summary,
            "reference": self.reference,
            "sample": self.sample,
            "compared": self.compared,
        }
        if named and self.origin is not None:
            details["tensor"] = self.origin.tensor
            details["module_type"] = self.module_type
            if self.independent:
                details["other_origins"] = self.independent
            if len(self.segment) > 1:
                details["segment"] = [n.label for n in self.segment]
        return details


def unlocalized(reason: str) -> dict[str, Any]:
    """details["divergence"] when localization itself failed: the case keeps its verdict."""
    return {"node": None, "op_type": None, "module": None, "max_abs": None, "path": [],
            "verdict": "unlocalized", "headline": f"could not localize the drift: {reason}",
            "summary": f"could not localize the drift: {reason}"}


def _max_abs(check: TensorCheck) -> float:
    return check.comparison.max_abs if check.comparison.required_atol is not None else math.inf


def _entry(check: TensorCheck) -> dict[str, Any]:
    node = check.node
    return {
        "node": node.label if node is not None else None,
        "op_type": node.op_type if node is not None else None,
        "module": node.module if node is not None else None,
        "tensor": check.tensor,
        "max_abs": _max_abs(check),
        "within": check.passed,
    }


def find_origin(
    graph: GraphInfo,
    actual: Mapping[str, Array],
    reference: Mapping[str, Array],
    tolerance_for: Callable[[str], Tolerance],
    *,
    reference_name: str,
    case_failed: bool = True,
    modules: Mapping[str, str] | None = None,
    module_types: Mapping[str, str] | None = None,
    sample: int | None = None,
) -> Divergence:
    """The first tensor out of tolerance whose compared inputs are within it.

    `reference` holds what is known of the tensors (a subset, for PyTorch); `modules` names the
    module of tensors matched by value where the graph has no scopes; `module_types` maps
    module paths to class names ("" to the top-level class).
    """
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
        return Divergence("none", f"all {len(checks)} tensors compared with {reference_name} are"
                          " within tolerance", "no drift in the intermediate tensors",
                          reference=reference_name, sample=sample, compared=len(checks))
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
    module, module_type = _origin_module(origin, segment, modules or {}, module_types or {})
    rounding = _is_rounding(origin)
    describe = _gradual_text if rounding else _origin_text
    summary = describe(origin, segment, checks[goal], reference_name, module, module_type,
                       module_types or {})
    where = module_text(module, module_type, (module_types or {}).get(""))
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
    if not case_failed:  # kept tensors are stored in their own type; a normal run may not be
        summary = f"the outputs pass, but with every intermediate tensor kept: {summary}"
        headline = f"with every intermediate tensor kept, {headline}"
    return Divergence(
        "gradual" if rounding else "origin", summary, headline,
        reference=reference_name, sample=sample, origin=origin, segment=segment,
        frontier=frontier, path=path, compared=len(checks), module=module,
        module_type=module_type, independent=len(others),
    )


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


def _origin_module(origin: TensorCheck, segment: Sequence[GraphNode], modules: Mapping[str, str],
                   module_types: Mapping[str, str]) -> tuple[str | None, str | None]:
    """The module the segment's nodes share (the deepest common one), else the value match's."""
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


def _is_rounding(origin: TensorCheck) -> bool:
    """Whether the first difference is within the reference dtype's rounding of its values."""
    c = origin.comparison
    if origin.eps is None or c.required_atol is None or not math.isfinite(c.max_abs):
        return False
    return c.max_abs <= ROUNDING_ULPS * origin.eps * origin.scale


# -- the words -------------------------------------------------------------------------------


def _fmt(x: float) -> str:
    """A measured number with two significant digits: 0.031 → "3.1e-2"."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x == 0:
        return "0"
    mantissa, _, exponent = f"{x:.1e}".partition("e")
    return f"{mantissa}e{int(exponent)}"


def _setting(x: float) -> str:
    """A tolerance as the user wrote it: the shortest form that reads back exactly."""
    for digits in range(17):
        text = f"{x:.{digits}e}"
        if float(text) == x:
            mantissa, _, exponent = text.partition("e")
            return "0" if x == 0 else f"{mantissa}e{int(exponent)}"
    return repr(x)


def _error_text(check: TensorCheck) -> str:
    c = check.comparison
    if c.expected_shape != c.actual_shape:
        return f"shape {c.actual_shape}, expected {c.expected_shape}"
    if c.required_atol is None:
        worst = ""
        if c.worst_expected is not None and c.worst_actual is not None:
            worst = f" (expected {_fmt(c.worst_expected)}, got {_fmt(c.worst_actual)})"
        return f"NaN/Inf in {c.mismatches} of {c.elements} elements{worst}"
    return f"max abs {_fmt(c.max_abs)} (atol {_setting(c.atol)} + rtol {_setting(c.rtol)}·|e|)"


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
                 reference: str, module: str | None, module_type: str | None,
                 module_types: Mapping[str, str]) -> str:
    where = module_text(module, module_type, module_types.get(""))
    error = _error_text(origin)
    if len(segment) <= 1:
        text = (f"drift starts at {_node_text(origin.node, origin.tensor)}{where}: its output is"
                f" off from {reference} by {error}, while its inputs are within tolerance")
    else:
        ops = ", ".join(n.op_type for n in segment[:8]) + (", …" if len(segment) > 8 else "")
        lowered = {n.torch_op for n in segment}
        if len(lowered) == 1 and None not in lowered:  # the dynamo exporter says which aten op
            ops = f"the lowering of {lowered.pop()}: {ops}"
        text = (f"drift starts at {_node_text(origin.node, origin.tensor)}{where}, or in the"
                f" {len(segment) - 1} nodes before it that {reference} has no tensor for"
                f" ({ops}): its output is off by {error}, while their inputs are within"
                " tolerance")
    if goal.tensor != origin.tensor:
        text += f"; it grows to {_short_error(goal)} at '{goal.tensor}'"
    return text


def _gradual_text(origin: TensorCheck, segment: Sequence[GraphNode], goal: TensorCheck,
                  reference: str, module: str | None, module_type: str | None,
                  module_types: Mapping[str, str]) -> str:
    where = module_text(module, module_type, module_types.get(""))
    return (f"no single origin: the first tensor out of tolerance, '{origin.tensor}' of"
            f" {_node_text(origin.node, origin.tensor)}{where}, differs from {reference} by"
            f" {_fmt(origin.comparison.max_abs)}, within rounding of values up to"
            f" {_fmt(origin.scale)}, and the error grows gradually to {_short_error(goal)} at"
            f" '{goal.tensor}'; no node stands out: the tolerance is tighter than the arithmetic")


def _short_error(check: TensorCheck) -> str:
    c = check.comparison
    if c.expected_shape != c.actual_shape:
        return "a different shape"
    return f"max abs {_fmt(c.max_abs)}" if c.required_atol is not None else "NaN/Inf"


def _vanished_text(reference: str) -> str:
    return ("the drift did not reproduce with the intermediate tensors kept as outputs: every"
            f" output agrees with {reference} in that run. ONNX Runtime cannot fuse nodes whose"
            " outputs are kept, so a fused kernel (graph optimizations) is the likely origin")


# -- running the graph with every intermediate tensor kept ---------------------------------


@dataclass(frozen=True)
class MarkedModel:
    """A model with its intermediate tensors marked as outputs, ready for a session."""

    data: bytes
    folder: Path  # where its external data files are
    graph: GraphInfo


def mark_intermediates(path: Path) -> MarkedModel:
    """Every tensor computed from the inputs becomes a graph output; constants do not."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    graph = read_graph(model)
    types = _elem_types(model)
    listed = {o.name for o in model.graph.output}
    for node in graph.nodes:
        for tensor in node.outputs:
            if tensor in graph.dynamic and tensor not in listed:
                listed.add(tensor)
                info = onnx.ValueInfoProto(name=tensor)
                if tensor in types:  # the element type only: inferred shapes may be too narrow
                    info.type.tensor_type.elem_type = types[tensor]
                model.graph.output.append(info)
    return MarkedModel(model.SerializeToString(), path.resolve().parent, graph)


def _elem_types(model: Any) -> dict[str, int]:
    """Inferred tensor element types; tensors that are not plain tensors are left untyped."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception as exc:  # onnx raises several types; untyped outputs still work
        logger.debug("shape inference failed: %s", exc)
        return {}
    return {v.name: v.type.tensor_type.elem_type for v in inferred.graph.value_info
            if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type}


def run_marked(marked: MarkedModel, target: TargetSpec, feeds: Mapping[str, Array],
               threads: int = 0) -> tuple[dict[str, Array], tuple[str, ...]]:
    """One run of the marked model: every kept tensor by name, and the providers that ran."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    if threads:
        options.intra_op_num_threads = threads
    options.add_session_config_entry(
        "session.model_external_initializers_file_folder_path", str(marked.folder))
    providers = [(p, dict(target.provider_options[p])) if p in target.provider_options else p
                 for p in target.providers]
    session = ort.InferenceSession(marked.data, options, providers=providers)
    names = [o.name for o in session.get_outputs()]
    values = session.run(None, dict(feeds))
    return dict(zip(names, values, strict=True)), tuple(session.get_providers())


# -- the PyTorch reference -------------------------------------------------------------------


@dataclass(frozen=True)
class TorchReference:
    values: Mapping[str, Array]  # ONNX tensor -> the PyTorch activation matched to it
    modules: Mapping[str, str]  # ONNX tensor -> the module it was matched through
    module_types: Mapping[str, str]  # module path -> class name; "" is the top-level module


def torch_reference(module: Any, feeds: Mapping[str, Array], graph: GraphInfo,
                    actual: Mapping[str, Array], tolerance: Tolerance) -> TorchReference:
    """Each module's inputs and outputs from one forward pass, matched to the ONNX tensors they
    became: an output to a tensor made inside the module's scope and used outside it, an input
    to one made outside and used inside (a residual sum feeding a block has no module of its
    own, but it is the input of the modules it feeds)."""
    entering, leaving = _capture(module, feeds)
    types = {name: type(m).__name__ for name, m in module.named_modules()}
    if any(node.module is not None for node in graph.nodes):
        inside = _scopes(graph, set(types))
        values, modules = _match_by_scope(leaving, graph, actual, tolerance, inside)
        _match_inputs(entering, graph, actual, tolerance, inside, values)
    else:
        values, modules = _match_by_values(leaving, graph, actual, tolerance)
    return TorchReference(values, modules, types)



def _capture(module: Any, feeds: Mapping[str, Array]) -> tuple[Records, Records]:
    """(module path, tensors) for each call's inputs, as calls start (parents first), and for
    its outputs, as calls finish (children first)."""
    import torch

    entering: Records = []
    leaving: Records = []

    def pre_hook(name: str) -> Callable[..., None]:
        def record(_module: Any, inputs: Any) -> None:
            entering.append((name, [_numpy(t) for t in _tensors(inputs)]))
        return record

    def hook(name: str) -> Callable[..., None]:
        def record(_module: Any, _inputs: Any, output: Any) -> None:
            leaving.append((name, [_numpy(t) for t in _tensors(output)]))
        return record

    handles = []
    for name, sub in module.named_modules():
        if name:
            handles.append(sub.register_forward_pre_hook(pre_hook(name)))
            handles.append(sub.register_forward_hook(hook(name)))
    try:
        with torch.no_grad():
            module(*[torch.from_numpy(np.array(a, copy=True)) for a in feeds.values()])
    finally:
        for handle in handles:
            handle.remove()
    return entering, leaving


def _tensors(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, Mapping):
        return [t for v in value.values() for t in _tensors(v)]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _tensors(v)]
    return []  # None, numbers, custom objects: nothing to compare


def _numpy(tensor: Any) -> Array:
    import torch

    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.float()
    return np.array(tensor.numpy(), copy=True)  # a copy: in-place ops may change it later


def _match_by_scope(records: Records, graph: GraphInfo,
                    actual: Mapping[str, Array], tolerance: Tolerance,
                    inside: Mapping[str, set[int]]) -> tuple[dict[str, Array], dict[str, str]]:
    """A module's output is a tensor made inside its scope and used outside it."""
    values: dict[str, Array] = {}
    modules: dict[str, str] = {}
    used: dict[str, set[str]] = {}
    for index, (path, tensors) in enumerate(records):
        if path not in inside:
            continue
        exits = _exits(graph, inside[path])
        # Modules with no node of their own right after this one were fused into it (a batch
        # norm folded into its convolution): the tensor may hold their output instead.
        fused = []
        for later, later_tensors in records[index + 1:]:
            if later in inside:
                break
            fused.extend(later_tensors)
        for produced in tensors:
            taken = used.setdefault(path, set())
            candidates = [t for t in exits if t in actual and t not in taken
                          and np.shape(actual[t]) == produced.shape]
            if not candidates:
                continue
            best = min(candidates, key=lambda t: (excess(produced, actual[t], tolerance),
                                                  -graph.position(t)[0]))
            taken.add(best)
            if best in values:
                continue  # a child's output already (a container returns its last child's)
            chosen = produced
            if excess(produced, actual[best], tolerance) > 1:
                chosen = next((f for f in fused if f.shape == produced.shape
                               and excess(f, actual[best], tolerance) <= 1), produced)
            values[best] = chosen
            modules[best] = path
    return values, modules


def _match_inputs(entering: Records, graph: GraphInfo, actual: Mapping[str, Array],
                  tolerance: Tolerance, inside: Mapping[str, set[int]],
                  values: dict[str, Array]) -> None:
    """Module inputs for the tensors no module output was matched to."""
    for path, tensors in entering:
        if path not in inside:
            continue
        entries = [t for t in _entries(graph, inside[path]) if t in actual and t not in values]
        for received in tensors:
            candidates = [t for t in entries if np.shape(actual[t]) == received.shape]
            if candidates:
                best = min(candidates, key=lambda t: (excess(received, actual[t], tolerance),
                                                      graph.position(t)))
                values[best] = received
                entries.remove(best)


def _scopes(graph: GraphInfo, known: set[str]) -> dict[str, set[int]]:
    """Module path → the nodes inside it, its submodules' included."""
    inside: dict[str, set[int]] = {}
    spelt: dict[str, str] = {}
    for node in graph.nodes:
        if node.module:
            if node.module not in spelt:
                spelt[node.module] = _known_path(node.module, known)
            parts = spelt[node.module].split(".")
            for size in range(1, len(parts) + 1):
                inside.setdefault(".".join(parts[:size]), set()).add(node.order)
    return inside


def _entries(graph: GraphInfo, inside: set[int]) -> list[str]:
    """Tensors made outside the nodes `inside` (not graph inputs) and used by them."""
    entries: dict[str, None] = {}
    for order in sorted(inside):
        for tensor in graph.nodes[order].inputs:
            made = graph.producer.get(tensor)
            if tensor in graph.dynamic and made is not None and made not in inside:
                entries[tensor] = None
    return list(entries)


def _known_path(path: str, known: set[str]) -> str:
    """A scope as one of the module's own paths, when the exporter spelt it differently."""
    if not known or path in known:
        return path
    plain = re.sub(r"_\d+(?=\.|$)", "", path)  # TorchScript numbers a scope's repeated calls
    if plain in known:
        return plain
    tail = path.rsplit(".", 1)[-1]
    matches = [k for k in known if k == tail or k.endswith("." + tail)]
    return matches[0] if len(matches) == 1 else path


def _exits(graph: GraphInfo, inside: set[int]) -> list[str]:
    exits = []
    outputs = set(graph.outputs)
    for order in sorted(inside):
        for tensor in graph.nodes[order].outputs:
            if tensor not in graph.dynamic:
                continue
            users = graph.consumers.get(tensor, ())
            if tensor in outputs or any(u not in inside for u in users):
                exits.append(tensor)
    return exits


def _match_by_values(records: Records, graph: GraphInfo,
                     actual: Mapping[str, Array], tolerance: Tolerance,
                     ) -> tuple[dict[str, Array], dict[str, str]]:
    """Without scopes: each output, in call order, to the closest tensor of its shape at or
    after the previous match. The first module whose output matches nothing, with the next
    one unmatched too (a module fused into its neighbour leaves the next one matching), is
    where the drift starts: it stands for the first tensor of its shape after the last match.
    """
    by_shape: dict[tuple[int, ...], list[str]] = {}
    for node in graph.nodes:
        for tensor in node.outputs:
            if tensor in graph.dynamic and tensor in actual:
                by_shape.setdefault(tuple(np.shape(actual[tensor])), []).append(tensor)
    flat = [(path, produced) for path, tensors in records for produced in tensors]
    values: dict[str, Array] = {}
    modules: dict[str, str] = {}
    position = (-1, 0)
    last: str | None = None

    def closest(produced: Array, after: tuple[int, int]) -> tuple[float, str] | None:
        """The best-matching tensor of the same shape at or after `after`; earliest on ties."""
        pool = [t for t in by_shape.get(produced.shape, ()) if graph.position(t) >= after]
        scored = [(excess(produced, actual[t], tolerance), graph.position(t), t) for t in pool]
        best = min(scored, default=None)
        return None if best is None else (best[0], best[2])

    for index, (path, produced) in enumerate(flat):
        found = closest(produced, position)
        if found is not None and found[0] <= 1:
            values.setdefault(found[1], produced)
            modules.setdefault(found[1], path)
            position, last = graph.position(found[1]), found[1]
            continue
        following = flat[index + 1] if index + 1 < len(flat) else None
        ahead = closest(following[1], position) if following is not None else None
        if ahead is not None and ahead[0] <= 1:
            continue  # fused into the next module, which matches
        pool = [t for t in by_shape.get(produced.shape, ()) if graph.position(t) > position]
        below = graph.descendants(last) if last is not None else None
        stand_in = next((t for t in pool if below is None or t in below), None)
        if stand_in is not None:
            values[stand_in] = produced
            modules[stand_in] = path
        break
    return values, modules


# -- one case --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """A localization's verdict and the tensors behind it (for the repro bundle)."""

    divergence: Divergence
    graph: GraphInfo | None = None
    actual: Mapping[str, Array] = field(default_factory=dict)
    reference: Mapping[str, Array] = field(default_factory=dict)


def worst_sample(comparisons: Sequence[OutputComparison]) -> int:
    """The sample holding the worst element of the worst failing output (0 if none says)."""
    failing = [c for c in comparisons if not c.passed] or list(comparisons)
    if not failing:
        return 0

    def severity(c: OutputComparison) -> tuple[int, float]:
        return (1, 0.0) if c.required_atol is None else (0, c.max_abs)

    worst = max(failing, key=severity)
    return worst.worst_index[0] if worst.worst_index else 0


def localize_case(
    case: Case,
    model_path: Path,
    feeds: Mapping[str, Array],
    names: Sequence[str],
    expected: Sequence[Array],
    case_failed: bool,
    module: Any | None = None,
    sample: int = 0,
    threads: int = 0,
) -> Finding:
    """Where this case's drift starts, on one sample: `expected` is the case's reference
    outputs for it (PyTorch or recorded), `module` the PyTorch module when there is one."""
    from onnx_parity.spec import TargetSpec

    marked = mark_intermediates(model_path)
    graph = marked.graph
    actual, ran = run_marked(marked, case.target, feeds, threads)
    actual = {**feeds, **actual}  # the graph inputs too: the bundle's subgraph may start there
    output_names = dict(zip(graph.outputs, names, strict=False))

    def tolerance_for(tensor: str) -> Tolerance:
        if tensor in output_names:
            return case.model.tolerance_for(output_names[tensor])
        return case.model.tolerance

    recorded = dict(zip(graph.outputs, expected, strict=False))
    on_reference = bool(ran) and ran[0] == REFERENCE_PROVIDER
    if not on_reference:
        cpu = TargetSpec(name="reference", providers=(REFERENCE_PROVIDER,))
        values, _ = run_marked(marked, cpu, feeds, threads)
        agrees = all(excess(recorded[o], values[o], tolerance_for(o)) <= 1 for o in recorded)
        if agrees:
            divergence = find_origin(graph, actual, values, tolerance_for, sample=sample,
                                     reference_name="the CPU provider", case_failed=case_failed)
            return Finding(divergence, graph, actual, values)
    if module is not None:
        found = torch_reference(module, feeds, graph, actual, case.model.tolerance)
        reference = {**found.values, **recorded}
        divergence = find_origin(graph, actual, reference, tolerance_for, sample=sample,
                                 reference_name="PyTorch", case_failed=case_failed,
                                 modules=found.modules, module_types=found.module_types)
        return Finding(divergence, graph, actual, reference)
    where = ("target runs on the CPU provider, the reference target itself" if on_reference
             else "graph disagrees with the recorded outputs on the CPU provider too")
    summary = (f"no intermediate reference: the {where}, and recorded data holds only the graph's"
               " outputs")
    if case_failed:
        summary += ("; the drift lies between this graph and the recording (the model or the data"
                    " changed since it was recorded)")
    headline = "no intermediate reference for a graph checked against recorded outputs"
    return Finding(Divergence("no-reference", summary,
                              f"drift not localized: {headline}" if case_failed else headline,
                              reference="recorded outputs", sample=sample),
                   graph, actual, recorded)


def investigate(
    case: Case,
    model_path: Path,
    inputs: Sequence[Mapping[str, Array]],
    names: Sequence[str],
    expected: Sequence[Sequence[Array]],
    actual: Sequence[Sequence[Array]],
    comparisons: Sequence[OutputComparison],
    module: Any | None = None,
    *,
    localize: str = "failed",
    artifacts: Path | None = None,
    threads: int = 0,
) -> dict[str, Any]:
    """What the worker adds to a compared case's details: "divergence" (failed cases, or every
    case under `always`) and "bundle" (failed cases under --artifacts). Never raises: a
    localization that fails says why in its place, and the case keeps its verdict."""
    failed = not all(c.passed for c in comparisons)
    details: dict[str, Any] = {}
    finding: Finding | None = None
    if localize == "always" or (failed and localize == "failed"):
        started = time.perf_counter()
        sample = worst_sample(comparisons)
        try:
            finding = localize_case(case, model_path, inputs[sample], names, expected[sample],
                                    failed, module, sample, threads)
            divergence = finding.divergence.as_details()
        except Exception as exc:  # never turn a verdict into a crash; say why instead
            logger.debug("%s: localization failed: %s", case.id, traceback.format_exc())
            divergence = unlocalized(f"{type(exc).__name__}: {_first_line(str(exc))}")
        divergence["seconds"] = round(time.perf_counter() - started, 4)
        details["divergence"] = divergence
    if failed and artifacts is not None:
        from onnx_parity.bundle import write_bundle

        try:
            bundle = write_bundle(artifacts, case, model_path, inputs, names, expected, actual,
                                  finding)
            details["bundle"] = {"path": str(bundle.folder), "command": bundle.command}
        except Exception as exc:  # a bundle is a courtesy; it must not cost the verdict
            logger.debug("%s: bundle failed: %s", case.id, traceback.format_exc())
            details["bundle"] = {"error": f"could not write the repro bundle: "
                                          f"{type(exc).__name__}: {_first_line(str(exc))}"}
    return details


def _first_line(text: str, limit: int = 300) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"
