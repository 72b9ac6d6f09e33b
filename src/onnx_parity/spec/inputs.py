"""The spec's checks of a model's inputs: shapes, dtypes and value ranges as `InputSpec`s, the
sizes random data needs for named dimensions, and recorded data where there is no PyTorch
reference."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from onnx_parity.spec.entries import Checker
from onnx_parity.spec.model import DEFAULT_DTYPE, DTYPES, DatasetSpec, InputSpec, batch_axes
from onnx_parity.spec.schema import DIM_PATTERN
from onnx_parity.spec.values import dim, items, mapping, number, whole
from onnx_parity.spec.violations import quoted
from onnx_parity.spec.yamlnodes import NodePath

_INT_RANGES = {
    "int8": (-(2**7), 2**7), "uint8": (0, 2**8), "int16": (-(2**15), 2**15),
    "int32": (-(2**31), 2**31), "int64": (-(2**63), 2**63),
}


def check_reference_data(checks: Checker, base: NodePath, entry: dict[str, Any],
                          names: tuple[str, ...], datasets: Mapping[str, DatasetSpec]) -> None:
    """Without a PyTorch model, expected outputs can only come from recorded data."""
    place = checks.place(base)
    own = "datasets" in entry
    for index, name in enumerate(names):
        dataset = datasets.get(name)
        if dataset is None or dataset.kind != "random":
            continue
        origin = "" if own else " (from defaults)"
        checks.report((*base, "datasets", index) if own else base,
                    f"{place} has no 'torch', so its expected outputs must come from its "
                    f"data, but dataset {quoted(name)}{origin} is of kind random; use an "
                    "npz or onnx-test-data dataset with reference outputs, or add 'torch'")


def check_dim_sizes(checks: Checker, base: NodePath, inputs: dict[str, Any],
                     datasets: list[DatasetSpec]) -> None:
    """Random data needs a size for each named dim but the batch (shapes.concrete_shape)."""
    for name, entry, shape_path in _input_entries(inputs):
        shape = items(entry.get("shape"))
        batch = batch_axes(shape)
        for axis, size in enumerate(shape):
            if axis in batch or not isinstance(size, str) or not re.match(DIM_PATTERN, size):
                continue
            for dataset in datasets:
                if dataset.kind == "random" and size not in dataset.dims:
                    path = (*base, "inputs", name, *shape_path, axis)
                    checks.report(path, f"{checks.place(path)}: random data needs a size for the "
                                f"named dimension '{size}' at axis {axis}: set "
                                f"dims: {{{size}: N}} on dataset {quoted(dataset.name)}")


def inputs_of(checks: Checker, base: NodePath, raw: dict[str, Any]) -> tuple[InputSpec, ...]:
    inputs = []
    for name, entry, _ in _input_entries(raw):
        path = (*base, "inputs", name)
        shape = tuple(d for d in (dim(d) for d in items(entry.get("shape"))) if d is not None)
        dtype = entry.get("dtype", DEFAULT_DTYPE)
        dtype = dtype if dtype in DTYPES else DEFAULT_DTYPE
        low, high = _input_range(checks, path, entry, dtype)
        inputs.append(InputSpec(name=name, shape=shape, dtype=dtype, low=low, high=high))
    return tuple(inputs)


def _input_range(checks: Checker, path: NodePath, entry: dict[str, Any],
                 dtype: str) -> tuple[float | None, float | None]:
    place = checks.place(path)
    if dtype == "bool":
        for key in ("low", "high"):
            if key in entry:
                checks.report((*path, key), f"{place}: a bool input takes no '{key}'",
                            at_key=True)
        return None, None
    if dtype in _INT_RANGES:
        return _integer_range(checks, path, entry, dtype)
    low, high = number(entry.get("low")), number(entry.get("high"))
    if low is not None and high is not None and low >= high:
        checks.report((*path, "high"), f"{place}: low ({low:g}) must be below high ({high:g})")
    return low, high


def _integer_range(checks: Checker, path: NodePath, entry: dict[str, Any],
                   dtype: str) -> tuple[int | None, int | None]:
    place = checks.place(path)
    if "high" not in entry:
        checks.report(path, f"{place}: an integer input ({dtype}) needs 'high', the exclusive "
                          "upper bound of its random values (low defaults to 0), e.g. the "
                          "vocabulary size")
    for key in ("low", "high"):
        value = entry.get(key)
        if isinstance(value, float) and math.isfinite(value) and not value.is_integer():
            checks.report((*path, key), f"{place}: {key}: expected an integer for {dtype} "
                                      f"inputs, got {value!r}")
    low = whole(entry.get("low")) if "low" in entry else 0
    high = whole(entry.get("high"))
    if low is None or high is None:
        return low, high
    smallest, limit = _INT_RANGES[dtype]
    if low >= high:
        checks.report((*path, "high"), f"{place}: low ({low}) must be below high ({high}); "
                                     "high is exclusive")
    elif low < smallest or high > limit:
        checks.report(path, f"{place}: values in [{low}, {high}) do not fit {dtype}, which "
                          f"holds [{smallest}, {limit})")
    return low, high


def _input_entries(raw: Any) -> list[tuple[str, dict[str, Any], tuple[str, ...]]]:
    """Each input as a mapping, with the path of its shape inside it: `x: [batch, 10]` is
    short for `x: {shape: [batch, 10]}`."""
    found: list[tuple[str, dict[str, Any], tuple[str, ...]]] = []
    for name, entry in mapping(raw).items():
        if isinstance(entry, list):
            found.append((name, {"shape": entry}, ()))
        elif isinstance(entry, dict):
            found.append((name, entry, ("shape",)))
    return found
