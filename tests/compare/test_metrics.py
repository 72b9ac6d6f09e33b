"""Cosine, SQNR and top-k: their edge cases pinned, and the vectorized code against a plain
reference written one row and one element at a time."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from onnx_parity.compare import metrics
from onnx_parity.compare.outputs import compare_output
from onnx_parity.metrics import cosine, sqnr, topk
from onnx_parity.metrics.base import holds
from onnx_parity.metrics.cosine import COSINE
from onnx_parity.metrics.sqnr import SQNR
from onnx_parity.results import Tolerance, TopK

Array = np.ndarray[Any, Any]


def _plain_cosine(pairs: list[tuple[Array, Array]]) -> float:
    smallest = math.inf
    for r, a in pairs:
        rows_r = [r.ravel().tolist()] if r.ndim <= 1 else [row.ravel().tolist() for row in r]
        rows_a = [a.ravel().tolist()] if a.ndim <= 1 else [row.ravel().tolist() for row in a]
        for x, y in zip(rows_r, rows_a, strict=True):
            if any(not math.isfinite(v) for v in x + y):
                return math.nan
            nx, ny = math.sqrt(sum(v * v for v in x)), math.sqrt(sum(v * v for v in y))
            if nx == 0 and ny == 0:
                value = 1.0
            elif nx == 0 or ny == 0:
                value = 0.0
            else:
                value = sum(p * q for p, q in zip(x, y, strict=True)) / (nx * ny)
            smallest = min(smallest, value)
    return 1.0 if smallest == math.inf else smallest


def _plain_sqnr(pairs: list[tuple[Array, Array]]) -> float:
    signal = sum(float(v) ** 2 for r, _ in pairs for v in r.ravel())
    noise = sum((float(x) - float(y)) ** 2 for r, a in pairs
                for x, y in zip(r.ravel(), a.ravel(), strict=True))
    if noise == 0:
        return math.inf
    return -math.inf if signal == 0 else 10 * math.log10(signal / noise)


def _plain_top(row: list[float], k: int) -> set[int]:
    ranked = sorted(range(len(row)), key=lambda i: (-row[i], i))  # ties: lower index first
    return set(ranked[:k])


def _plain_topk(pairs: list[tuple[Array, Array]], k: int) -> float:
    agree = total = 0
    for r, a in pairs:
        for x, y in zip(r.reshape(-1, r.shape[-1]).tolist(), a.reshape(-1, a.shape[-1]).tolist(),
                        strict=True):
            total += 1
            agree += not any(map(math.isnan, x + y)) and _plain_top(x, k) == _plain_top(y, k)
    return agree / total


_values = st.floats(-100, 100, allow_nan=False, width=32)


@st.composite
def _pairs(draw: st.DrawFn) -> list[tuple[Array, Array]]:
    shape = draw(hnp.array_shapes(min_dims=2, max_dims=3, min_side=1, max_side=5))
    count = draw(st.integers(1, 3))
    pairs = []
    for _ in range(count):
        r = draw(hnp.arrays(np.float32, shape, elements=_values))
        # Often a near copy, sometimes with ties and zero rows, as quantized outputs have.
        a = draw(st.one_of(hnp.arrays(np.float32, shape, elements=_values),
                           st.just(np.round(r, 1)), st.just(np.zeros_like(r))))
        pairs.append((r, a))
    return pairs


@settings(max_examples=200, deadline=None)
@given(_pairs(), st.integers(1, 3))
def test_metrics_agree_with_a_plain_reference(pairs: list[tuple[Array, Array]], k: int) -> None:
    assert cosine.of(pairs) == pytest.approx(_plain_cosine(pairs), abs=1e-9)
    assert sqnr.of(pairs) == pytest.approx(_plain_sqnr(pairs), abs=1e-6)
    k = min(k, pairs[0][0].shape[-1])
    assert topk.of(pairs, k) == _plain_topk(pairs, k)


@pytest.mark.parametrize("special", [None, math.nan, math.inf, -math.inf])
def test_one_copy_for_every_figure_gives_each_figure_alone(special: float | None) -> None:
    """measures() widens an output once and skips the NaN and infinity checks where both sides
    are finite (top-1 by argmax): each figure as its own function computes it."""
    rng = np.random.default_rng(7)
    pairs = []
    for _ in range(3):
        r = np.round(rng.standard_normal((4, 6)), 1).astype(np.float32)  # ties
        a = (r + rng.standard_normal((4, 6)) * 1e-3).astype(np.float32)
        r[1] = 0.0  # a zero row
        pairs.append((r, a))
    if special is not None:
        pairs[1][1][2, 3] = special
    for k in (1, 2):
        found = metrics.measures(pairs, {"topk": TopK(k, 0.0)})
        assert repr(found.metrics) == repr({"cosine": cosine.of(pairs),
                                            "sqnr_db": sqnr.of(pairs),
                                            f"top{k}": topk.of(pairs, k)})
        assert found.scale == metrics.scale(pairs)
        assert found.histogram == metrics.error_histogram(pairs)
        rows = [(r.reshape(-1, 6).tolist(), a.reshape(-1, 6).tolist()) for r, a in pairs]
        if special is None or not math.isnan(special):
            expected = sum(_plain_top(x, k) == _plain_top(y, k)
                           for r, a in rows for x, y in zip(r, a, strict=True)) / 12
            assert found.metrics[f"top{k}"] == expected


def test_cosine_of_zero_rows_and_nan() -> None:
    zero, one = np.zeros((1, 3)), np.ones((1, 3))
    assert cosine.of([(zero, zero)]) == 1.0  # identical
    assert cosine.of([(zero, one)]) == 0.0
    assert cosine.of([(one, -one)]) == pytest.approx(-1.0)
    assert math.isnan(cosine.of([(one, np.array([[1.0, math.nan, 1.0]]))]))
    # the smallest over rows: one bad row of two decides
    assert cosine.of([(np.array([[1.0, 0], [1, 0]]), np.array([[1.0, 0], [0, 1]]))]) == 0.0


def test_sqnr_of_no_noise_no_signal_and_nan() -> None:
    x = np.array([3.0, 4.0])
    assert sqnr.of([(x, x)]) == math.inf
    assert sqnr.of([(np.zeros(2), x)]) == -math.inf
    assert sqnr.of([(x, x + np.array([0.3, 0.4]))]) == pytest.approx(20.0)
    assert math.isnan(sqnr.of([(x, np.array([math.inf, 4.0]))]))


def test_topk_ties_rank_the_lower_index_first() -> None:
    tied = np.array([[0.5, 0.5, 0.1]])
    assert topk.of([(tied, np.array([[0.6, 0.4, 0.1]]))], 1) == 1.0
    assert topk.of([(tied, np.array([[0.4, 0.6, 0.1]]))], 1) == 0.0
    assert topk.of([(tied, np.array([[0.4, 0.6, 0.1]]))], 2) == 1.0
    assert topk.of([(tied, np.array([[math.nan, 0.6, 0.1]]))], 1) == 0.0


def test_nan_metrics_fail_every_threshold() -> None:
    assert not holds(SQNR, math.nan, -math.inf)
    assert holds(SQNR, math.inf, 40.0) and not holds(COSINE, 0.98, 0.99)


def test_every_criterion_given_must_hold_and_every_metric_is_recorded() -> None:
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((8, 10)).astype(np.float32)
    noisy = logits + rng.standard_normal((8, 10)).astype(np.float32) * 0.05
    loose = Tolerance(atol=1.0, rtol=0.0)
    c = compare_output("logits", [(logits, noisy)], loose)
    assert c.passed and set(c.metrics) == {"cosine", "sqnr_db", "top1"}
    assert c.criteria == ("atol/rtol",)
    strict = Tolerance(atol=1.0, rtol=0.0, metrics={"cosine": 0.99999, "topk": TopK(1, 1.0)})
    c = compare_output("logits", [(logits, noisy)], strict)
    assert not c.passed
    assert c.criteria == ("atol/rtol", "cosine ≥ 0.99999", "top-1 agreement ≥ 1")
    assert c.message.startswith("logits: cosine 0.99") and "< 0.99999" in c.message
    metric_only = Tolerance(atol=0.0, rtol=0.0, elementwise=False, metrics={"cosine": 0.99})
    c = compare_output("logits", [(logits, noisy)], metric_only)
    assert c.passed and c.criteria == ("cosine ≥ 0.99",)  # atol 0 would have failed it
    assert c.message.startswith("logits: cosine 0.99")


@pytest.mark.parametrize(("dtype", "eps"), [
    ("float32", 2.0 ** -23), (np.dtype(np.float16), 2.0 ** -10), ("float64", 2.0 ** -52),
    ("bfloat16", 2.0 ** -7), ("float8_e4m3fn", 2.0 ** -3), ("float8_e5m2", 2.0 ** -2),
    ("int4", None), ("int64", None), ("bool", None), ("string", None), ("complex64", None),
    ("", None),
])
def test_one_epsilon_for_every_float_dtype(dtype: Any, eps: float | None) -> None:
    assert metrics.epsilon(dtype) == eps
    if isinstance(dtype, str) and eps is not None:
        assert metrics.epsilon(np.dtype(dtype)) == eps  # by name or as a dtype, the same


def test_localization_and_the_baseline_read_epsilon_from_the_one_owner() -> None:
    import ml_dtypes

    from onnx_parity.compare.baseline import floor_of
    from onnx_parity.explain.localize.tensors import check_tensor
    from onnx_parity.results import OutputComparison
    from onnx_parity.spec.model import DEFAULT_FLOOR_ULPS, Regression

    # float8_e5m2 is kind "f" to numpy, yet np.finfo does not know it
    values = np.array([1.0, 2.0], dtype=ml_dtypes.float8_e5m2)
    assert check_tensor("t", values, values, Tolerance(0.0, 0.0)).eps == 2.0 ** -2
    output = OutputComparison(name="y", passed=True, atol=0.0, rtol=0.0, scale=1.0,
                              expected_dtype="bfloat16", actual_dtype="bfloat16")
    assert floor_of(output, Regression()) == DEFAULT_FLOOR_ULPS * 2.0 ** -7
