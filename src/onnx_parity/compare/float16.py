"""float16's range, judged in pure numpy: which float32 magnitudes leave it (overflow to inf,
or underflow of a whole tensor to 0), and outputs whose float16 reference overflowed where
ONNX Runtime's stayed finite.

A tensor overflows when its largest |x| rounds to infinity in float16 (|x| >= 65520; 65504 is
float16's largest finite value). A tensor underflows when it is not all zero in float32 but
every value flushes to 0 in float16, that is its largest |x| rounds to 0 (|x| <= 2**-25, half
float16's smallest subnormal): the tensor vanishes entirely. A tensor whose small values flush
while its large ones do not keeps its information where it is largest, and is not flagged.
Whether a tensor that leaves the range matters is not decided here: run/float16.py proves it
by a re-run with the tensor stored in float16.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from onnx_parity.frozen import frozen

Leaves = Literal["overflow", "underflow"]


def leaves_float16(max_abs: float) -> Leaves | None:
    """How a tensor whose largest float32 |x| is `max_abs` leaves float16's range, if it does."""
    if not np.isfinite(max_abs):
        return None  # infinite or NaN already in float32: not float16's doing
    with np.errstate(over="ignore"):  # rounding to nearest even, as a Cast does
        stored = np.float16(np.float32(max_abs))
    if np.isinf(stored):
        return "overflow"
    if max_abs > 0.0 and stored == 0.0:
        return "underflow"
    return None


@frozen
class ReferenceOverflow:
    """One output whose reference holds NaN or Inf where ONNX Runtime's values are finite, and
    never the other way round: `count` such elements of `elements`, `kinds` "inf", "NaN" or
    "NaN/Inf"."""

    name: str
    count: int
    elements: int
    kinds: str


def reference_overflows(names: Sequence[str], expected: Sequence[Sequence[Any]],
                        actual: Sequence[Sequence[Any]]) -> tuple[ReferenceOverflow, ...]:
    """The outputs whose reference alone is non-finite somewhere (per sample, per output, as
    compare.compare_case takes them); outputs that are not floating tensors are skipped."""
    found = []
    for k, name in enumerate(names):
        count = elements = 0
        nan = inf = other_way = False
        for exp_s, act_s in zip(expected, actual, strict=True):
            e, a = _floats(exp_s[k] if k < len(exp_s) else None), \
                _floats(act_s[k] if k < len(act_s) else None)
            if e is None or a is None or e.shape != a.shape:
                break
            only_reference = ~np.isfinite(e) & np.isfinite(a)
            other_way = other_way or bool((np.isfinite(e) & ~np.isfinite(a)).any())
            count += int(np.count_nonzero(only_reference))
            elements += e.size
            nan = nan or bool(np.isnan(e[only_reference]).any())
            inf = inf or bool(np.isinf(e[only_reference]).any())
        else:
            if count and not other_way:
                kinds = "NaN/Inf" if nan and inf else ("NaN" if nan else "inf")
                found.append(ReferenceOverflow(name, count, elements, kinds))
    return tuple(found)


def _floats(value: Any) -> np.ndarray[Any, Any] | None:
    """A floating tensor as float64 (float16, bfloat16 and the other ml_dtypes floats too)."""
    if value is None:
        return None
    array = np.asarray(value)
    if array.dtype.kind == "f" or (array.dtype.kind == "V" and array.dtype.itemsize <= 2):
        try:
            return array.astype(np.float64)
        except (TypeError, ValueError):
            return None
    return None
