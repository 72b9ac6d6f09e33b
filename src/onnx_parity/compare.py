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
from dataclasses import dataclass
from decimal import ROUND_CEILING, Context
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from onnx_parity.errors import CompareError
from onnx_parity.results import OutputComparison, Tolerance
from onnx_parity.structured import flatten_pairs, is_structured
from onnx_parity.wording import fmt_measured, fmt_setting

__all__ = ["compare_case", "compare_output", "summarize", "verdict"]

_Kind = Literal["bool", "int", "float", "complex", "string", "unsupported"]
_F64 = npt.NDArray[np.float64]
_Bools = npt.NDArray[np.bool_]
_TWO_64 = 2.0**64


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
    kinds = {_kind(e.dtype) for e, _ in arrays}
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

    samples = [_compare_sample(e, a, kind, atol, rtol) for e, a in arrays]
    result = _combine(kind, samples, [e.shape for e, _ in arrays], base)
    if kind in ("float", "complex") and result.passed:
        return _power(result, arrays)
    return result


def _power(result: OutputComparison,
           arrays: Sequence[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]) -> OutputComparison:
    """A pass only counts if the tolerance could have failed it. Where every reference and
    actual element lies within atol of zero while the reference is not all zero, any output
    of that size passes (random weights can give outputs near 1e-10): not a pass. Outputs that
    are all zero (masks) stay checkable."""
    largest_e = max(_largest(e) for e, _ in arrays)
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


@dataclass(frozen=True)
class _Sample:
    """One sample's figures, before they are combined over the case."""

    elements: int
    mismatches: int
    placement: int  # NaN/Inf placement mismatches, included in `mismatches`
    first_placement: int | None  # flat index
    finite: int
    sum_abs: float
    max_abs: float
    max_rel: float
    required: float  # over the finite elements; 0.0 when there are none
    worst: int | None  # flat index of the largest excess among the finite elements
    worst_excess: float
    values: Callable[[int], tuple[Any, Any]]  # flat index -> (expected, actual) as Python values


def _kind(dtype: np.dtype[Any]) -> _Kind:
    if dtype.kind == "b":
        return "bool"
    if dtype.kind in "OUS":  # numpy strings, or ONNX Runtime's object arrays of str
        return "string"
    if dtype.kind in "iu":
        return "int"
    if dtype.kind == "f":
        return "float"
    if dtype.kind == "c":
        return "complex"
    # ml_dtypes (bfloat16, float8_*, int4, ...) register as kind "V" with a safe cast to float64.
    if (
        dtype.kind == "V"
        and dtype.names is None
        and dtype.subdtype is None
        and np.can_cast(dtype, np.float64)
    ):
        return "float"
    return "unsupported"


def _compare_sample(
    e: np.ndarray[Any, Any], a: np.ndarray[Any, Any], kind: _Kind, atol: float, rtol: float
) -> _Sample:
    n = int(e.size)
    placement_bad: _Bools | None = None
    finite_at: npt.NDArray[np.intp] | None = None  # flat indices of the finite elements
    exact_diff: npt.NDArray[np.uint64] | None = None

    if kind in ("float", "complex"):
        wide = np.complex128 if kind == "complex" else np.float64
        e64 = np.asarray(e, dtype=wide).reshape(-1)
        a64 = np.asarray(a, dtype=wide).reshape(-1)
        finite = np.isfinite(e64) & np.isfinite(a64)
        # Off the finite elements, only NaN against NaN or the same infinity on both sides pass.
        special_ok = (_nan(e64) & _nan(a64)) | (e64 == a64)
        placement_bad = ~finite & ~special_ok
        if finite.all():
            ef, af = e64, a64
        else:
            finite_at = np.flatnonzero(finite)
            ef, af = e64[finite_at], a64[finite_at]
        with np.errstate(over="ignore"):  # float64 extremes may overflow to inf: a mismatch
            d = np.abs(af - ef)
        values = _float_values(e64, a64) if kind == "float" else _text_values(e64, a64)
    elif kind == "int":
        exact_diff, ef = _int_abs_diff(e, a)
        d = exact_diff.astype(np.float64)
        values = _int_values(e.reshape(-1), a.reshape(-1))
    elif kind == "string":
        es, as_ = _texts(e), _texts(a)
        ef = np.zeros(es.shape, np.float64)
        d = (es != as_).astype(np.float64)
        values = _text_values(es, as_)
    else:  # bool
        eb = e.reshape(-1).astype(np.bool_)
        ab = a.reshape(-1).astype(np.bool_)
        ef = eb.astype(np.float64)
        d = (eb != ab).astype(np.float64)
        values = _bool_values(eb, ab)

    abs_e = np.abs(ef)
    if kind in ("bool", "string"):
        r = np.zeros_like(d)
        ok = d == 0.0
    else:
        with np.errstate(over="ignore"):
            r = rtol * abs_e
        ok = _within(d, exact_diff, r, atol)

    placement, first_placement = 0, None
    if placement_bad is not None and placement_bad.any():
        placement = int(np.count_nonzero(placement_bad))
        first_placement = int(np.argmax(placement_bad))
    finite_n = int(d.size)
    if finite_n == 0:
        return _Sample(
            n, placement, placement, first_placement, 0, 0.0, 0.0, 0.0, 0.0, None, -math.inf, values
        )

    with np.errstate(invalid="ignore"):
        excess = d - r
    if kind not in ("bool", "string"):
        # inf - inf only happens where the allowance is inf too, which passes whatever atol is;
        # fmax drops the NaN.
        excess = np.fmax(excess, -np.inf)
    at = int(np.argmax(excess))
    worst = int(finite_at[at]) if finite_at is not None else at
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # d / 0 is inf, and 0 / 0 is NaN, which fmax skips: 0 where a == e == 0.
        max_rel = float(np.fmax.reduce(d / abs_e, initial=0.0))
    # For booleans and strings the tolerance does not apply; a mismatch makes required_atol
    # None later.
    exact = kind in ("bool", "string")
    required = 0.0 if exact else _required_atol(d, exact_diff, r, float(excess[at]))
    return _Sample(
        elements=n,
        mismatches=placement + int(finite_n - np.count_nonzero(ok)),
        placement=placement,
        first_placement=first_placement,
        finite=finite_n,
        sum_abs=_sum(d),
        max_abs=float(d.max()),
        max_rel=max_rel,
        required=required,
        worst=worst,
        worst_excess=float(excess[at]),
        values=values,
    )


def _sum(values: _F64) -> float:
    with np.errstate(over="ignore"):  # a sum past float64's range is inf, and says so
        return float(values.sum())


def _int_abs_diff(
    e: np.ndarray[Any, Any], a: np.ndarray[Any, Any]
) -> tuple[npt.NDArray[np.uint64], _F64]:
    """Exact |a - e| as uint64, and e as float64 for the allowance."""
    # uint64 stays as it is; every other integer dtype fits in int64.
    wide = np.uint64 if e.dtype.kind == "u" and e.dtype.itemsize == 8 else np.int64
    e_w = e.reshape(-1).astype(wide)
    a_w = a.reshape(-1).astype(wide)
    # Larger minus smaller, wrapping modulo 2**64 in uint64: the true difference of two 64-bit
    # integers lies in [0, 2**64), so the wrapped result is exact.
    e_u, a_u = e_w.view(np.uint64), a_w.view(np.uint64)
    diff = np.where(a_w >= e_w, a_u - e_u, e_u - a_u)
    return diff, e_w.astype(np.float64)


def _within(d: _F64, exact_diff: npt.NDArray[np.uint64] | None, r: _F64, atol: float) -> _Bools:
    with np.errstate(over="ignore"):
        allowance = atol + r
    if exact_diff is None:
        return np.asarray(d <= allowance)
    # An integer is <= t exactly when it is <= floor(t); floor(t) < 2**64 is exact in uint64.
    big = allowance >= _TWO_64
    bound = np.floor(np.where(big, 0.0, allowance)).astype(np.uint64)
    return np.asarray(big | (exact_diff <= bound))


def _required_atol(
    d: _F64, exact_diff: npt.NDArray[np.uint64] | None, r: _F64, max_excess: float
) -> float:
    """The smallest atol (to a few ulps) with which `_within` passes every element."""
    required = max(0.0, max_excess)
    if math.isinf(required):
        return required
    step = 0.0
    # Rounding in (d - r) + r can leave the candidate an ulp short; step up until it is not.
    # Doubling the step bounds the loop by the float64 exponent range.
    for _ in range(4096):
        bad = ~_within(d, exact_diff, r, required)
        if not bad.any():
            return required
        step = max(step * 2.0, math.ulp(required + float(r[bad].max())))
        required += step
    raise AssertionError("required atol did not converge")  # pragma: no cover


def _float_values(e: np.ndarray[Any, Any],
                  a: np.ndarray[Any, Any]) -> Callable[[int], tuple[Any, Any]]:
    return lambda i: (float(e[i]), float(a[i]))


def _int_values(
    e: np.ndarray[Any, Any], a: np.ndarray[Any, Any]
) -> Callable[[int], tuple[Any, Any]]:
    return lambda i: (int(e[i]), int(a[i]))


def _nan(values: np.ndarray[Any, Any]) -> _Bools:
    """NaN in a float, or in either part of a complex number."""
    return np.asarray(np.isnan(values.real) | np.isnan(values.imag)) if np.iscomplexobj(
        values) else np.asarray(np.isnan(values))


def _texts(values: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Strings as str, whether numpy holds them as str, bytes or objects of either."""
    flat = values.reshape(-1)
    return np.array([v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
                     for v in flat], dtype=object)


def _text_values(e: np.ndarray[Any, Any],
                 a: np.ndarray[Any, Any]) -> Callable[[int], tuple[Any, Any]]:
    """Values shown as they are written: strings quoted, complex numbers with their parts."""
    def show(value: Any) -> str:
        return repr(value) if isinstance(value, str) else str(complex(value))

    return lambda i: (show(e[i]), show(a[i]))


def _number(value: Any) -> float | None:
    """A worst element's value for the report's number fields; None for a string or complex."""
    return None if isinstance(value, str) else float(value)


def _bool_values(e: _Bools, a: _Bools) -> Callable[[int], tuple[Any, Any]]:
    return lambda i: (bool(e[i]), bool(a[i]))


def _combine(
    kind: _Kind, samples: list[_Sample], shapes: list[tuple[int, ...]], base: dict[str, Any]
) -> OutputComparison:
    elements = sum(s.elements for s in samples)
    mismatches = sum(s.mismatches for s in samples)
    placement = sum(s.placement for s in samples)
    finite = sum(s.finite for s in samples)
    max_abs = max(s.max_abs for s in samples)
    max_rel = max(s.max_rel for s in samples)
    mean_abs = sum(s.sum_abs for s in samples) / finite if finite else 0.0

    required: float | None = max(s.required for s in samples)
    if placement or (kind in ("bool", "string") and mismatches):
        required = None

    # The worst element: the first NaN/Inf placement mismatch if any, else the largest excess
    # (the earliest sample wins a tie).
    where: tuple[int, int] | None = None
    for number, s in enumerate(samples):
        if s.first_placement is not None:
            where = (number, s.first_placement)
            break
    if where is None:
        best = -math.inf
        for number, s in enumerate(samples):
            if s.worst is not None and (where is None or s.worst_excess > best):
                where, best = (number, s.worst), s.worst_excess
    worst_index: tuple[int, ...] | None = None
    raw: tuple[Any, Any] | None = None
    if where is not None:
        number, flat = where
        index = np.unravel_index(flat, shapes[number])
        worst_index = (number, *(int(i) for i in index))
        raw = samples[number].values(flat)

    passed = mismatches == 0
    result = OutputComparison(
        passed=passed,
        elements=elements,
        mismatches=mismatches,
        max_abs=max_abs,
        max_rel=max_rel,
        mean_abs=mean_abs,
        worst_index=worst_index,
        worst_expected=_number(raw[0]) if raw is not None else None,
        worst_actual=_number(raw[1]) if raw is not None else None,
        **{**base, "required_atol": required},
    )
    message = _message(result, kind, placement, finite, len(samples), raw)
    return OutputComparison(**{**result.__dict__, "message": message})


def _message(
    c: OutputComparison,
    kind: _Kind,
    placement: int,
    finite: int,
    n_samples: int,
    raw: tuple[Any, Any] | None,
) -> str:
    at = _at(c.worst_index, n_samples) if c.worst_index is not None else ""
    values = ""
    if raw is not None:
        exp_text, act_text = _pair_text(raw[0], raw[1])
        values = f": expected {exp_text}, got {act_text}"
    tol = f"atol {c.atol:g}, rtol {c.rtol:g}"

    if c.passed:
        if c.elements == 0:
            return f"{c.name}: empty output, nothing to compare"
        if kind in ("bool", "string"):
            return f"{c.name}: all {c.elements} elements equal"
        if finite == 0:
            return f"{c.name}: all {c.elements} elements NaN/Inf in the same places"
        return f"{c.name}: max abs {c.max_abs:.2g} within {tol}"

    head = f"{c.name}: {c.mismatches} of {c.elements} elements ({_share(c)})"
    if kind in ("bool", "string"):
        noun = "booleans" if kind == "bool" else "strings"
        return f"{head} differ; first{at}{values}; {noun} must match exactly"
    parts = [f"{head} out of tolerance"]
    if placement:
        noun = "element" if placement == 1 else "elements"
        parts.append(f"NaN/Inf placement differs in {placement} {noun}, first{at}{values}")
        if finite:
            parts.append(f"max abs {c.max_abs:.3g} over finite elements")
    else:
        parts.append(f"max abs {c.max_abs:.3g}; worst{at}{values}")
    parts.append(tol)
    if c.required_atol is None:
        parts.append("no atol can pass (NaN/Inf placement differs)")
    elif math.isinf(c.required_atol):
        parts.append("no finite atol can pass")
    else:
        parts.append(f"would pass with atol >= {_ceil_text(c.required_atol)}")
    return "; ".join(parts)


def _dtype_name(array: np.ndarray) -> str:
    """The dtype as compared: strings are strings, however numpy holds them."""
    return "string" if array.dtype.kind in "OUS" else array.dtype.name


def _shape_of(array: np.ndarray) -> tuple[int, ...]:
    return tuple(array.shape)


def _shape_text(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(n) for n in shape) + ("," if len(shape) == 1 else "") + ")"


def _at(index: tuple[int, ...], n_samples: int) -> str:
    sample, rest = index[0], index[1:]
    position = "[" + ", ".join(str(i) for i in rest) + "]" if rest else ""
    if n_samples > 1:
        return f" at sample {sample}" + (f" {position}" if position else "")
    return f" at {position}" if position else ""


def _share(c: OutputComparison) -> str:
    percent = 100.0 * c.mismatch_share
    return f"{percent:.2g}%" if percent < 0.1 else f"{percent:.1f}%"


def _pair_text(expected: Any, actual: Any) -> tuple[str, str]:
    """Both values with the fewest digits (4 at least) that tell them apart."""
    if not isinstance(expected, float):
        return str(expected), str(actual)
    for digits in (4, 6, 9, 12, 17):
        exp_text, act_text = f"{expected:.{digits}g}", f"{actual:.{digits}g}"
        if exp_text != act_text:
            break
    return exp_text, act_text


def _ceil_text(value: float) -> str:
    """`value` rounded up to 3 significant digits, so that the printed atol really passes."""
    if value == 0.0:
        return "0"
    rounded = Context(prec=3, rounding=ROUND_CEILING).create_decimal(value)
    return f"{float(rounded):.3g}"
