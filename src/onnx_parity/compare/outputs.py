"""Comparing outputs: (expected, actual) tensors in, OutputComparison verdicts and messages out.

The rule for every element is |actual - expected| <= atol + rtol * |expected|, with both atol
and rtol always applied. Floating-point data (float16, bfloat16 and the other ml_dtypes floats
included) is compared in float64: the check is exactly `d <= atol + (rtol * |e|)` in IEEE
float64. NaN passes only against NaN and an infinity only against the same infinity.

Integers are compared without overflow: |a - e| is computed exactly as a uint64 (wrap-around
subtraction of the larger minus the smaller, which is exact because the true difference of two
64-bit integers always fits in 64 unsigned bits); the allowance atol + rtol * |e| is computed in
float64, and the exact integer difference is compared exactly against it. Booleans and
strings must be equal; the tolerance does not apply to them. Complex numbers are compared by
the magnitude of their difference, |a - e| <= atol + rtol * |e|, a NaN or infinity in either
part being placed as for floats. Other dtypes fail with a message.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from onnx_parity.compare import metrics
from onnx_parity.compare.elements import compare_elements, kind_of
from onnx_parity.compare.structured import flatten_pairs, is_structured
from onnx_parity.errors import CompareError
from onnx_parity.results import OutputComparison, Tolerance
from onnx_parity.wording import (
    fmt_measured,
    fmt_metric,
    fmt_setting,
    fmt_threshold,
    metric_words,
)

__all__ = ["compare_case", "compare_output", "summarize", "verdict"]



def compare_output(
    name: str,
    pairs: Sequence[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]],
    tolerance: Tolerance,
) -> OutputComparison:
    """Compare one output over all samples of a case; `pairs` holds one (expected, actual) each.

    Figures are over every sample together. Sample numbers are 0-based, and `worst_index` is
    (sample, *index). `max_rel` counts |a - e| / |e| with |e| == 0 as 0 when a == e and inf
    otherwise. `required_atol` may exceed max(|a - e| - rtol * |e|) by a few ulps: it is raised
    until the float64 check itself passes every finite element with it.
    """
    if not pairs:
        raise ValueError(f"{name}: no samples to compare")
    atol, rtol = float(tolerance.atol), float(tolerance.rtol)
    if not (atol >= 0.0 and rtol >= 0.0):  # also rejects NaN
        raise ValueError(f"{name}: tolerance must be non-negative, got atol {atol}, rtol {rtol}")
    arrays = [(np.asarray(e), np.asarray(a)) for e, a in pairs]

    base: dict[str, Any] = {"name": name, "atol": atol, "rtol": rtol, "required_atol": None}
    # Every sample's dtype first, then every sample's shape: a dtype error explains a shape one.
    checks: tuple[tuple[str, Callable[[np.ndarray], Any], Callable[[Any], str]], ...] = (
        ("dtype", _dtype_name, str), ("shape", _shape_of, _shape_text))
    for what, read, show in checks:
        for s, (e, a) in enumerate(arrays):
            if read(e) != read(a):
                return OutputComparison(
                    passed=False,
                    expected_shape=e.shape,
                    actual_shape=a.shape,
                    expected_dtype=_dtype_name(e),
                    actual_dtype=_dtype_name(a),
                    message=f"{name}: {what} differs in sample {s}: "
                    f"expected {show(read(e))}, got {show(read(a))}",
                    **base,
                )

    e0, a0 = arrays[0]
    base.update(
        expected_shape=e0.shape,
        actual_shape=a0.shape,
        expected_dtype=_dtype_name(e0),
        actual_dtype=_dtype_name(a0),
    )
    kinds = {kind_of(e.dtype) for e, _ in arrays}
    if len(kinds) != 1:
        # The expected side itself changed dtype family between samples: nothing sensible to say.
        dtypes = ", ".join(sorted({e.dtype.name for e, _ in arrays}))
        return OutputComparison(
            passed=False, message=f"{name}: dtype changes between samples ({dtypes})", **base
        )
    kind = kinds.pop()
    if kind == "unsupported":
        return OutputComparison(
            passed=False, message=f"{name}: cannot compare {e0.dtype.name} outputs", **base
        )

    result = compare_elements(arrays, kind, atol, rtol, base)
    if kind == "float":
        return _judge(result, arrays, tolerance)
    if kind == "complex" and result.passed:
        return _power(result, arrays)
    return result


def _judge(result: OutputComparison, arrays: Sequence[tuple[np.ndarray[Any, Any],
                                                            np.ndarray[Any, Any]]],
           tolerance: Tolerance) -> OutputComparison:
    """A floating output against every criterion its tolerance gives: atol/rtol element by
    element (unless not given), cosine, SQNR and top-k over the output. Every metric is
    recorded whichever ones gate it."""
    k = tolerance.topk.k if tolerance.topk is not None else 1
    found = {"cosine": metrics.cosine(arrays), "sqnr_db": metrics.sqnr_db(arrays),
             f"top{k}": metrics.topk_agreement(arrays, k) if arrays[0][0].ndim else math.nan}
    criteria = ["atol/rtol"] if tolerance.elementwise else []
    failures = [result.message] if tolerance.elementwise and not result.passed else []
    for name, value, threshold in (
            ("cosine", found["cosine"], tolerance.cosine),
            ("sqnr_db", found["sqnr_db"], tolerance.sqnr_db),
            (f"top{k}", found[f"top{k}"],
             tolerance.topk.agreement if tolerance.topk is not None else None)):
        if threshold is None:
            continue
        words = metric_words(name)
        criteria.append(f"{words} ≥ {fmt_threshold(name, threshold)}")
        if not metrics.holds(value, threshold):
            failures.append(f"{words} {fmt_metric(name, value)} < "
                            f"{fmt_threshold(name, threshold)}")
    judged = OutputComparison(**{**result.__dict__, "metrics": found, "criteria": tuple(criteria),
                                 "passed": not failures, "scale": metrics.scale(arrays),
                                 "histogram": metrics.error_histogram(arrays)})
    if failures:
        text = "; ".join(failures) if tolerance.elementwise and not result.passed else (
            f"{result.name}: " + "; ".join(failures))
        return OutputComparison(**{**judged.__dict__, "message": text})
    if tolerance.elementwise and not tolerance.metric_criteria:
        return _power(judged, arrays)
    if not tolerance.elementwise:
        shown = ", ".join(f"{metric_words(n)} {fmt_metric(n, v)}" for n, v in found.items()
                          if not math.isnan(v))
        return OutputComparison(**{**judged.__dict__,
                                   "message": f"{result.name}: {shown}"})
    return judged


def _power(result: OutputComparison,
           arrays: Sequence[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]) -> OutputComparison:
    """A pass only counts if the tolerance could have failed it. Where every reference and
    actual element lies within atol of zero while the reference is not all zero, any output
    of that size passes (random weights can give outputs near 1e-10): not a pass. Outputs that
    are all zero (masks) stay checkable."""
    # A floating output's scale (metrics.scale) is already this; complex outputs have none.
    largest_e = result.scale if result.scale is not None else max(_largest(e) for e, _ in arrays)
    largest_a = max(_largest(a) for _, a in arrays)
    if not (largest_e > 0.0 and max(largest_e, largest_a) <= result.atol):
        return result
    message = (
        f"{result.name}: no power: every element of the reference (largest |e| "
        f"{fmt_measured(largest_e)}) and of the output (largest {fmt_measured(largest_a)}) lies "
        f"within atol {fmt_setting(result.atol)} of zero, so any output of that size would "
        "pass; check it with a "
        "relative tolerance (atol: 0), a metric such as cosine, or weights that give outputs "
        "of a real scale")
    return OutputComparison(**{**result.__dict__, "passed": False, "powerless": True,
                               "message": message})


def _largest(values: np.ndarray[Any, Any]) -> float:
    magnitudes = np.abs(np.asarray(values, dtype=np.complex128 if np.iscomplexobj(values)
                                   else np.float64))
    finite = magnitudes[np.isfinite(magnitudes)]
    return float(finite.max()) if finite.size else 0.0


def compare_case(
    names: Sequence[str],
    expected: Sequence[Sequence[np.ndarray[Any, Any]]],
    actual: Sequence[Sequence[np.ndarray[Any, Any]]],
    tolerance_for: Callable[[str], Tolerance],
) -> tuple[OutputComparison, ...]:
    """Compare every output of a case; expected[s][k] is output `names[k]` of sample s.

    A different number of samples, or none, is the caller's mistake (ValueError); a different
    number of outputs is what the model did, so it is a CompareError.
    """
    if len(expected) != len(actual):
        raise ValueError(f"expected has {len(expected)} samples but actual has {len(actual)}")
    if not expected:
        raise ValueError("no samples to compare")
    for s, (exp_s, act_s) in enumerate(zip(expected, actual, strict=True)):
        if len(exp_s) != len(names) or len(act_s) != len(names):
            raise CompareError(
                f"output count differs in sample {s}: expected {len(exp_s)}, "
                f"got {len(act_s)}, for {len(names)} output names ({', '.join(names)})"
            )
    return tuple(
        _compare_any(
            name,
            [(exp_s[k], act_s[k]) for exp_s, act_s in zip(expected, actual, strict=True)],
            tolerance_for(name),
        )
        for k, name in enumerate(names)
    )


def _compare_any(name: str, pairs: Sequence[tuple[Any, Any]],
                 tolerance: Tolerance) -> OutputComparison:
    """A tensor output, or a sequence / map one (structured.py) compared leaf by leaf."""
    if not any(is_structured(e) or is_structured(a) for e, a in pairs):
        return compare_output(name, pairs, tolerance)
    flattened = flatten_pairs(pairs)
    if isinstance(flattened, str):
        return OutputComparison(name=name, passed=False, atol=tolerance.atol,
                                rtol=tolerance.rtol, required_atol=None,
                                message=f"{name}: {flattened}")
    flat, paths = flattened
    result = compare_output(name, flat, tolerance)
    if result.passed or result.worst_index is None or len(result.worst_index) < 2:
        return result
    sample, index = result.worst_index[0], result.worst_index[1]
    where = f"{name}{paths[sample][index]}" + (f" of sample {sample}" if len(pairs) > 1 else "")
    return OutputComparison(**{**result.__dict__,
                               "message": f"{result.message}; worst element at {where}"})


def verdict(comparisons: Sequence[OutputComparison]) -> Literal["passed", "failed", "error"]:
    """The case's status: failed when an output drifted; an error when the only outputs that
    did not pass are ones the tolerance could not have failed (no check took place there);
    passed otherwise."""
    if any(not c.passed and not c.powerless for c in comparisons):
        return "failed"
    return "error" if any(c.powerless for c in comparisons) else "passed"


def summarize(comparisons: Sequence[OutputComparison]) -> str:
    """The case's message: the failing outputs' messages, or a short all-clear."""
    failing = [c.message for c in comparisons if not c.passed]
    if failing:
        return "; ".join(failing)
    if not comparisons:
        return "no outputs to compare"
    n = len(comparisons)
    return f"all {n} output{'s' if n != 1 else ''} within tolerance"


def _dtype_name(array: np.ndarray) -> str:
    """The dtype as compared: strings are strings, however numpy holds them."""
    return "string" if array.dtype.kind in "OUS" else array.dtype.name


def _shape_of(array: np.ndarray) -> tuple[int, ...]:
    return tuple(array.shape)


def _shape_text(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(n) for n in shape) + ("," if len(shape) == 1 else "") + ")"


