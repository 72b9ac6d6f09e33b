"""One tensor against its reference: the comparison, the reference's scale, its dtype's epsilon."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from onnx_parity.compare import elements
from onnx_parity.compare.elements import kind_of
from onnx_parity.compare.metrics import epsilon
from onnx_parity.compare.outputs import compare_output
from onnx_parity.explain.localize.graph import Array, GraphNode
from onnx_parity.frozen import frozen
from onnx_parity.results import OutputComparison, Tolerance

# A first difference within this many ulps of the reference's largest value is rounding noise.
ROUNDING_ULPS = 64


@frozen
class TensorCheck:
    """One compared tensor: the node that makes it (None for a graph input) and the numbers."""

    tensor: str
    node: GraphNode | None
    comparison: OutputComparison
    scale: float  # the reference's largest finite magnitude
    eps: float | None  # the reference dtype's machine epsilon; None for exact types

    @property
    def passed(self) -> bool:
        return self.comparison.passed

    @property
    def severity(self) -> float:
        """Larger is worse; NaN/Inf placement, shape or dtype differences rank above any number."""
        c = self.comparison
        return math.inf if c.required_atol is None or math.isnan(c.max_abs) else c.max_abs

    @property
    def rounding(self) -> bool:
        """Whether its difference is within the reference dtype's rounding of its values."""
        c = self.comparison
        if self.eps is None or c.required_atol is None or not math.isfinite(c.max_abs):
            return False
        return c.max_abs <= ROUNDING_ULPS * self.eps * self.scale


def check_tensor(name: str, expected: Array, actual: Array, tolerance: Tolerance,
                 node: GraphNode | None = None) -> TensorCheck:
    """compare_output on one tensor; float types of different widths meet in float64 (an fp16
    graph against float32 PyTorch is a difference of values, not a dtype error)."""
    e, a = np.asarray(expected), np.asarray(actual)
    eps = epsilon(e.dtype)
    if e.dtype != a.dtype and _floating(e.dtype) and _floating(a.dtype):
        e, a = e.astype(np.float64), a.astype(np.float64)
    elif e.dtype != a.dtype and e.dtype.kind in "iu" and a.dtype.kind in "iu":
        e, a = e.astype(np.int64), a.astype(np.int64)
    comparison = compare_output(name, [(e, a)], tolerance)
    scale = 0.0
    if _floating(e.dtype) and e.size:
        finite = np.abs(e.astype(np.float64))
        finite = finite[np.isfinite(finite)]
        scale = float(finite.max()) if finite.size else 0.0
    return TensorCheck(name, node, comparison, scale, eps)


def _floating(dtype: np.dtype[Any]) -> bool:
    return kind_of(dtype) == "float"


def excess(expected: Array, actual: Array, tolerance: Tolerance) -> float:
    """max |a - e| / (atol + rtol·|e|), held to the comparison's own rule: above 1 exactly
    when some element is out of tolerance; NaN/Inf placement mismatches are inf."""
    return elements.excess(expected, actual, tolerance.atol, tolerance.rtol)
