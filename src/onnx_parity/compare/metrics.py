"""The metrics reduced precision is judged by, per output: cosine similarity, SQNR and top-k
agreement. Pure numpy, over float64 copies; each has its edge cases fixed here and pinned by
tests against a plain reference:

- cosine: over every row of every sample (a row is one index of the first axis; an output of
  rank 0 or 1 is one row), the smallest <r, a> / (|r| |a|). Two zero rows are identical (1.0);
  a zero row against a non-zero one is 0.0. A NaN or infinity in a row makes it NaN.
- sqnr_db: 10 * log10(sum r^2 / sum (r - a)^2) over every element of every sample. No noise is
  +inf (whatever the signal); noise with no signal is -inf. A NaN or infinity makes it NaN.
- topk: the share of rows, along the last axis (every leading axis flattened into rows), whose
  k largest values sit at the same indices in both; among equal values the lower index ranks
  first, on both sides. A row with a NaN never agrees.

A NaN metric fails every threshold.

Two figures describe a floating output for the baseline comparison: its scale (the largest
finite |expected|) and the histogram of |actual - expected| in decades. `epsilon` is every
float dtype's machine epsilon, for whatever judges an error against rounding (the baseline's
noise floor, localization's "within rounding").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from onnx_parity.compare.elements import kind_of
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


def _wide(values: Array) -> Array:
    return np.asarray(values, dtype=np.float64)


def _rows(values: Array) -> Array:
    """A sample's output as rows: its first axis, the rest flattened."""
    wide = _wide(values)
    if wide.ndim <= 1:
        return wide.reshape(1, -1)
    # math.prod of the shape's ints: the same count, without numpy's call into a reduction
    return wide.reshape(wide.shape[0], math.prod(wide.shape[1:]))


def cosine(pairs: Sequence[tuple[Array, Array]]) -> float:
    """The smallest cosine similarity over every row of every (reference, actual) sample."""
    smallest = math.inf
    for reference, actual in pairs:
        r, a = _rows(reference), _rows(actual)
        if r.shape != a.shape or not (np.isfinite(r).all() and np.isfinite(a).all()):
            return math.nan
        if not r.size:
            continue
        # One floating-point state for the norms and the division: the values are finite, so
        # the norms can only overflow (ignored) or underflow (ignored by default too)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore", under="ignore"):
            norm_r, norm_a = np.linalg.norm(r, axis=1), np.linalg.norm(a, axis=1)
            both = (norm_r > 0) & (norm_a > 0)
            values = np.where((norm_r == 0) & (norm_a == 0), 1.0, 0.0)
            scaled = np.einsum("ij,ij->i", r / np.where(both, norm_r, 1.0)[:, None],
                               a / np.where(both, norm_a, 1.0)[:, None])
        values = np.where(both, scaled, values)
        smallest = min(smallest, float(values.min()))
    return 1.0 if smallest == math.inf else smallest


def sqnr_db(pairs: Sequence[tuple[Array, Array]]) -> float:
    """Signal-to-quantization-noise ratio in dB over every element of every sample."""
    signal = noise = 0.0
    for reference, actual in pairs:
        r, a = _wide(reference), _wide(actual)
        if r.shape != a.shape or not (np.isfinite(r).all() and np.isfinite(a).all()):
            return math.nan
        with np.errstate(over="ignore"):  # past float64's range is infinite, and says so
            signal += float(np.sum(r * r))
            noise += float(np.sum((r - a) ** 2))
    if math.isinf(signal) and math.isinf(noise):
        return math.nan
    if noise == 0.0:
        return math.inf
    ratio = signal / noise
    if ratio == 0.0:
        return -math.inf
    return math.inf if math.isinf(ratio) else 10.0 * math.log10(ratio)


def top_indices(rows: Array, k: int) -> Array:
    """Per row, the indices of the k largest values, sorted; among equal values the lower
    index ranks first (a stable sort of the negated values)."""
    order = np.argsort(-rows, axis=-1, kind="stable")[..., :k]
    return np.sort(order, axis=-1)


def topk_agreement(pairs: Sequence[tuple[Array, Array]], k: int) -> float:
    """The share of rows (along the last axis) whose top-k indices agree."""
    agree = total = 0
    for reference, actual in pairs:
        r, a = _wide(reference), _wide(actual)
        if r.shape != a.shape:
            return math.nan
        if not r.size:
            continue
        rows_r = r.reshape(-1, r.shape[-1]) if r.ndim else r.reshape(1, 1)
        rows_a = a.reshape(-1, a.shape[-1]) if a.ndim else a.reshape(1, 1)
        clean = ~(np.isnan(rows_r).any(axis=1) | np.isnan(rows_a).any(axis=1))
        same = (top_indices(rows_r, k) == top_indices(rows_a, k)).all(axis=1)
        agree += int(np.count_nonzero(same & clean))
        total += rows_r.shape[0]
    return agree / total if total else math.nan


def holds(value: float, threshold: float) -> bool:
    """`value >= threshold`, NaN failing."""
    return not math.isnan(value) and value >= threshold


# Decades of |actual - expected|: [0, 1e-10), [1e-10, 1e-9), ..., [1e1, inf].
HISTOGRAM_EDGES: tuple[float, ...] = (0.0, *(10.0 ** p for p in range(-10, 2)), math.inf)


def scale(pairs: Sequence[tuple[Array, Array]]) -> float:
    """The largest finite |expected| over every sample (0.0 when there is none)."""
    largest = 0.0
    for expected, _ in pairs:
        magnitudes = np.abs(_wide(expected))
        finite = magnitudes[np.isfinite(magnitudes)]
        if finite.size:
            largest = max(largest, float(finite.max()))
    return largest


def error_histogram(pairs: Sequence[tuple[Array, Array]]) -> Histogram:
    """|actual - expected| of every element of every sample, counted per decade."""
    inner = np.asarray(HISTOGRAM_EDGES[1:-1])
    counts = np.zeros(len(HISTOGRAM_EDGES) - 1, dtype=np.int64)
    nonfinite = 0
    for expected, actual in pairs:
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(_wide(actual) - _wide(expected)).ravel()
        finite = np.isfinite(diff)
        nonfinite += int(diff.size - np.count_nonzero(finite))
        counts += np.bincount(np.searchsorted(inner, diff[finite], side="right"),
                              minlength=counts.size)
    return Histogram(edges=HISTOGRAM_EDGES, counts=tuple(int(c) for c in counts),
                     nonfinite=nonfinite)
