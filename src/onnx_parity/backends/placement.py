"""Which provider ran each node: ONNX Runtime's profile counted per provider and op type, and
which of its arithmetic nodes gave float16 tensors."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import Any

from onnx_parity.frozen import frozen
from onnx_parity.literals import CPU, CUDA

# Nodes ONNX Runtime adds to move tensors between a GPU provider and the CPU: no arithmetic.
_COPIES = frozenset({"MemcpyToHost", "MemcpyFromHost"})
# TensorRT runs the part of the graph it takes as fused nodes named TRTKernel_<graph>_<hash>_<n>:
# counted as one op type, so that counts of several models and runs read alike.
_TENSORRT_FUSED = "TRTKernel"


@frozen
class Placement:
    """Which provider ran each node of one run, counted per provider and op type (from
    ONNX Runtime's profile, whose node events record both)."""

    nodes: Mapping[str, Mapping[str, int]]
    cpu_shape_nodes: Mapping[str, int] = field(default_factory=dict)  # of nodes["CPU..."]
    # Per provider: the arithmetic nodes that gave a floating tensor (not a Cast, not a node
    # that only moves or reshapes data), and those of them whose output was float16. The
    # kernel's own types, as profiled: where ONNX Runtime's CPU provider has no float16
    # kernel it inserts casts and runs the node in float32, and the profile says so.
    arithmetic: Mapping[str, int] = field(default_factory=dict)
    float16: Mapping[str, int] = field(default_factory=dict)

    def elsewhere(self, preferred: str, allow_cpu_ops: Sequence[str] = (),
                  allow_cuda_ops: Sequence[str] = ()) -> dict[str, dict[str, int]]:
        """Nodes not on `preferred`, less the CPU nodes that only compute shapes (ONNX Runtime
        puts those on the CPU on purpose), copies to and from a GPU, and nodes of the op types
        the target allows on the CPU, or on CUDA behind TensorRT."""
        stray: dict[str, dict[str, int]] = {}
        for provider, ops in self.nodes.items():
            if provider == preferred:
                continue
            kept = {}
            for op, count in ops.items():
                if provider == CPU:
                    if op in allow_cpu_ops:
                        continue
                    count -= self.cpu_shape_nodes.get(op, 0)
                elif op in _COPIES or (provider == CUDA and op in allow_cuda_ops):
                    continue
                if count > 0:
                    kept[op] = count
            if kept:
                stray[provider] = kept
        return stray


_SHAPE_TYPES = frozenset({"int64", "int32", "bool"})
# The ops of shape arithmetic; an ArgMax or TopK also yields integer vectors, but is real work.
_SHAPE_OPS = frozenset({
    "Shape", "Size", "Gather", "Unsqueeze", "Squeeze", "Concat", "Slice", "Cast", "Identity",
    "ConstantOfShape", "Range", "Reshape", "Expand", "Add", "Sub", "Mul", "Div", "Mod", "Neg",
    "Abs", "Min", "Max", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not",
    "And", "Or", "Where", "ReduceProd", "ReduceSum", "Floor", "Ceil",
})


def computes_shapes(args: Mapping[str, Any]) -> bool:
    """A profiled node of shape arithmetic whose outputs are all integer or boolean vectors or
    scalars: what ONNX Runtime deliberately keeps on the CPU next to a GPU graph."""
    if args.get("op_name") not in _SHAPE_OPS:
        return False
    outputs = args.get("output_type_shape")
    if not isinstance(outputs, list) or not outputs:
        return False
    for output in outputs:
        if not isinstance(output, dict) or len(output) != 1:
            return False
        ((kind, shape),) = output.items()
        if kind not in _SHAPE_TYPES or not isinstance(shape, list) or len(shape) > 1:
            return False
    return True


# Ops that move, reshape or convert data without arithmetic: a float16 Reshape is no float16
# arithmetic, and Cast is what ONNX Runtime inserts around the nodes it runs in float32.
_MOVES = frozenset({
    "Cast", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Identity", "Flatten", "Expand",
    "Concat", "Slice", "Split", "Gather", "GatherElements", "GatherND", "Tile", "Pad", "Shape",
    "Size", "DepthToSpace", "SpaceToDepth", "Dropout", "MemcpyToHost", "MemcpyFromHost",
})
_FLOATS = frozenset({"float", "float16", "double", "bfloat16"})


def _output_types(args: Mapping[str, Any]) -> list[str]:
    outputs = args.get("output_type_shape")
    return [kind for output in outputs if isinstance(output, dict) for kind in output
            ] if isinstance(outputs, list) else []


def placement_from_profile(events: Any) -> Placement:
    """Count ONNX Runtime's profiled node events per provider and op type, and the arithmetic
    nodes among them that gave floating and float16 tensors."""
    nodes: dict[str, dict[str, int]] = {}
    shapes: dict[str, int] = {}
    arithmetic: dict[str, int] = {}
    float16: dict[str, int] = {}
    for event in events if isinstance(events, list) else ():
        args = event.get("args") if isinstance(event, dict) else None
        if (event.get("cat") != "Node" or not str(event.get("name", "")).endswith(
                "_kernel_time") or not isinstance(args, dict) or "provider" not in args):
            continue
        ops = nodes.setdefault(str(args["provider"]), {})
        op = str(args.get("op_name", "?"))
        op = _TENSORRT_FUSED if op.startswith(f"{_TENSORRT_FUSED}_") else op
        ops[op] = ops.get(op, 0) + 1
        if args["provider"] == CPU and computes_shapes(args):
            shapes[op] = shapes.get(op, 0) + 1
        types = _output_types(args)
        if op not in _MOVES and _FLOATS.intersection(types):
            provider = str(args["provider"])
            arithmetic[provider] = arithmetic.get(provider, 0) + 1
            if "float16" in types:
                float16[provider] = float16.get(provider, 0) + 1
    return Placement({p: dict(sorted(ops.items())) for p, ops in sorted(nodes.items())},
                     dict(sorted(shapes.items())), dict(sorted(arithmetic.items())),
                     dict(sorted(float16.items())))



def with_assignment(placement: Placement, assigned: Any) -> Placement:
    """The profile's placement with ONNX Runtime's own report of the nodes each provider took
    (`get_provider_graph_assignment_info()`, from 1.24: [[provider, [[node, op type], ...]],
    ...]) in place of the profile's counts for every provider but the CPU: a provider that runs
    the graph as fused subgraphs (OpenVINO's `OpenVINO-EP-subgraph_1`) is then counted by the
    op types of the nodes it took. The CPU's counts, its shape arithmetic among them, stay the
    profile's; so does everything where the report is missing."""
    if not isinstance(assigned, list) or not assigned:
        return placement
    reported: dict[str, dict[str, int]] = {}
    for entry in assigned:
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], list)):
            return placement
        provider, taken = str(entry[0]), entry[1]
        if provider == CPU:
            continue
        ops = reported.setdefault(provider, {})
        for node in taken:
            op = str(node[1]) if isinstance(node, list) and len(node) == 2 else "?"
            ops[op] = ops.get(op, 0) + 1
    nodes = {p: ops for p, ops in placement.nodes.items() if p == CPU or p not in reported}
    nodes.update(reported)
    return Placement({p: dict(sorted(ops.items())) for p, ops in sorted(nodes.items())},
                     placement.cpu_shape_nodes, placement.arithmetic, placement.float16)
