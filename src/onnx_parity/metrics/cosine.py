"""cosine: over every row of every sample (a row is one index of the first axis; an output of
rank 0 or 1 is one row), the smallest <r, a> / (|r| |a|). Two zero rows are identical (1.0); a
zero row against a non-zero one is 0.0. A NaN or infinity in a row makes it NaN."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from onnx_parity.metrics.base import Array, Samples, Share, samples


def _rows(wide: Array) -> Array:
    """A sample's output as rows: its first axis, the rest flattened."""
    if wide.ndim <= 1:
        return wide.reshape(1, -1)
    # math.prod of the shape's ints: the same count, without numpy's call into a reduction
    return wide.reshape(wide.shape[0], math.prod(wide.shape[1:]))


def of(pairs: Sequence[tuple[Array, Array]]) -> float:
    """The smallest cosine similarity over every row of every (reference, actual) sample."""
    return measure(samples(pairs))


def measure(wide: Samples) -> float:
    import numpy as np

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


class Cosine(Share):
    key = "cosine"

    def schema(self) -> dict[str, Any]:
        return {
            "title": "Smallest cosine similarity",
            "description": "Over every row of every sample, the cosine similarity of the "
            "output with the reference must be at least this.",
            "type": "number", "minimum": -1, "maximum": 1,
        }

    def measure(self, samples: Samples, setting: Any | None) -> float:
        return measure(samples)

    def value_text(self, value: float) -> str:
        return f"{value:.4f}"


COSINE = Cosine()
