"""The words and numbers every report uses to explain a case: formatting, worst output, verdicts."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from decimal import ROUND_CEILING, Decimal
from typing import Any

from onnx_parity.report.escape import one_line
from onnx_parity.results import CaseResult, OutputComparison, RunReport, Status

VERDICT_WORDS: dict[Status, str] = {
    "passed": "PASSED",
    "failed": "FAILED",
    "error": "ERROR",
    "skipped": "SKIPPED",
}


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


def value_text(value: Any) -> str:
    """A free-form value (environment, details) as text: strings as they are, the rest as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def fmt_share(mismatches: int, elements: int) -> str:
    if not elements:
        return "0%"
    share = 100.0 * mismatches / elements
    if 0 < share < 0.01:
        return "<0.01%"
    return f"{share:.2f}%"


def fmt_shape(shape: tuple[int, ...] | None) -> str:
    return "?" if shape is None else "(" + ", ".join(str(d) for d in shape) + ")"


def fmt_seconds(seconds: float) -> str:
    return f"{seconds:.2f}s" if math.isfinite(seconds) else "?s"


def tolerance_text(output: OutputComparison) -> str:
    return f"atol {fmt_setting(output.atol)} + rtol {fmt_setting(output.rtol)}·|e|"


def output_severity(output: OutputComparison) -> tuple[int, int, float, float]:
    """Sort key, larger is worse: failing first, unfixable by atol first, then by the atol needed
    relative to the atol set (how far off it is), then by the plain error."""
    needed = output.required_atol
    if needed is None:
        ratio = math.inf
    elif output.atol > 0:
        ratio = needed / output.atol
    else:
        ratio = math.inf if needed > 0 else 0.0
    if math.isnan(ratio):
        ratio = math.inf
    max_abs = output.max_abs if not math.isnan(output.max_abs) else math.inf
    return (0 if output.passed else 1, 1 if needed is None else 0, ratio, max_abs)


def worst_output(outputs: Iterable[OutputComparison]) -> OutputComparison | None:
    """The output to show first: the failing one furthest from passing, or the passing one
    closest to its tolerance. Ties keep the outputs' own order."""
    worst: OutputComparison | None = None
    for output in outputs:
        if worst is None or output_severity(output) > output_severity(worst):
            worst = output
    return worst


def failing_outputs(case: CaseResult) -> list[OutputComparison]:
    """The case's failing outputs, worst first."""
    failing = [o for o in case.outputs if not o.passed]
    return sorted(failing, key=output_severity, reverse=True)


def output_verdict(output: OutputComparison) -> str:
    """One line on one output: its error against its tolerance, or why no atol can fix it."""
    name = one_line(output.name)
    if output.passed:
        return (f"{name}: max abs {fmt_measured(output.max_abs)}"
                f" within {tolerance_text(output)}")
    if output.required_atol is None:
        return f"{name}: {output.message or _unfixable_reason(output)}"
    return (
        f"{name}: max abs {fmt_measured(output.max_abs)} > {tolerance_text(output)}"
        f" (needs atol ≥ {fmt_needed(output.required_atol)});"
        f" {output.mismatches} of {output.elements} elements off"
        f" ({fmt_share(output.mismatches, output.elements)})"
    )


def _unfixable_reason(output: OutputComparison) -> str:
    if output.expected_shape != output.actual_shape:
        return (f"shape {fmt_shape(output.actual_shape)}, expected "
                f"{fmt_shape(output.expected_shape)}")
    if output.expected_dtype != output.actual_dtype:
        return f"dtype {output.actual_dtype}, expected {output.expected_dtype}"
    return f"NaN/Inf placement differs in {output.mismatches} of {output.elements} elements"


def output_details(output: OutputComparison) -> list[str]:
    """Every number on one output, one fact a line, for the long-form reports."""
    verdict = "passed" if output.passed else "FAILED"
    lines = [
        f"output {one_line(output.name)}: {verdict} ({tolerance_text(output)})",
        f"  max abs {fmt_measured(output.max_abs)}, max rel {fmt_measured(output.max_rel)},"
        f" mean abs {fmt_measured(output.mean_abs)}",
        f"  mismatches {output.mismatches} of {output.elements}"
        f" ({fmt_share(output.mismatches, output.elements)})",
    ]
    if output.required_atol is None:
        lines.append("  no atol passes (NaN/Inf placement, shape or dtype differ)")
    elif not output.passed:
        lines.append(f"  needs atol ≥ {fmt_needed(output.required_atol)} with rtol unchanged")
    if output.worst_index is not None:
        sample, *index = output.worst_index
        expected, actual = fmt_pair(output.worst_expected, output.worst_actual)
        lines.append(
            f"  worst element: sample {sample} at {fmt_shape(tuple(index))}:"
            f" expected {expected}, got {actual}"
        )
    if output.expected_shape != output.actual_shape:
        lines.append(f"  shape {fmt_shape(output.actual_shape)},"
                     f" expected {fmt_shape(output.expected_shape)}")
    if output.expected_dtype != output.actual_dtype:
        lines.append(f"  dtype {output.actual_dtype}, expected {output.expected_dtype}")
    if output.message:
        lines.append(f"  {output.message}")
    return lines


def case_reason(case: CaseResult) -> str:
    """Why the case ended as it did, in one sentence (not yet cleaned or shortened)."""
    if case.status == "error":
        return f"{case.stage or 'run'}: {case.message or 'no message'}"
    if case.status == "failed":
        if case.message:
            return case.message
        failing = failing_outputs(case)
        return output_verdict(failing[0]) if failing else "outputs drifted beyond tolerance"
    if case.status == "skipped":
        return case.message or "skipped"
    return case.message


def models_in_order(report: RunReport) -> dict[str, list[CaseResult]]:
    """The report's cases grouped by model, models in order of first appearance."""
    groups: dict[str, list[CaseResult]] = {}
    for case in report.cases:
        groups.setdefault(case.model, []).append(case)
    return groups


def counts_text(counts: dict[str, int]) -> str:
    """ "4 passed, 1 failed, 2 errors, 0 skipped" """
    errors = counts.get("error", 0)
    return (
        f"{counts.get('passed', 0)} passed, {counts.get('failed', 0)} failed,"
        f" {errors} error{'' if errors == 1 else 's'}, {counts.get('skipped', 0)} skipped"
    )
