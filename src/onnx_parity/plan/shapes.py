"""The arrays a case's inputs will be, from the spec alone: element types, concrete shapes, and
the budget a case's generated inputs must fit in."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from onnx_parity.errors import LoadError
from onnx_parity.spec import DatasetSpec, InputSpec, ModelSpec
from onnx_parity.spec.model import DEFAULT_RANDOM_SAMPLES, batch_axes

# Element types numpy does not have, by the names ONNX and onnx-parity give them.
_ML_DTYPES = {
    "bfloat16": "bfloat16", "float8e4m3fn": "float8_e4m3fn", "float8e4m3fnuz": "float8_e4m3fnuz",
    "float8e5m2": "float8_e5m2", "float8e5m2fnuz": "float8_e5m2fnuz", "float4e2m1": "float4_e2m1fn",
    "int4": "int4", "uint4": "uint4", "int2": "int2", "uint2": "uint2",
}


def numpy_dtype(name: str) -> np.dtype[Any]:
    """The numpy dtype of an element type name: float32, bfloat16, float8e4m3fn, string, ..."""
    if name in _ML_DTYPES:
        import ml_dtypes  # ships with onnx

        return np.dtype(getattr(ml_dtypes, _ML_DTYPES[name]))  # type: ignore[no-any-return]
    if name == "string":
        return np.dtype(object)
    return np.dtype(name)


@functools.lru_cache(maxsize=256)
def dtype_name(dtype: np.dtype[Any]) -> str:
    """The element type name of an array's dtype, as numpy_dtype takes it. Remembered: every
    feed of every call asks, and numpy builds a dtype's name anew each time it is read."""
    if dtype.kind in "OUS":
        return "string"
    found = dtype.name
    return next((name for name, attribute in _ML_DTYPES.items() if found == attribute), found)


def concrete_shape(spec: InputSpec, batch: int, dims: Mapping[str, int]) -> tuple[int, ...]:
    """The batch dims (a dim named `batch` wherever it stands, else a named axis 0) take
    `batch`, even where `dims` names a size for `batch` (one dataset per batch size was the way
    to feed a batch past axis 0 before, and then both agree); any other named dim takes its
    size from `dims`."""
    shape: list[int] = []
    batch_at = batch_axes(spec.shape)
    for axis, dim in enumerate(spec.shape):
        if isinstance(dim, int):
            shape.append(dim)
        elif axis in batch_at:
            shape.append(batch)
        elif dim in dims:
            shape.append(dims[dim])
        else:
            raise LoadError(
                f"input '{spec.name}' has the named dimension '{dim}' at axis {axis}; random data"
                f" needs its size: set `dims: {{{dim}: N}}` on the dataset"
            )
    return tuple(shape)


def oversized(model: ModelSpec, dataset: DatasetSpec, batch: int | None, budget: int) -> str | None:
    """The arithmetic, when a random dataset's inputs for one case would exceed `budget` bytes."""
    if dataset.kind != "random" or batch is None or not model.inputs:
        return None
    samples = dataset.samples or DEFAULT_RANDOM_SAMPLES
    terms, total = [], 0
    for spec in model.inputs:
        try:
            shape = concrete_shape(spec, batch, dataset.dims)
        except LoadError:
            return None  # reported with its own message when the case runs
        size = numpy_dtype(spec.dtype).itemsize
        total += samples * math.prod(shape) * size
        terms.append(f"{spec.name}: {samples} × {list(shape)} × {size} B")
    if total <= budget:
        return None
    return (f"inputs would take {_bytes(total)} ({'; '.join(terms)}), over the budget of "
            f"{_bytes(budget)} per case; check the shapes, or raise --max-input-mb")


def _bytes(count: int) -> str:
    return f"{count / (1 << 30):.1f} GiB" if count >= 1 << 30 else f"{count / (1 << 20):.1f} MiB"
