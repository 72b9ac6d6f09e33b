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
from onnx_parity.results import OutputComparison, Tolerance
from onnx_parity.spec.model import Detections
from onnx_parity.wording import gates


def quick_case(names: Sequence[str], expected: Sequence[Sequence[Any]],
               actual: Sequence[Sequence[Any]], tolerance_for: Callable[[str], Tolerance],
               watch: Watch | None = None,
               detections: Detections | None = None) -> tuple[OutputComparison, ...] | None:
    """Every output passed, each with the max abs compare_case gives it (and its atol, for
    the nearness the rollout judges by); None where compare_case may say anything else."""
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
        seen: list[np.ndarray[Any, Any]] = []  # each sample's actual side, in float64
        for e, a in pairs:
            if not (type(e) is np.ndarray and type(a) is np.ndarray and e.dtype == a.dtype
                    and e.dtype.kind == "f" and e.shape == a.shape):
                return None
            if not e.size:
                continue
            e64 = np.asarray(e, dtype=np.float64).reshape(-1)
            a64 = np.asarray(a, dtype=np.float64).reshape(-1)
            with np.errstate(over="ignore", invalid="ignore"):
                d = np.abs(a64 - e64)
                # max propagates NaN: finite exactly where both sides are and every
                # difference fits in float64.
                top = float(d.max())
                if not math.isfinite(top):
                    return None
                abs_e = np.abs(e64)
                if not (d <= atol + rtol * abs_e).all():
                    return None
            max_abs = max(max_abs, top)
            largest_e = max(largest_e, float(abs_e.max()))
            seen.append(a64)
        if 0.0 < largest_e <= atol and max(  # outputs._power's rule
                float(np.abs(a64).max()) for a64 in seen) <= atol:
            return None
        if watch is not None and blindness(name, [e for e, _ in pairs], watch) is not None:
            return None
        found.append(OutputComparison(name=name, passed=True, atol=atol, rtol=rtol,
                                      max_abs=max_abs, samples=len(pairs), kind="passed"))
    return tuple(found)


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
