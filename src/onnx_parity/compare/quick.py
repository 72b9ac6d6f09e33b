"""A step of a rollout that plainly passes, found without the full comparison: the same
float64 rule as elements.py (|a - e| <= atol + rtol * |e|) on every element, and the same
max abs, but none of the figures only a judged step's sentence needs (worst element, required
atol, histogram, metrics). Anything it cannot vouch for — a failure, a NaN or infinity, a
powerless tolerance, a blind reference, metric gates, detections, a non-float or structured
output — is None: the caller compares that step in full (outputs.compare_case)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence, Set
from typing import Any

import numpy as np

from onnx_parity.compare.blind import Watch, blindness
from onnx_parity.compare.outputs import verdict
from onnx_parity.compare.stepwise import nearest_step, nearness
from onnx_parity.frozen import replaced
from onnx_parity.results import OutputComparison, Tolerance
from onnx_parity.spec.model import Detections
from onnx_parity.wording import gates


def quick_case(names: Sequence[str], expected: Sequence[Sequence[Any]],
               actual: Sequence[Sequence[Any]], tolerance_for: Callable[[str], Tolerance],
               watch: Watch | None = None,
               detections: Detections | None = None,
               scratch: Scratch | None = None) -> tuple[OutputComparison, ...] | None:
    """Every output passed, each with the max abs compare_case gives it (and its atol, for
    the nearness the rollout judges by); None where compare_case may say anything else.
    `scratch`: the float32 check's buffers, kept by the caller from one step to the next."""
    if detections is not None or len(expected) != len(actual) or not expected:
        return None
    if any(len(e) != len(names) or len(a) != len(names)
           for e, a in zip(expected, actual, strict=True)):
        return None
    found = []
    for k, name in enumerate(names):
        tolerance = tolerance_for(name)
        atol, rtol = float(tolerance.atol), float(tolerance.rtol)
        if not tolerance.elementwise or gates(tolerance) or not (atol >= 0.0 and rtol >= 0.0):
            return None
        pairs = [(e[k], a[k]) for e, a in zip(expected, actual, strict=True)]
        max_abs = largest_e = 0.0
        seen: list[np.ndarray[Any, Any]] = []  # each sample's actual side
        for e, a in pairs:
            if not (type(e) is np.ndarray and type(a) is np.ndarray and e.dtype == a.dtype
                    and e.dtype.kind == "f" and e.shape == a.shape):
                return None
            if not e.size:
                continue
            figures = (_float32(e, a, atol, rtol, scratch) if e.size >= _LARGE else None) or \
                _float64(e, a, atol, rtol)
            if figures is None:
                return None
            max_abs = max(max_abs, figures[0])
            largest_e = max(largest_e, figures[1])
            seen.append(a)
        if 0.0 < largest_e <= atol and max(  # outputs._power's rule
                float(np.abs(a).max()) for a in seen) <= atol:
            return None
        # A reference with an element off zero is not all zero; the same across samples
        # counts only where their inputs differ (compare/blind.py).
        if watch is not None and (largest_e == 0.0 or (watch.distinct and len(pairs) > 1)) \
                and blindness(name, [e for e, _ in pairs], watch) is not None:
            return None
        found.append(_passed(name, atol, rtol, max_abs, len(pairs)))
    return tuple(found)


_PASSED = OutputComparison(name="", passed=True, atol=0.0, rtol=0.0, kind="passed")


def _passed(name: str, atol: float, rtol: float, max_abs: float,
            samples: int) -> OutputComparison:
    """OutputComparison(name=name, passed=True, atol=atol, rtol=rtol, max_abs=max_abs,
    samples=samples, kind="passed"), made from a template (frozen.py's `replaced`): the
    constructor sets its thirty fields one by one, and a step's every output pays it. Its
    empty mappings are the template's, read only as every comparison's are."""
    return replaced(_PASSED, name=name, atol=atol, rtol=rtol, max_abs=max_abs, samples=samples)


def _float64(e: np.ndarray[Any, Any], a: np.ndarray[Any, Any], atol: float,
             rtol: float) -> tuple[float, float] | None:
    """(max abs, max |e|) of one sample every element of which passes, in float64 as
    elements.py judges; None where one does not, or a side holds a NaN or infinity."""
    e64 = np.asarray(e, dtype=np.float64).reshape(-1)
    a64 = np.asarray(a, dtype=np.float64).reshape(-1)
    with np.errstate(over="ignore", invalid="ignore"):
        d = np.abs(a64 - e64)
        # max propagates NaN: finite exactly where both sides are and every difference fits
        # in float64.
        top = float(d.max())
        if not math.isfinite(top):
            return None
        abs_e = np.abs(e64)
        if not (d <= atol + rtol * abs_e).all():
            return None
    return top, float(abs_e.max())


# The margin float32's rule keeps from the tolerance: well above the few roundings (2**-24 of
# their value each, float32's unit roundoff) that float32's |a - e| and atol + rtol·|e| make.
_MARGIN = 2.0 ** -16
# The tolerances float32 is trusted with: atol a normal float32 far from underflow (so that an
# underflowing rtol·|e|, off by at most 2**-150, is far inside the margin), rtol the same or 0,
# and an allowance far from float32's overflow.
_TINY, _HUGE = 1e-30, 1e30
# The elements sharing float32's largest |a - e| whose float64 difference is worked out; more
# (a difference quantized to a few values) and the whole sample is left to float64.
_TIES = 1024
# From this many elements float32 is the cheaper way (no float64 copies); below, float64 is.
_LARGE = 4096


class Scratch:
    """The float32 check's buffers, kept from one step of a rollout to the next and grown by
    doubling: a rollout's state grows at every step, and temporaries of a size never asked for
    before leave holes in the heap that the next step's larger arrays cannot use."""

    def __init__(self) -> None:
        self.size = 0
        self.d = self.allowance = np.empty(0, np.float32)
        self.ok = np.empty(0, np.bool_)

    def take(self, n: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any],
                                    np.ndarray[Any, Any]]:
        if n > self.size:
            self.size = max(n, 2 * self.size)
            self.d, self.allowance = (np.empty(self.size, np.float32) for _ in range(2))
            self.ok = np.empty(self.size, np.bool_)
        return self.d[:n], self.allowance[:n], self.ok[:n]


def _float32(e: np.ndarray[Any, Any], a: np.ndarray[Any, Any], atol: float, rtol: float,
             scratch: Scratch | None = None) -> tuple[float, float] | None:
    """_float64's figures for float32 arrays, found in float32 without their float64 copies:
    a step passes here only where every element is inside its tolerance by the margin, so that
    float64 passes it too (|a - e| is off by 2**-24 of itself at most, the allowance by four
    such roundings, the margin is 2**-16 of it and the allowance at least atol); the max abs is
    float64's, of the elements whose float32 |a - e| is the largest (rounding is monotone, so
    float64's largest is among them). None where that cannot be told: _float64 decides."""
    if e.dtype != np.float32 or not _TINY <= atol <= _HUGE or not (
            rtol == 0.0 or _TINY <= rtol <= _HUGE):
        return None
    e, a = e.reshape(-1), a.reshape(-1)
    d, allowance, ok = (scratch or Scratch()).take(e.size)
    with np.errstate(over="ignore", invalid="ignore"):
        np.subtract(a, e, out=d)
        np.abs(d, out=d)
        top = d.max()  # NaN or inf where a side holds one, or the difference overflowed
        if not math.isfinite(top):
            return None
        np.abs(e, out=allowance)
        largest_e = float(allowance.max())
        if largest_e * rtol + atol > _HUGE:
            return None
        np.multiply(allowance, np.float32(rtol * (1.0 - _MARGIN)), out=allowance)
        np.add(allowance, np.float32(atol * (1.0 - _MARGIN)), out=allowance)
        if not np.less_equal(d, allowance, out=ok).all():
            return None
        if top == 0.0:  # a float32 difference is 0 only where a == e
            return 0.0, largest_e
        at = np.flatnonzero(np.equal(d, top, out=ok))
    if at.size > _TIES:
        return None
    top64 = np.abs(a[at].astype(np.float64) - e[at].astype(np.float64))
    return float(top64.max()), largest_e


class Nearest:
    """The step nearest its tolerance so far, as compare/stepwise.py chooses it, with its
    compared outputs (both sides) where it plainly passed and was compared only in part."""

    def __init__(self) -> None:
        self.near: float | None = None
        self.step: int | None = None
        self.pair: tuple[Any, Any] | None = None

    def add(self, step: int, found: tuple[OutputComparison, ...] | Exception,
            pair: tuple[Any, Any] | None) -> None:
        if isinstance(found, Exception):
            return
        for c in found:
            near = nearness(c)
            if self.near is None or near > self.near:
                self.near, self.step, self.pair = near, step, pair


def quick_judged(steps: Sequence[tuple[OutputComparison, ...]], quick: Set[int]) -> int | None:
    """The step judge_rollout judges, where it is one compared only in part: every step
    passed (a failing or erring step is always compared in full) and the nearest is quick."""
    if not quick or any(verdict(step) != "passed" for step in steps):
        return None
    at, _ = nearest_step(steps)
    return at if at in quick else None
