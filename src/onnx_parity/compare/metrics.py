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
from typing import Any, NamedTuple

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


class _Wide(NamedTuple):
    """An output's samples as float64 copies, (reference, actual) each, made once for every
    metric, and whether both sides hold finite values only: then no metric looks for a NaN or
    an infinity again (a small output's metrics are mostly such calls)."""

    pairs: list[tuple[Array, Array]]
    clean: bool


def _widened(pairs: Sequence[tuple[Array, Array]]) -> _Wide:
    wide = [(_wide(r), _wide(a)) for r, a in pairs]
    clean = all(np.isfinite(r).all() and np.isfinite(a).all() for r, a in wide)
    return _Wide(wide, clean)


class Measures(NamedTuple):
    """Every figure a floating output records: the metrics by name, its scale, its histogram."""

    metrics: dict[str, float]
    scale: float
    histogram: Histogram


def measures(pairs: Sequence[tuple[Array, Array]], k: int) -> Measures:
    """cosine, sqnr_db and top`k` (NaN for a scalar output), the scale and the histogram of
    one output's samples, from one float64 copy of them."""
    wide = _widened(pairs)
    top = _topk(wide, k) if wide.pairs[0][0].ndim else math.nan
    return Measures({"cosine": _cosine(wide), "sqnr_db": _sqnr_db(wide), f"top{k}": top},
                    _scale(wide), _histogram(wide))


def _rows(wide: Array) -> Array:
    """A sample's output as rows: its first axis, the rest flattened."""
    if wide.ndim <= 1:
        return wide.reshape(1, -1)
    # math.prod of the shape's ints: the same count, without numpy's call into a reduction
    return wide.reshape(wide.shape[0], math.prod(wide.shape[1:]))


def cosine(pairs: Sequence[tuple[Array, Array]]) -> float:
    """The smallest cosine similarity over every row of every (reference, actual) sample."""
    return _cosine(_widened(pairs))


def _cosine(wide: _Wide) -> float:
    smallest = math.inf
    for reference, actual in wide.pairs:
        r, a = _rows(reference), _rows(actual)
        if r.shape != a.shape or not wide.clean:
            return math.nan
        if not r.size:
            continue
        # One floating-point state for the norms and the division: the values are finite, so
        # the norms can only overflow (ignored) or underflow (ignored by default too). A norm
        # is numpy's for a vector, sqrt(sum(x * x)), without its dispatch on `ord`.
        with np.errstate(invalid="ignore", divide="ignore", over="ignore", under="ignore"):
            norm_r = np.sqrt(np.add.reduce(r * r, axis=1))
            norm_a = np.sqrt(np.add.reduce(a * a, axis=1))
            both = (norm_r > 0) & (norm_a > 0)
            if both.all():  # no zero row: nothing to stand in for it
                values = np.einsum("ij,ij->i", r / norm_r[:, None], a / norm_a[:, None])
            else:
                values = np.where((norm_r == 0) & (norm_a == 0), 1.0, 0.0)
                scaled = np.einsum("ij,ij->i", r / np.where(both, norm_r, 1.0)[:, None],
                                   a / np.where(both, norm_a, 1.0)[:, None])
                values = np.where(both, scaled, values)
        smallest = min(smallest, float(values.min()))
    return 1.0 if smallest == math.inf else smallest


def sqnr_db(pairs: Sequence[tuple[Array, Array]]) -> float:
    """Signal-to-quantization-noise ratio in dB over every element of every sample."""
    return _sqnr_db(_widened(pairs))


def _sqnr_db(wide: _Wide) -> float:
    signal = noise = 0.0
    for r, a in wide.pairs:
        if r.shape != a.shape or not wide.clean:
            return math.nan
        with np.errstate(over="ignore"):  # past float64's range is infinite, and says so
            signal += float((r * r).sum())
            noise += float(((r - a) ** 2).sum())
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
    return _topk(_widened(pairs), k)


def _topk(wide: _Wide, k: int) -> float:
    agree = total = 0
    for r, a in wide.pairs:
        if r.shape != a.shape:
            return math.nan
        if not r.size:
            continue
        rows_r = r.reshape(-1, r.shape[-1]) if r.ndim else r.reshape(1, 1)
        rows_a = a.reshape(-1, a.shape[-1]) if a.ndim else a.reshape(1, 1)
        if wide.clean and k == 1:
            # The top one is the first largest value, as argmax finds it (no NaN here).
            same = rows_r.argmax(axis=-1) == rows_a.argmax(axis=-1)
        else:
            clean = ~(np.isnan(rows_r).any(axis=1) | np.isnan(rows_a).any(axis=1))
            same = (top_indices(rows_r, k) == top_indices(rows_a, k)).all(axis=1) & clean
        agree += int(np.count_nonzero(same))
        total += rows_r.shape[0]
    return agree / total if total else math.nan


def holds(value: float, threshold: float) -> bool:
    """`value >= threshold`, NaN failing."""
    return not math.isnan(value) and value >= threshold


# Decades of |actual - expected|: [0, 1e-10), [1e-10, 1e-9), ..., [1e1, inf].
HISTOGRAM_EDGES: tuple[float, ...] = (0.0, *(10.0 ** p for p in range(-10, 2)), math.inf)
_INNER_EDGES = np.asarray(HISTOGRAM_EDGES[1:-1])


def scale(pairs: Sequence[tuple[Array, Array]]) -> float:
    """The largest finite |expected| over every sample (0.0 when there is none)."""
    return _scale(_widened(pairs))


def _scale(wide: _Wide) -> float:
    largest = 0.0
    for expected, _ in wide.pairs:
        magnitudes = np.abs(expected)
        finite = magnitudes if wide.clean else magnitudes[np.isfinite(magnitudes)]
        if finite.size:
            largest = max(largest, float(finite.max()))
    return largest


def error_histogram(pairs: Sequence[tuple[Array, Array]]) -> Histogram:
    """|actual - expected| of every element of every sample, counted per decade."""
    return _histogram(_widened(pairs))


def _histogram(wide: _Wide) -> Histogram:
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
