"""SQNR in dB: 10 * log10(sum r^2 / sum (r - a)^2) over every element of every sample. No noise
is +inf (whatever the signal); noise with no signal is -inf. A NaN or infinity makes it NaN.

KEY is its name in a spec, in a report's metrics, and in localization's layer records, which
hold each layer's SQNR under it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from onnx_parity.metrics.base import Array, OneNumber, Samples, samples

KEY = "sqnr_db"


def of(pairs: Sequence[tuple[Array, Array]]) -> float:
    """Signal-to-quantization-noise ratio in dB over every element of every sample."""
    return measure(samples(pairs))


def measure(wide: Samples) -> float:
    import numpy as np

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


class Sqnr(OneNumber):
    key = KEY

    def schema(self) -> dict[str, Any]:
        return {
            "title": "Smallest SQNR in dB",
            "description": "10·log10(Σref² / Σ(ref−out)²) over the output must be at least this.",
            "type": "number",
        }

    def measure(self, samples: Samples, setting: Any | None) -> float:
        return measure(samples)

    def words(self, name: str) -> str:
        return "SQNR"

    def value_text(self, value: float) -> str:
        if math.isinf(value):
            return "inf dB" if value > 0 else "-inf dB"
        return f"{value:.1f} dB"

    def threshold_text(self, threshold: float) -> str:
        return f"{threshold:g} dB"

    def units(self, value: float, threshold: float) -> float:
        # Its shortfall in dB as a power ratio: the noise power over the noise allowed.
        if math.isfinite(value):
            return float(10.0 ** ((threshold - value) / 10.0))
        return 0.0 if value > 0 else math.inf

    def unit(self, name: str, threshold: float) -> str:
        return f"SQNR: noise power over the {self.threshold_text(threshold)} allowed"


SQNR = Sqnr()
