"""How numbers read, in every sentence the tool writes, and every sentence about an output: one
module, so that a case's message, its annotation, its summary cell and its JUnit text say the
same thing the same way.

    fmt_measured     a measured error, two significant digits: 3.1e-2
    fmt_setting      a tolerance as the user would write it: 1e-4
    fmt_needed       an atol to suggest, rounded up so that pasting it passes: 7.0e-3
    fmt_ratio        how much an error grew or shrank: ×1000, ÷40
    output_sentence  an output's verdict from its figures and kind (results.OutputComparison)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from decimal import ROUND_CEILING, Decimal
from typing import Any

from onnx_parity.escape import one_line
from onnx_parity.results import OutputComparison, OutputKind, Tolerance


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
    """Two element values with the fewest digits (4 at least) that tell them apart."""
    for digits in (4, 6, 9, 12, 17):
        pair = fmt_value(expected, digits), fmt_value(actual, digits)
        if pair[0] != pair[1]:
            break
    return pair


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


def gates(tolerance: Tolerance) -> dict[str, float]:
    """The metric criteria of a tolerance, metric name -> threshold: {"cosine": 0.99}."""
    found = {"cosine": tolerance.cosine, "sqnr_db": tolerance.sqnr_db}
    if tolerance.topk is not None:
        found[f"top{tolerance.topk.k}"] = tolerance.topk.agreement
    return {name: value for name, value in found.items() if value is not None}


def criterion_text(name: str, threshold: float) -> str:
    """One metric criterion: "cosine ≥ 0.99", "SQNR ≥ 30 dB", "top-5 agreement ≥ 0.9"."""
    return f"{metric_words(name)} ≥ {fmt_threshold(name, threshold)}"


def criteria_text(tolerance: Tolerance) -> str:
    """The metric criteria of a tolerance: "cosine ≥ 0.99, SQNR ≥ 30 dB"."""
    return ", ".join(criterion_text(n, v) for n, v in gates(tolerance).items())


# -- sentences about an output: compare/ decides and records figures and a kind; everything said
# about an output is worded below (the case message and so the console line and the annotation,
# the summary cell, the JUnit text, the drift's path) ------------------------------------------


def output_sentence(o: OutputComparison) -> str:
    """The one sentence on one output: "logits: 13 of 80 elements (16.25%) out of tolerance;
    max abs 3.0e-2; worst at [0, 1, 3]: expected 0.1646, got 0.1946; atol 1e-5 + rtol
    1e-3·|e|; needs atol ≥ 3.0e-2"."""
    return f"{one_line(o.name)}: {_SAYS[o.verdict_kind](o)}"


def outputs_sentence(outputs: Sequence[OutputComparison]) -> str:
    """A case's message: its failing outputs' sentences, or a short all-clear."""
    failing = [output_sentence(o) for o in outputs if not o.passed]
    if failing:
        return "; ".join(failing)
    if not outputs:
        return "no outputs to compare"
    return f"all {len(outputs)} output{'s' if len(outputs) != 1 else ''} within tolerance"


def output_facts(o: OutputComparison) -> list[str]:
    """Every figure on one output, one a line, then its sentence: the long form (JUnit)."""
    lines = [
        f"output {one_line(o.name)}: {'passed' if o.passed else 'FAILED'} ({tolerance_text(o)})",
        f"  max abs {fmt_measured(o.max_abs)}, max rel {fmt_measured(o.max_rel)},"
        f" mean abs {fmt_measured(o.mean_abs)}",
        f"  mismatches {o.mismatches} of {o.elements} ({fmt_share(o.mismatches, o.elements)})",
    ]
    if o.metrics:
        gated = "; ".join(o.criteria)
        lines.append("  " + _metric_list(o, o.metrics) + (f" (gated by {gated})" if gated else ""))
    if o.worst_index is not None:
        lines.append(f"  worst element{_at(o)}{_values(o)}")
    lines.append(f"  {output_sentence(o)}")
    return lines


def error_phrase(o: OutputComparison) -> str:
    """How far off one compared tensor is, to follow "off by": "max abs 1.6e0 (atol 1e-4 +
    rtol 1e-3·|e|)", "shape (2,), expected (3,)", "NaN/Inf in 2 of 8 elements (...)"."""
    if o.expected_shape != o.actual_shape:
        return f"shape {fmt_shape(o.actual_shape)}, expected {fmt_shape(o.expected_shape)}"
    if o.required_atol is None:
        worst = ""
        if o.worst_expected is not None and o.worst_actual is not None:
            worst = " (expected {}, got {})".format(*fmt_pair(o.worst_expected, o.worst_actual))
        return f"NaN/Inf in {o.mismatches} of {o.elements} elements{worst}"
    return f"max abs {fmt_measured(o.max_abs)} ({tolerance_text(o)})"


def error_brief(o: OutputComparison) -> str:
    """The shortest word on how far off a tensor is: "max abs 1.6e0", "NaN/Inf"."""
    if o.expected_shape != o.actual_shape:
        return "a different shape"
    return f"max abs {fmt_measured(o.max_abs)}" if o.required_atol is not None else "NaN/Inf"


def parting_words(what: str, expected: Any, actual: Any) -> tuple[str, str]:
    """What two structures hold where they part (compare/structured.py), as "expected …, got
    …" quotes them: `what` is "node" (a map, a sequence, a tensor, None), "keys", "length" or
    "shape"."""
    if what == "keys":
        return "the keys " + ", ".join(map(repr, expected)), ", ".join(map(repr, actual))
    if what == "length":
        return f"{expected} elements", str(actual)
    if what == "shape":
        return f"shape {fmt_shape(expected)}", fmt_shape(actual)
    return _NODES[expected], _NODES[actual]


_NODES = {"map": "a map", "sequence": "a sequence", "tensor": "a tensor", "None": "nothing (None)"}


def _count(o: OutputComparison) -> str:
    return f"{o.mismatches} of {o.elements} elements ({fmt_share(o.mismatches, o.elements)})"


def _at(o: OutputComparison) -> str:
    """Where the worst element sits: " at [0, 4]", or " at sample 1 [0, 4]" over samples."""
    if o.worst_index is None:
        return ""
    sample, rest = o.worst_index[0], tuple(o.worst_index[1:])
    position = fmt_index(rest) if rest else ""
    if o.samples > 1 or sample > 0:
        return f" at sample {sample}" + (f" {position}" if position else "")
    return f" at {position}" if position else ""


def _worst(word: str, o: OutputComparison) -> list[str]:
    """"worst at [0, 4]: expected 1, got 1.5", where a worst element was recorded."""
    return [f"{word}{_at(o)}{_values(o)}"] if o.worst_index is not None else []


def _values(o: OutputComparison) -> str:
    if o.quoted is not None:
        expected, actual = o.quoted
    elif o.worst_expected is not None or o.worst_actual is not None:
        expected, actual = fmt_pair(o.worst_expected, o.worst_actual)
    else:
        return ""
    return f": expected {expected}, got {actual}"


def _needs(o: OutputComparison) -> str:
    if o.required_atol is None:
        return "no atol can pass (NaN/Inf placement differs)"
    if math.isinf(o.required_atol):
        return "no finite atol can pass"
    return f"needs atol ≥ {fmt_needed(o.required_atol)}"


def _metric_list(o: OutputComparison, names: Iterable[str]) -> str:
    return ", ".join(f"{metric_words(n)} {fmt_metric(n, o.metrics[n])}" for n in names
                     if n in o.metrics)


def _gated(o: OutputComparison, failing_only: bool) -> str:
    """The metric criteria with their values: "cosine 0.9812 < 0.99; SQNR 31.2 dB ≥ 20 dB",
    then in brackets the metrics that did not gate (or, failing_only, were not shown)."""
    if not o.thresholds:  # recorded before thresholds were: the values and the criteria
        return _metric_list(o, o.metrics) + (f" ({'; '.join(o.criteria)})" if o.criteria else "")
    shown = [n for n in o.thresholds if n in o.failed or not (failing_only and o.failed)]
    text = "; ".join(
        f"{metric_words(n)} {fmt_metric(n, o.metrics.get(n, math.nan))}"
        f" {'<' if n in o.failed else '≥'} {fmt_threshold(n, o.thresholds[n])}" for n in shown)
    rest = _metric_list(o, [n for n, v in o.metrics.items()
                            if n not in shown and not math.isnan(v)])
    return text + (f" ({rest})" if rest else "")


def _leaf(o: OutputComparison) -> str:
    """Sequence / map outputs: the worst element by its path."""
    if not o.where or o.worst_index is None:
        return ""
    sample = f" of sample {o.worst_index[0]}" if o.samples > 1 else ""
    return f"; worst element at {o.name}{o.where}{sample}"


def _in_sample(o: OutputComparison) -> str:
    return f" in sample {o.sample}" if o.sample is not None else ""


def _passed(o: OutputComparison) -> str:
    parts = [] if o.metric_only else [_within(o)]
    if o.thresholds or o.metric_only:
        parts.append(_gated(o, failing_only=False))
    return "; ".join(parts)


def _within(o: OutputComparison) -> str:
    if o.elements == 0:
        return "empty output, nothing to compare"
    if o.expected_dtype in ("bool", "string"):
        return f"all {o.elements} elements equal"
    if o.finite == 0:
        return f"all {o.elements} elements NaN/Inf in the same places"
    return f"max abs {fmt_measured(o.max_abs)} within {tolerance_text(o)}"


def _elements(o: OutputComparison) -> str:
    parts = [f"{_count(o)} out of tolerance", f"max abs {fmt_measured(o.max_abs)}",
             *_worst("worst", o), tolerance_text(o), _needs(o)]
    if o.failed:
        parts.append(_gated(o, failing_only=True))
    return "; ".join(parts) + _leaf(o)


def _exact(o: OutputComparison) -> str:
    noun = "booleans" if o.expected_dtype == "bool" else "strings"
    return "; ".join([f"{_count(o)} differ", *_worst("first", o),
                      f"{noun} must match exactly"]) + _leaf(o)


def _nonfinite(o: OutputComparison) -> str:
    placement = o.placement or o.mismatches
    finite = o.finite if o.finite is not None else o.elements - placement
    parts = [f"{_count(o)} out of tolerance",
             f"NaN/Inf placement differs in {placement} element{'s' * (placement != 1)}"
             + "".join(f", {first}" for first in _worst("first", o))]
    if finite:
        parts.append(f"max abs {fmt_measured(o.max_abs)} over finite elements")
    parts += [tolerance_text(o), _needs(o)]
    return "; ".join(parts) + _leaf(o)


def _powerless(o: OutputComparison) -> str:
    def largest(label: str, x: float | None) -> str:
        return f" ({label}{fmt_measured(x)})" if x is not None else ""

    return (f"no power: every element of the reference{largest('largest |e| ', o.scale)} and of"
            f" the output{largest('largest ', o.actual_scale)} lies within atol"
            f" {fmt_setting(o.atol)} of zero, so any output of that size would pass; check it"
            " with a relative tolerance (atol: 0), a metric such as cosine, or weights that give"
            " outputs of a real scale")


def _shape(o: OutputComparison) -> str:
    return (f"shape differs{_in_sample(o)}: expected {fmt_shape(o.expected_shape)},"
            f" got {fmt_shape(o.actual_shape)}")


def _mixed(o: OutputComparison) -> str:
    first, other = o.quoted or (o.expected_dtype, "?")
    return (f"the reference's dtype changes between samples: {first} in sample 0, {other}"
            f"{_in_sample(o)}")


def _structure(o: OutputComparison) -> str:
    expected, actual = o.quoted or ("?", "?")
    return (f"structure differs{_in_sample(o)}: at {o.where or 'the top'}: expected {expected},"
            f" got {actual}")


_SAYS: dict[OutputKind, Callable[[OutputComparison], str]] = {
    "passed": _passed, "elements": _elements, "exact": _exact, "nonfinite": _nonfinite,
    "metric": lambda o: _gated(o, failing_only=True) + _leaf(o),
    "powerless": _powerless, "shape": _shape, "mixed": _mixed, "structure": _structure,
    "dtype": lambda o: (f"dtype differs{_in_sample(o)}: expected {o.expected_dtype},"
                        f" got {o.actual_dtype}"),
    "unsupported": lambda o: f"cannot compare {o.expected_dtype} outputs",
}
