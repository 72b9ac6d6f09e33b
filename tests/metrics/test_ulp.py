"""The ulp metric: the vectorized distance against a plain reference that reads each element's
bits one at a time, its edge cases pinned (signed zeros, NaN and infinity placement, bfloat16),
and one real export where `ulp: 0` fails what ONNX Runtime rounds differently and a generous
`ulp` passes it."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from helpers import by_id
from onnx_parity.compare.outputs import compare_output
from onnx_parity.metrics import ulp
from onnx_parity.metrics.base import holds
from onnx_parity.metrics.registry import named
from onnx_parity.report.charts import Headroom, output_headroom
from onnx_parity.report.rank import output_excess
from onnx_parity.results import Tolerance
from onnx_parity.wording import criterion_text, fmt_metric

Array = np.ndarray[Any, Any]


def _plain_ordered(value: Any, dtype: np.dtype[Any]) -> int:
    """One element's bits as an integer in the floats' order, from its bytes."""
    bits = int.from_bytes(np.asarray(value, dtype=dtype).tobytes(), "little")
    sign = 1 << (8 * dtype.itemsize - 1)
    return -(bits & (sign - 1)) if bits & sign else bits


def _plain_ulp(pairs: list[tuple[Array, Array]]) -> float:
    largest = 0
    for r, a in pairs:
        for x, y in zip(r.ravel().tolist(), a.ravel().tolist(), strict=True):
            if (math.isnan(x) and math.isnan(y)) or (math.isinf(x) and x == y):
                continue
            if not (math.isfinite(x) and math.isfinite(y)):
                return math.nan
            distance = abs(_plain_ordered(x, r.dtype) - _plain_ordered(y, r.dtype))
            largest = max(largest, distance)
    return float(largest)


@st.composite
def _pairs(draw: st.DrawFn) -> list[tuple[Array, Array]]:
    dtype = np.dtype(draw(st.sampled_from(["float16", "float32", "float64"])))
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, max_side=4))
    elements = st.floats(width=8 * dtype.itemsize, allow_nan=True, allow_infinity=True)
    pairs = []
    for _ in range(draw(st.integers(1, 2))):
        r = draw(hnp.arrays(dtype, shape, elements=elements))
        # The actual side: the reference's own values nudged, or values of its own.
        if draw(st.booleans()):
            a = draw(hnp.arrays(dtype, shape, elements=elements))
        else:
            a = r.copy()
            if a.size:
                flat = a.reshape(-1)
                flat[0] = np.nextafter(flat[0], dtype.type(math.inf))
        pairs.append((r, a))
    return pairs


@settings(max_examples=300, deadline=None)
@given(_pairs())
def test_ulp_matches_a_plain_reference(pairs: list[tuple[Array, Array]]) -> None:
    found, expected = ulp.of(pairs), _plain_ulp(pairs)
    assert (math.isnan(found) and math.isnan(expected)) or found == expected


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_adjacent_floats_are_one_apart_and_the_signed_zeros_none(dtype: str) -> None:
    kind = np.dtype(dtype).type
    x = np.array([1.0, -2.5, 0.0, 1e-3], dtype=dtype)
    steps = np.array([np.nextafter(v, kind(math.inf)) for v in x], dtype=dtype)
    assert ulp.of([(x, steps)]) == 1.0
    three = x.copy()
    for _ in range(3):
        three = np.nextafter(three, kind(math.inf)).astype(dtype)
    assert ulp.of([(x, three)]) == 3.0
    assert ulp.of([(np.array([0.0], dtype), np.array([-0.0], dtype))]) == 0.0
    tiny = np.array([np.finfo(dtype).smallest_subnormal], dtype)
    assert ulp.of([(tiny, -tiny)]) == 2.0  # across zero: -tiny, 0, tiny
    largest = np.finfo(dtype).max
    assert ulp.of([(np.array([-largest], dtype), np.array([largest], dtype))]) == (
        2.0 * _plain_ordered(largest, np.dtype(dtype)))  # float64's: past int64, still exact


def test_bfloat16_counts_its_own_ulps() -> None:
    x = np.array([1.0, 3.0], dtype=ml_dtypes.bfloat16)
    # bfloat16 has 7 mantissa bits: 1 + 2^-7 is the next float after 1.
    nudged = np.array([1.0 + 2.0 ** -7, 3.0], dtype=ml_dtypes.bfloat16)
    assert ulp.of([(x, nudged)]) == 1.0


def test_nan_and_infinity_count_as_placed() -> None:
    x = np.array([1.0, math.nan, math.inf], dtype=np.float32)
    assert ulp.of([(x, x.copy())]) == 0.0  # NaN against NaN, inf against inf: 0 apart
    assert math.isnan(ulp.of([(x, np.array([1.0, 2.0, math.inf], dtype=np.float32))]))
    assert math.isnan(ulp.of([(x, np.array([1.0, math.nan, -math.inf], dtype=np.float32))]))
    largest = np.finfo(np.float32).max
    assert math.isnan(ulp.of([(x, np.array([1.0, math.nan, largest], dtype=np.float32))]))


def test_lower_is_better_and_a_nan_fails() -> None:
    metric = named("ulp")
    assert metric is not None and metric.key == "ulp"
    assert holds(metric, 4.0, 4.0) and not holds(metric, 5.0, 4.0)
    assert not holds(metric, math.nan, 1e9)
    assert criterion_text("ulp", 4.0) == "ULP distance ≤ 4"
    assert fmt_metric("ulp", 9.0) == "9"


def test_ulp_gates_only_where_it_is_set_and_is_recorded_only_then() -> None:
    x = np.array([[1.0, 2.0]], dtype=np.float32)
    y = np.nextafter(x, np.float32(math.inf)).astype(np.float32)
    plain = compare_output("y", [(x, y)], Tolerance(1e-4, 0.0))
    assert plain.passed and "ulp" not in plain.metrics
    exact = compare_output("y", [(x, y)], Tolerance(1e-4, 0.0, metrics={"ulp": 0}))
    assert not exact.passed and exact.failed == ("ulp",) and exact.metrics["ulp"] == 1.0
    assert exact.criteria == ("atol/rtol", "ULP distance ≤ 0")
    assert exact.message == "y: ULP distance 1 > 0 (cosine 1.0000, SQNR 138.5 dB, top-1 " \
                            "agreement 1)"
    assert compare_output("y", [(x, y)], Tolerance(1e-4, 0.0, metrics={"ulp": 1})).passed
    integers = np.array([1, 2], dtype=np.int64)
    counted = compare_output("n", [(integers, integers)], Tolerance(0.0, 0.0, metrics={"ulp": 0}))
    assert counted.passed and counted.metrics == {}  # not a float: no metric applies


def test_a_chart_draws_and_the_ranking_weighs_ulps_over_the_threshold() -> None:
    x = np.array([[1.0, 2.0]], dtype=np.float32)
    y = x.copy()
    for _ in range(6):
        y = np.nextafter(y, np.float32(math.inf)).astype(np.float32)
    failing = compare_output("y", [(x, y)], Tolerance(1.0, 0.0, metrics={"ulp": 2}))
    assert output_headroom(failing) == Headroom(3.0, "ULP distance over the 2 allowed")
    assert output_excess(failing) == 3.0
    exact = compare_output("y", [(x, y)], Tolerance(1.0, 0.0, metrics={"ulp": 0}))
    assert output_excess(exact) == math.inf


@pytest.mark.slow
def test_a_real_export_drifts_by_ulps_that_a_generous_ulp_passes(
        write_spec: Callable[[str], Path], run_cli: Callable[..., Any]) -> None:
    # The same Linear + Tanh twice: ONNX Runtime's tanh and sums round a few floats apart
    # from PyTorch's, which `ulp: 0` fails and a thousand passes.
    spec = write_spec("""
        version: 1
        datasets: {rows: {kind: random, seed: 3, samples: 2, batch_sizes: [4]}}
        defaults: {datasets: [rows]}
        models:
          - {name: exact, torch: "models.py:make_linear", args: {features: 64},
             inputs: {x: {shape: [batch, 64]}}, tolerance: {ulp: 0}}
          - {name: generous, torch: "models.py:make_linear", args: {features: 64},
             inputs: {x: {shape: [batch, 64]}}, tolerance: {ulp: 1000}}
    """)
    code, out, _, report = run_cli(spec)
    cases = by_id(report)
    exact, generous = (cases[f"{m}[opset18-cpu-rows-b4]"] for m in ("exact", "generous"))
    (failing,), (passing,) = exact["outputs"], generous["outputs"]
    assert code == 1 and exact["status"] == "failed" and generous["status"] == "passed", out
    assert failing["failed"] == ["ulp"] and failing["thresholds"] == {"ulp": 0.0}
    assert 0 < failing["metrics"]["ulp"] == passing["metrics"]["ulp"] <= 1000
    assert failing["criteria"] == ["atol/rtol", "ULP distance ≤ 0"]
    assert f"ULP distance {failing['metrics']['ulp']:.0f} > 0" in failing["message"]
