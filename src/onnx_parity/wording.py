"""How numbers read, in every sentence the tool writes: one module, so that a case's message,
its annotation, its summary cell and its JUnit text say the same number the same way.

    fmt_measured  a measured error, two significant digits: 3.1e-2
    fmt_setting   a tolerance as the user would write it: 1e-4
    fmt_needed    an atol to suggest, rounded up so that pasting it passes: 7.0e-3
    fmt_ratio     how much an error grew or shrank: ×1000, ÷40
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, Decimal

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
    """Two element values with just enough digits to tell them apart (7 at least)."""
    for digits in range(7, 18):
        pair = fmt_value(expected, digits), fmt_value(actual, digits)
        if pair[0] != pair[1] or expected == actual:
            return pair
    return pair


def fmt_share(mismatches: int, elements: int) -> str:
    if not elements:
        return "0%"
    share = 100.0 * mismatches / elements
    if 0 < share < 0.01:
        return "<0.01%"
    return f"{share:.2f}%"


def fmt_shape(shape: tuple[int, ...] | None) -> str:
    return "?" if shape is None else "(" + ", ".join(str(d) for d in shape) + ")"


def fmt_ratio(ratio: float) -> str:
    """How much an error grew or shrank: ×1000, ×2.5, ÷40; "from 0" when it was zero."""
    if math.isinf(ratio):
        return "from 0"
    if ratio >= 1:
        return f"×{ratio:.0f}" if ratio >= 10 else f"×{ratio:.1f}"
    if ratio <= 0:
        return "to 0"
    return f"÷{1 / ratio:.0f}" if 1 / ratio >= 10 else f"÷{1 / ratio:.1f}"


def fmt_seconds(seconds: float) -> str:
    return f"{seconds:.2f}s" if math.isfinite(seconds) else "?s"


def tolerance_text(output: OutputComparison) -> str:
    return f"atol {fmt_setting(output.atol)} + rtol {fmt_setting(output.rtol)}·|e|"




def metric_words(name: str) -> str:
    """`sqnr_db` → "SQNR", `top5` → "top-5 agreement", `cosine` → "cosine"."""
    if name == "sqnr_db":
        return "SQNR"
    if name.startswith("top"):
        return f"top-{name[3:]} agreement"
    return name


def fmt_metric(name: str, value: float) -> str:
    """A metric's value: cosine to 4 digits (0.9995), SQNR in dB (31.2 dB), agreement as a
    share (0.97)."""
    if math.isnan(value):
        return "nan"
    if name == "sqnr_db":
        return "inf dB" if math.isinf(value) and value > 0 else (
            "-inf dB" if math.isinf(value) else f"{value:.1f} dB")
    if name == "cosine":
        return f"{value:.4f}"
    return f"{value:.3g}"


def fmt_threshold(name: str, value: float) -> str:
    """A metric's threshold as the user wrote it: 0.999, 20 dB."""
    return f"{value:g} dB" if name == "sqnr_db" else f"{value:g}"


def criteria_text(tolerance: Tolerance) -> str:
    """The metric criteria of a tolerance: "cosine ≥ 0.99, SQNR ≥ 30 dB"."""
    parts = [f"cosine ≥ {tolerance.cosine:g}"] if tolerance.cosine is not None else []
    if tolerance.sqnr_db is not None:
        parts.append(f"SQNR ≥ {tolerance.sqnr_db:g} dB")
    if tolerance.topk is not None:
        parts.append(f"top-{tolerance.topk.k} agreement ≥ {tolerance.topk.agreement:g}")
    return ", ".join(parts)
