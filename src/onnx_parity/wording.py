"""How numbers read, in every sentence the tool writes: one module, so that the same number
reads the same way in a case's message, its annotation, its summary cell and its JUnit text.

    fmt_measured     a measured error, two significant digits: 3.1e-2
    fmt_setting      a tolerance as the user would write it: 1e-4
    fmt_needed       an atol to suggest, rounded up so that pasting it passes: 7.0e-3
    fmt_ratio        how much an error grew or shrank: ×1000, ÷40

What is said about an output, from these numbers, is compare/sentences.py's.
"""

from __future__ import annotations

import functools
import math
from decimal import ROUND_CEILING, Decimal

from onnx_parity.metrics.registry import gating, named
from onnx_parity.results import OutputComparison, Tolerance


def _non_finite(x: float) -> str | None:
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return None


def _compact_exponent(text: str) -> str:
    mantissa, _, exponent = text.partition("e")
    return f"{mantissa}e{int(exponent)}"


def fmt_measured(x: float) -> str:
    """A measured error with two significant digits: 0.031 → "3.1e-2"."""
    special = _non_finite(x)
    if special is not None:
        return special
    if x == 0:
        return "0"
    return _compact_exponent(f"{x:.1e}")


# A run words the same few tolerances for every output of every case (the JUnit testcase, the
# message): each value once.
@functools.lru_cache(maxsize=256)
def fmt_setting(x: float) -> str:
    """A tolerance as the user would write it, in the shortest form that reads back exactly."""
    special = _non_finite(x)
    if special is not None:
        return special
    if x == 0:
        return "0"
    for digits in range(17):
        text = f"{x:.{digits}e}"
        if float(text) == x:
            return _compact_exponent(text)
    return repr(x)


def fmt_needed(x: float) -> str:
    """An atol to suggest, rounded *up* to two significant digits so that pasting it passes."""
    special = _non_finite(x)
    if special is not None:
        return special
    if x <= 0:
        return "0"
    nearest = f"{x:.1e}"
    if float(nearest) >= x:  # what the user types reads back as a float no smaller than x
        return _compact_exponent(nearest)
    exact = Decimal(x)  # the float's exact value, so the ceiling is never below it
    quantum = Decimal(1).scaleb(exact.adjusted() - 1)
    rounded = exact.quantize(quantum, rounding=ROUND_CEILING)
    return _compact_exponent(f"{float(rounded):.1e}")


def fmt_value(x: float | None, digits: int = 7) -> str:
    """An element's value, to `digits` significant digits."""
    if x is None:
        return "?"
    special = _non_finite(x)
    return special if special is not None else f"{x:.{digits}g}"


def fmt_pair(expected: float | None, actual: float | None) -> tuple[str, str]:
    """Two element values with the fewest digits (4 at least) that tell them apart."""
    full = fmt_value(expected, 17), fmt_value(actual, 17)
    if full[0] == full[1]:  # the same value (a passed output's worst element, most often):
        return full  # no fewer digits tell it apart either
    for digits in (4, 6, 9, 12):
        pair = fmt_value(expected, digits), fmt_value(actual, digits)
        if pair[0] != pair[1]:
            return pair
    return full


def fmt_share(mismatches: int, elements: int) -> str:
    if not elements:
        return "0%"
    share = 100.0 * mismatches / elements
    if 0 < share < 0.01:
        return "<0.01%"
    return f"{share:.2f}%"


def fmt_shape(shape: tuple[int, ...] | None) -> str:
    """A shape as numpy prints it: (2, 3), (5,), ()."""
    if shape is None:
        return "?"
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def fmt_index(index: tuple[int, ...]) -> str:
    """An element's index within its sample: [0, 4]."""
    return "[" + ", ".join(str(i) for i in index) + "]"


def fmt_ratio(ratio: float) -> str:
    """How much an error grew or shrank: ×1000, ×2.5, ÷40; "from 0" when it was zero."""
    if math.isinf(ratio):
        return "from 0"
    if ratio >= 1:
        return f"×{ratio:.0f}" if ratio >= 10 else f"×{ratio:.1f}"
    if ratio <= 0:
        return "to 0"
    return f"÷{1 / ratio:.0f}" if 1 / ratio >= 10 else f"÷{1 / ratio:.1f}"


def counted(n: int, word: str) -> str:
    """"1 step", "3 steps": a count with its noun, the plural an "s"."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def fmt_seconds(seconds: float) -> str:
    return f"{seconds:.2f}s" if math.isfinite(seconds) else "?s"


def tolerance_text(output: OutputComparison | Tolerance) -> str:
    """The element-by-element rule of an output's comparison, or of a tolerance."""
    return f"atol {fmt_setting(output.atol)} + rtol {fmt_setting(output.rtol)}·|e|"


def metric_words(name: str) -> str:
    """A metric's name as it reads (its metric's words): `sqnr_db` → "SQNR", `top5` → "top-5
    agreement", `cosine` → "cosine"; a name no metric owns as it is."""
    metric = named(name)
    return metric.words(name) if metric is not None else name


def fmt_metric(name: str, value: float) -> str:
    """A metric's value: cosine to 4 digits (0.9995), SQNR in dB (31.2 dB), agreement as a
    share (0.97), a ULP distance as a count (3)."""
    if math.isnan(value):
        return "nan"
    metric = named(name)
    return metric.value_text(value) if metric is not None else f"{value:.3g}"


def fmt_threshold(name: str, value: float) -> str:
    """A metric's threshold as the user wrote it: 0.999, 20 dB."""
    metric = named(name)
    return metric.threshold_text(value) if metric is not None else f"{value:g}"


def against(name: str, threshold: float, failed: bool = False) -> str:
    """How a metric's value stands to its threshold: "≥ 20 dB" / "< 20 dB" where higher is
    better, "≤ 4" / "> 4" where lower is."""
    metric = named(name)
    if metric is not None and metric.better == "lower":
        sign = ">" if failed else "≤"
    else:
        sign = "<" if failed else "≥"
    return f"{sign} {fmt_threshold(name, threshold)}"


def gates(tolerance: Tolerance) -> dict[str, float]:
    """The metric criteria of a tolerance, metric name -> threshold: {"cosine": 0.99}."""
    return {metric.name(setting): metric.threshold(setting)
            for metric, setting in gating(tolerance.metrics)}


def criterion_text(name: str, threshold: float) -> str:
    """One metric criterion: "cosine ≥ 0.99", "SQNR ≥ 30 dB", "top-5 agreement ≥ 0.9", "ULP
    distance ≤ 4"."""
    return f"{metric_words(name)} {against(name, threshold)}"


def criteria_text(tolerance: Tolerance) -> str:
    """The metric criteria of a tolerance: "cosine ≥ 0.99, SQNR ≥ 30 dB"."""
    return ", ".join(criterion_text(n, v) for n, v in gates(tolerance).items())


def fmt_ms(ms: float) -> str:
    """A time per call: 0.0123 → `0.012 ms`, 3.21 → `3.2 ms`, 1234 → `1234 ms`."""
    return f"{ms:.2g} ms" if ms < 1 else (f"{ms:.1f} ms" if ms < 100 else f"{ms:.0f} ms")
