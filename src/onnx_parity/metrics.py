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
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

Array = np.ndarray[Any, Any]


def _wide(values: Array) -> Array:
    return np.asarray(values, dtype=np.float64)


def _rows(values: Array) -> Array:
    """A sample's output as rows: its first axis, the rest flattened."""
    wide = _wide(values)
    return wide.reshape(1, -1) if wide.ndim <= 1 else wide.reshape(wide.shape[0], -1)


def cosine(pairs: Sequence[tuple[Array, Array]]) -> float:
    """The smallest cosine similarity over every row of every (reference, actual) sample."""
    smallest = math.inf
    for reference, actual in pairs:
        r, a = _rows(reference), _rows(actual)
        if r.shape != a.shape:
            return math.nan
        for row_r, row_a in zip(r, a, strict=True):
            if not (np.isfinite(row_r).all() and np.isfinite(row_a).all()):
                return math.nan
            norm_r, norm_a = float(np.linalg.norm(row_r)), float(np.linalg.norm(row_a))
            if norm_r == 0.0 and norm_a == 0.0:
                value = 1.0
            elif norm_r == 0.0 or norm_a == 0.0:
                value = 0.0
            else:
                value = float(np.dot(row_r / norm_r, row_a / norm_a))
            smallest = min(smallest, value)
    return 1.0 if smallest == math.inf else smallest


def sqnr_db(pairs: Sequence[tuple[Array, Array]]) -> float:
    """Signal-to-quantization-noise ratio in dB over every element of every sample."""
    signal = noise = 0.0
    for reference, actual in pairs:
        r, a = _wide(reference), _wide(actual)
        if r.shape != a.shape or not (np.isfinite(r).all() and np.isfinite(a).all()):
            return math.nan
        signal += float(np.sum(r * r))
        noise += float(np.sum((r - a) ** 2))
    if noise == 0.0:
        return math.inf
    if signal == 0.0:
        return -math.inf
    return 10.0 * math.log10(signal / noise)


def top_indices(row: Array, k: int) -> frozenset[int]:
    """The indices of the k largest values; among equal values the lower index first."""
    order = np.lexsort((np.arange(row.size), -row))  # by value descending, then index
    return frozenset(int(i) for i in order[:k])


def topk_agreement(pairs: Sequence[tuple[Array, Array]], k: int) -> float:
    """The share of rows (along the last axis) whose top-k indices agree."""
    agree = total = 0
    for reference, actual in pairs:
        r, a = _wide(reference), _wide(actual)
        if r.shape != a.shape:
            return math.nan
        rows_r = r.reshape(-1, r.shape[-1]) if r.ndim else r.reshape(1, 1)
        rows_a = a.reshape(-1, a.shape[-1]) if a.ndim else a.reshape(1, 1)
        for row_r, row_a in zip(rows_r, rows_a, strict=True):
            total += 1
            if np.isnan(row_r).any() or np.isnan(row_a).any():
                continue
            agree += top_indices(row_r, k) == top_indices(row_a, k)
    return agree / total if total else math.nan


def holds(value: float, threshold: float) -> bool:
    """`value >= threshold`, NaN failing."""
    return not math.isnan(value) and value >= threshold
