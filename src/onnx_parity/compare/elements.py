"""The element-by-element comparison of one output over its samples, and the tolerance rule
itself (`within`, and `excess` on it for localization). See outputs.py's docstring for the rule.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from onnx_parity.frozen import frozen
from onnx_parity.results import OutputComparison, OutputKind

Kind = Literal["bool", "int", "float", "complex", "string", "unsupported"]
_F64 = npt.NDArray[np.float64]
_Bools = npt.NDArray[np.bool_]
_TWO_64 = 2.0**64


def compare_elements(arrays: list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]], kind: Kind,
                     atol: float, rtol: float, base: dict[str, Any]) -> OutputComparison:
    """Every element of every sample against `atol` and `rtol`: the verdict and its figures."""
    samples = [_compare_sample(e, a, kind, atol, rtol) for e, a in arrays]
    return _combine(kind, samples, [e.shape for e, _ in arrays], base)


@frozen
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


def kind_of(dtype: np.dtype[Any]) -> Kind:
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


@frozen
class _Measured:
    """|a - e| of one sample's elements, as every use of the rule needs it."""

    d: _F64  # |a - e| of the elements compared by value (the finite ones, for floats)
    abs_e: _F64  # |e| of those elements, as float64, for the allowance rtol·|e|
    exact_diff: npt.NDArray[np.uint64] | None  # integers: |a - e| exactly
    placement_bad: _Bools | None  # floats: NaN/Inf placement differs, over every element
    finite_at: npt.NDArray[np.intp] | None  # flat indices of `d`'s elements; None: all of them
    values: Callable[[int], tuple[Any, Any]]  # flat index -> (expected, actual) as Python values


def _measure(e: np.ndarray[Any, Any], a: np.ndarray[Any, Any], kind: Kind) -> _Measured:
    placement_bad: _Bools | None = None
    finite_at: npt.NDArray[np.intp] | None = None
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
    return _Measured(d, np.abs(ef), exact_diff, placement_bad, finite_at, values)


def _compare_sample(
    e: np.ndarray[Any, Any], a: np.ndarray[Any, Any], kind: Kind, atol: float, rtol: float
) -> _Sample:
    # One floating-point state for the whole sample, rather than one per step: overflow to inf
    # is a mismatch, inf - inf and 0 / 0 are settled below, d / 0 is inf. A small output's
    # figures are mostly such calls.
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        return _figures(e, a, kind, atol, rtol)


def _figures(e: np.ndarray[Any, Any], a: np.ndarray[Any, Any], kind: Kind, atol: float,
             rtol: float) -> _Sample:
    n = int(e.size)
    m = _measure(e, a, kind)
    d, abs_e, exact_diff = m.d, m.abs_e, m.exact_diff
    if kind in ("bool", "string"):
        r = np.zeros_like(d)
        ok = d == 0.0
    else:
        r = rtol * abs_e
        ok = _within(d, exact_diff, r, atol)

    placement, first_placement = 0, None
    if m.placement_bad is not None and m.placement_bad.any():
        placement = int(np.count_nonzero(m.placement_bad))
        first_placement = int(np.argmax(m.placement_bad))
    finite_n = int(d.size)
    if finite_n == 0:
        return _Sample(
            n, placement, placement, first_placement, 0, 0.0, 0.0, 0.0, 0.0, None, -math.inf,
            m.values
        )

    excess = d - r
    if kind not in ("bool", "string"):
        # inf - inf only happens where the allowance is inf too, which passes whatever atol is;
        # fmax drops the NaN.
        excess = np.fmax(excess, -np.inf)
    at = int(np.argmax(excess))
    worst = int(m.finite_at[at]) if m.finite_at is not None else at
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
        sum_abs=float(d.sum()),  # a sum past float64's range is inf, and says so
        max_abs=float(d.max()),
        max_rel=max_rel,
        required=required,
        worst=worst,
        worst_excess=float(excess[at]),
        values=m.values,
    )


_ABOVE_ONE = math.nextafter(1.0, math.inf)


def excess(expected: np.ndarray[Any, Any], actual: np.ndarray[Any, Any], atol: float,
           rtol: float) -> float:
    """The largest |a - e| / (atol + rtol·|e|) over the elements, held to `within`: at most 1
    exactly when every element passes the comparison's rule, whatever the division rounds to.
    A shape or a NaN/Inf placement that differs is inf, as are booleans or strings that
    differ, and values that cannot be compared unless they are equal."""
    e, a = np.asarray(expected), np.asarray(actual)
    if e.shape != a.shape:
        return math.inf
    if e.size == 0:
        return 0.0
    kind = _common_kind(e.dtype, a.dtype)
    if kind in ("float", "complex") and e.dtype != a.dtype:
        wide = np.complex128 if kind == "complex" else np.float64
        e, a = e.astype(wide), a.astype(wide)
    elif kind == "int" and e.dtype != a.dtype:
        e, a = e.astype(np.int64), a.astype(np.int64)
    elif kind == "unsupported":
        try:
            return 0.0 if bool(np.array_equal(e, a)) else math.inf
        except (TypeError, ValueError):
            return math.inf
    m = _measure(e, a, kind)
    if m.placement_bad is not None and m.placement_bad.any():
        return math.inf
    if kind in ("bool", "string"):
        return math.inf if m.d.any() else 0.0
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        r = rtol * m.abs_e
        ratio = np.where(m.d == 0.0, 0.0, m.d / (atol + r))
    ok = within(m.d, m.exact_diff, r, atol)
    # fmin / fmax also settle inf / inf (NaN) on the side the rule puts it.
    ratio = np.where(ok, np.fmin(ratio, 1.0), np.fmax(ratio, _ABOVE_ONE))
    return float(ratio.max()) if ratio.size else 0.0


def _common_kind(e: np.dtype[Any], a: np.dtype[Any]) -> Kind:
    """The kind two dtypes are compared as: an fp16 graph against float32 PyTorch is a
    difference of values, not of types; integers of any width meet in int64 (uint64 as
    floats)."""
    ke, ka = kind_of(e), kind_of(a)
    if ke == ka:
        wide_unsigned = "u" in (e.kind, a.kind) and 8 in (e.itemsize, a.itemsize)
        return "float" if ke == "int" and e != a and wide_unsigned else ke
    numbers = {ke, ka}
    if numbers <= {"int", "float", "complex"}:
        return "complex" if "complex" in numbers else "float"
    return "unsupported"


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


def within(d: _F64, exact_diff: npt.NDArray[np.uint64] | None, r: _F64, atol: float) -> _Bools:
    """The tolerance rule, element by element: |a - e| <= atol + rtol·|e| with `d` = |a - e|
    and `r` = rtol·|e| in float64, integers' differences compared exactly (`exact_diff`).
    Every comparison and every localization goes through here."""
    with np.errstate(over="ignore"):
        return _within(d, exact_diff, r, atol)


def _within(d: _F64, exact_diff: npt.NDArray[np.uint64] | None, r: _F64, atol: float) -> _Bools:
    """`within`, where an overflow of the allowance to inf is already ignored."""
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
    """The smallest atol (to a few ulps) with which `within` passes every element."""
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
    kind: Kind, samples: list[_Sample], shapes: list[tuple[int, ...]], base: dict[str, Any]
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

    kind_of_verdict: OutputKind = "passed"
    if placement:
        kind_of_verdict = "nonfinite"
    elif mismatches:
        kind_of_verdict = "exact" if kind in ("bool", "string") else "elements"
    return OutputComparison(
        passed=mismatches == 0,
        elements=elements,
        mismatches=mismatches,
        max_abs=max_abs,
        max_rel=max_rel,
        mean_abs=mean_abs,
        worst_index=worst_index,
        worst_expected=_number(raw[0]) if raw is not None else None,
        worst_actual=_number(raw[1]) if raw is not None else None,
        kind=kind_of_verdict,
        placement=placement,
        finite=finite,
        # A float's digits are wording's to choose; other values are quoted as they are.
        quoted=(str(raw[0]), str(raw[1])) if raw is not None and kind != "float" else None,
        **{**base, "required_atol": required},
    )
