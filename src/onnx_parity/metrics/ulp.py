"""ulp: the largest distance between the reference's and the actual values in units in the last
place of the output's own dtype, exactly, on their bit patterns. Each value's bits map to an
ordered integer (the magnitude's bits, negated for a negative sign), so +0 and -0 are 0 apart
and adjacent floats 1 apart, across zero too. It is for bit-exactness claims: `ulp: 0` holds
only where every value is the same float.

A NaN, +inf or -inf counts as placed, as element by element: the same on both sides at an
index is 0 apart (NaN's payload aside); on one side only it makes the metric NaN, which fails.
A float dtype of 1, 2, 4 or 8 bytes is measured (float16, bfloat16, float32, float64, the
float8s); any other (a platform's long double) is NaN. Measured only where it gates."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

from onnx_parity.metrics.base import Array, OneNumber, Samples, samples, whole

_UNSIGNED = {1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64"}


def ordered(values: Array) -> Array:
    """The values' bit patterns as int64s in the floats' order: the magnitude's bits, negated
    for a negative sign."""
    import numpy as np

    size = values.dtype.itemsize
    bits = np.ascontiguousarray(values).view(_UNSIGNED[size]).astype(np.uint64)
    sign = np.uint64(1) << np.uint64(8 * size - 1)
    magnitude = (bits & (sign - np.uint64(1))).astype(np.int64)
    return np.where((bits & sign) != 0, -magnitude, magnitude)


def of(pairs: Sequence[tuple[Array, Array]]) -> float:
    """The largest distance in ulps of the output's dtype over every element of every sample."""
    return measure(samples(pairs))


def measure(wide: Samples) -> float:
    import numpy as np

    largest = 0
    for (reference, actual), (r64, a64) in zip(wide.given, wide.pairs, strict=True):
        reference, actual = np.asarray(reference), np.asarray(actual)
        if (reference.shape != actual.shape or reference.dtype != actual.dtype
                or reference.dtype.itemsize not in _UNSIGNED):
            return math.nan
        if not reference.size:
            continue
        if not wide.clean:
            placed_r, placed_a = ~np.isfinite(r64), ~np.isfinite(a64)
            same = (np.isnan(r64) & np.isnan(a64)) | (r64 == a64)
            if ((placed_r | placed_a) & ~same).any():
                return math.nan
            keep = ~(placed_r | placed_a)
            reference, actual = reference[keep], actual[keep]
            if not reference.size:
                continue
        low, high = ordered(reference), ordered(actual)
        # The larger minus the smaller as uint64: exact, as two int64s' distance always fits.
        apart = (np.maximum(low, high).view(np.uint64) - np.minimum(low, high).view(np.uint64))
        largest = max(largest, int(apart.max()))
    return float(largest)


class Ulp(OneNumber):
    key = "ulp"
    better: Literal["higher", "lower"] = "lower"
    always = False

    def schema(self) -> dict[str, Any]:
        return {
            "title": "Largest distance in ulps",
            "description": "The largest distance between the output's and the reference's "
            "values, in units in the last place of the output's dtype, must be at most this "
            "(0: the same floats).",
            "type": "integer", "minimum": 0,
        }

    def read(self, raw: Any) -> Any | None:
        return whole(raw)

    def measure(self, samples: Samples, setting: Any | None) -> float:
        return measure(samples)

    def words(self, name: str) -> str:
        return "ULP distance"

    def value_text(self, value: float) -> str:
        return f"{value:.0f}" if math.isfinite(value) else f"{value}"

    def units(self, value: float, threshold: float) -> float:
        if threshold > 0:
            return value / threshold
        return math.inf if value > 0 else 0.0

    def unit(self, name: str, threshold: float) -> str:
        return f"ULP distance over the {self.threshold_text(threshold)} allowed"


ULP = Ulp()
