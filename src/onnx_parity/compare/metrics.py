"""The figures an output's comparison records beside its verdict: every metric of the registry
(onnx_parity/metrics) that is always measured or that its tolerance sets, from one float64 copy
of its samples, and two figures for the baseline comparison: its scale (the largest finite
|expected|) and the histogram of |actual - expected| in decades. A NaN metric fails every
threshold. `epsilon` is every float dtype's machine epsilon, for whatever judges an error
against rounding (the baseline's noise floor, localization's "within rounding").
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from onnx_parity.compare.elements import kind_of
from onnx_parity.metrics.base import Samples, samples
from onnx_parity.metrics.registry import METRICS
from onnx_parity.results import Histogram

Array = np.ndarray[Any, Any]
_NUMPY_FLOATS = (np.float16, np.float32, np.float64, np.longdouble)


def epsilon(dtype: np.dtype[Any] | str) -> float | None:
    """The machine epsilon of a float dtype, given as a dtype or by name: numpy's floats and
    ml_dtypes' (bfloat16, float8_*, ...). None for anything else (integers, booleans, strings,
    complex numbers, and names no library knows)."""
    if isinstance(dtype, str):
        try:
            dtype = np.dtype(dtype)
        except TypeError:
            import ml_dtypes  # registers bfloat16, float8_* and the rest by name

            try:
                dtype = np.dtype(dtype)
            except TypeError:
                return None
    if dtype.type in _NUMPY_FLOATS:
        return float(np.finfo(dtype).eps)
    if kind_of(dtype) != "float":
        return None
    import ml_dtypes

    try:
        return float(ml_dtypes.finfo(dtype).eps)  # type: ignore[no-untyped-call]  # untyped
    except ValueError:  # int4 and the like: castable to float64, but not floats
        return None


class Measures(NamedTuple):
    """Every figure a floating output records: the metrics by name, its scale, its histogram."""

    metrics: dict[str, float]
    scale: float
    histogram: Histogram


def measures(pairs: Sequence[tuple[Array, Array]], settings: Mapping[str, Any]) -> Measures:
    """Every metric measured on floating outputs, and those `settings` (tolerance key ->
    setting) add, by the names they are recorded under; the scale and the histogram of one
    output's samples, from one float64 copy of them."""
    wide = samples(pairs)
    found = {metric.name(settings.get(metric.key)): metric.measure(wide, settings.get(metric.key))
             for metric in METRICS if metric.always or metric.key in settings}
    return Measures(found, _scale(wide), _histogram(wide))


# Decades of |actual - expected|: [0, 1e-10), [1e-10, 1e-9), ..., [1e1, inf].
HISTOGRAM_EDGES: tuple[float, ...] = (0.0, *(10.0 ** p for p in range(-10, 2)), math.inf)
_INNER_EDGES = np.asarray(HISTOGRAM_EDGES[1:-1])


def scale(pairs: Sequence[tuple[Array, Array]]) -> float:
    """The largest finite |expected| over every sample (0.0 when there is none)."""
    return _scale(samples(pairs))


def _scale(wide: Samples) -> float:
    largest = 0.0
    for expected, _ in wide.pairs:
        magnitudes = np.abs(expected)
        finite = magnitudes if wide.clean else magnitudes[np.isfinite(magnitudes)]
        if finite.size:
            largest = max(largest, float(finite.max()))
    return largest


def error_histogram(pairs: Sequence[tuple[Array, Array]]) -> Histogram:
    """|actual - expected| of every element of every sample, counted per decade."""
    return _histogram(samples(pairs))


def _histogram(wide: Samples) -> Histogram:
    counts = np.zeros(len(HISTOGRAM_EDGES) - 1, dtype=np.int64)
    nonfinite = 0
    for expected, actual in wide.pairs:
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(actual - expected).ravel()
        finite = np.isfinite(diff)
        if finite.all():
            counts += np.bincount(_INNER_EDGES.searchsorted(diff, side="right"),
                                  minlength=counts.size)
            continue
        nonfinite += int(diff.size - np.count_nonzero(finite))
        counts += np.bincount(_INNER_EDGES.searchsorted(diff[finite], side="right"),
                              minlength=counts.size)
    return Histogram(edges=HISTOGRAM_EDGES, counts=tuple(counts.tolist()), nonfinite=nonfinite)
