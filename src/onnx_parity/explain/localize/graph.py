"""The ONNX graph in topological order with its PyTorch scopes, and one run keeping every tensor."""

from __future__ import annotations

import ast
import heapq
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from onnx_parity.backends.kinds import target_kind
from onnx_parity.frozen import frozen

if TYPE_CHECKING:
    from onnx_parity.spec import TargetSpec

logger = logging.getLogger(__name__)

Array = np.ndarray[Any, Any]

_SCOPES_KEY = "pkg.torch.onnx.name_scopes"
_CLASSES_KEY = "pkg.torch.onnx.class_hierarchy"
_REPEAT = re.compile(r"@\d+$")  # the dynamo exporter's suffix for a module's second call
_INT = 2  # onnx.AttributeProto.INT, without importing onnx for a constant


# -- the graph -------------------------------------------------------------------------------


@frozen
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
    ints: tuple[tuple[str, int], ...] = ()  # its integer attributes (axis, largest, ...)

    @property
    def label(self) -> str:
        return self.name or f"{self.op_type}#{self.order}"

    def attribute(self, name: str, default: int) -> int:
        return next((value for key, value in self.ints if key == name), default)


@frozen
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
        ints = tuple((a.name, int(a.i)) for a in node.attribute if a.type == _INT)
        nodes.append(GraphNode(position, node.name, node.op_type, needs[index], outputs,
                               module, module_type, torch_op, ints))
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


# -- running the graph with every intermediate tensor kept ---------------------------------


@frozen
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
    types = elem_types(model)
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


def elem_types(model: Any) -> dict[str, int]:
    """Inferred tensor element types; tensors that are not plain tensors are left untyped."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception as exc:  # onnx raises several types; untyped outputs still work
        logger.debug("shape inference failed: %s", exc)
        return {}
    return {v.name: v.type.tensor_type.elem_type for v in inferred.graph.value_info
            if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type}


def runtime_name(target: TargetSpec) -> str:
    """Which ONNX Runtime runs `target`'s sessions, in words: `onnxruntime 1.31.1` in this
    process, or the build a `python:` target's interpreter holds (asked once)."""
    return target_kind(target).runtime()


def run_marked(marked: MarkedModel, target: TargetSpec, feeds: Mapping[str, Array],
               threads: int = 0) -> tuple[dict[str, Array], tuple[str, ...]]:
    """One run of the marked model, in a session built as the case's own was (the same target
    configuration: provider options, fall-back settings), by the target's own runtime: every
    kept tensor by name, and the providers that ran."""
    return target_kind(target).run_graph(marked.data, marked.folder, feeds, threads or None)
