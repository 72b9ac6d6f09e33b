"""The spec's named dimensions in an export: torch.export's dynamic shapes and the TorchScript
exporter's dynamic axes made from them, and the refusal of an export that fixed one."""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from onnx_parity.errors import ExportError
from onnx_parity.literals import Exporter
from onnx_parity.spec import InputSpec


def dynamic_shapes(module: Any, inputs: Sequence[InputSpec], forward_args: Mapping[str, Any],
                    by_name: Sequence[str] | None = None) -> dict[str, Any] | None:
    """torch.export keys dynamic shapes by forward()'s parameter names, not the spec's names.

    Inputs bound by name are those names; inputs bound by position map to forward()'s
    parameters by position, so an nn.Sequential's `input` is fine.
    """
    import torch

    if not any(isinstance(d, str) for i in inputs for d in i.shape):
        return None
    signature = list(inspect.signature(module.forward).parameters.values())
    star = next((p.name for p in signature if p.kind == p.VAR_POSITIONAL), None)
    if by_name is not None:
        params = [i.name for i in inputs]
    else:
        params = [p.name for p in signature
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if star is not None and by_name is None and len(params) < len(inputs):
        return _star_shapes(signature, params, inputs, forward_args)
    if len(params) < len(inputs):
        raise ExportError(
            f"the spec lists {len(inputs)} inputs, forward() takes {len(params)} positional"
            f" parameters ({', '.join(params)})"
        )
    dims: dict[str, Any] = {}
    shapes: dict[str, Any] = {}
    for param, spec in zip(params, inputs, strict=False):
        named = {axis: d for axis, d in enumerate(spec.shape) if isinstance(d, str)}
        shapes[param] = {
            axis: dims.setdefault(name, torch.export.Dim(name)) for axis, name in named.items()
        } or None
    shapes.update(dict.fromkeys(forward_args))  # keyword arguments are fixed, not dynamic
    return shapes


def _star_shapes(signature: Sequence[inspect.Parameter], params: Sequence[str],
                 inputs: Sequence[InputSpec], forward_args: Mapping[str, Any]) -> dict[str, Any]:
    """Dynamic shapes for a forward(*args, **kwargs) (a wrapper): the inputs past the named
    parameters as a tuple under *args' own name, the keyword arguments under **kwargs'."""
    import torch

    dims: dict[str, Any] = {}

    def shape(spec: InputSpec) -> dict[int, Any] | None:
        return {axis: dims.setdefault(d, torch.export.Dim(d))
                for axis, d in enumerate(spec.shape) if isinstance(d, str)} or None

    shapes: dict[str, Any] = {name: shape(spec) for name, spec in zip(params, inputs,
                                                                      strict=False)}
    star = next(p.name for p in signature if p.kind == p.VAR_POSITIONAL)
    shapes[star] = tuple(shape(spec) for spec in inputs[len(params):])
    named = {p.name for p in signature}
    shapes.update({k: None for k in forward_args if k in named})
    rest = {k: None for k in forward_args if k not in named}
    starstar = next((p.name for p in signature if p.kind == p.VAR_KEYWORD), None)
    if rest and starstar is not None:
        shapes[starstar] = rest
    return shapes


def dynamic_axes(inputs: Sequence[InputSpec]) -> dict[str, dict[int, str]]:
    return {
        i.name: {axis: d for axis, d in enumerate(i.shape) if isinstance(d, str)}
        for i in inputs if any(isinstance(d, str) for d in i.shape)
    }



def static_dims(path: Path, inputs: Sequence[InputSpec], exporter: Exporter) -> str | None:
    """Why the export is refused when a dimension the spec names (dynamic) came out of it as a
    fixed size: the exported model would refuse every other size, in production as here."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    declared = {i.name: i.type.tensor_type.shape.dim for i in graph.input}
    found = [(dim, spec.name, axis, declared[spec.name][axis].dim_value)
             for spec in inputs if spec.name in declared
             for axis, dim in enumerate(spec.shape)
             if isinstance(dim, str) and axis < len(declared[spec.name])
             and declared[spec.name][axis].HasField("dim_value")]
    if not found:
        return None
    listed = " and ".join(f"'{dim}' (input '{name}', axis {axis}) at {size}"
                          for dim, name, axis, size in found)
    written = " and ".join(f"{size} instead of '{dim}' in inputs.{name}.shape"
                           for dim, name, _, size in found)
    one = len(found) == 1
    dim, _, _, size = found[0]
    other = ", try exporter: torchscript" if exporter == "dynamo" else ""
    traced = (f"; it was traced at size {size}, which torch.export may fix: give '{dim}' a "
              "size of 2 or more in the dataset's dims" if exporter == "dynamo" and size <= 1
              else "")
    return (f"the export fixed dynamic dimension{'' if one else 's'} {listed}; the model's code "
            f"specialised on {'that size' if one else 'those sizes'} (a Python int taken from "
            "the shape, or a branch on it), so the exported model takes no other: make that "
            f"code shape-agnostic{other}, or, if {'it is' if one else 'they are'} really fixed,"
            f" write {written} of the model{traced}")
