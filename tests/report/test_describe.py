from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from onnx_parity.report.describe import (
    case_reason,
    fmt_measured,
    fmt_needed,
    fmt_pair,
    fmt_setting,
    fmt_share,
    output_sentence,
    worst_output,
)
from onnx_parity.results import CaseResult, OutputComparison

positive = st.floats(min_value=1e-300, max_value=1e300, allow_nan=False, allow_infinity=False)


def _output(name: str, passed: bool, required: float | None) -> OutputComparison:
    return OutputComparison(name=name, passed=passed, atol=1e-4, rtol=1e-3, elements=100,
                            mismatches=0 if passed else 5, max_abs=0.01, required_atol=required)


def test_number_formats() -> None:
    assert fmt_measured(0.0312) == "3.1e-2"
    assert fmt_measured(0.0) == "0"
    assert fmt_measured(1234.0) == "1.2e3"
    assert [fmt_measured(x) for x in (math.inf, -math.inf, math.nan)] == ["inf", "-inf", "nan"]
    assert fmt_setting(1e-5) == "1e-5" and fmt_setting(0.001) == "1e-3"
    assert fmt_setting(2.5e-4) == "2.5e-4" and fmt_setting(0.1 + 0.2) == "3.0000000000000004e-1"
    assert fmt_needed(0.0304) == "3.1e-2" and fmt_needed(0.03) == "3.0e-2"
    assert fmt_needed(0.0) == "0" and fmt_needed(math.inf) == "inf"
    assert fmt_share(1, 1_000_000) == "<0.01%" and fmt_share(12, 8192) == "0.15%"
    assert fmt_share(0, 0) == "0%"


@given(positive)
def test_suggested_atol_always_passes(x: float) -> None:
    assert float(fmt_needed(x)) >= x


@given(positive)
def test_settings_read_back_exactly(x: float) -> None:
    assert float(fmt_setting(x)) == x


def test_pair_shows_enough_digits_to_differ() -> None:
    assert fmt_pair(2.125, 2.1250002) == ("2.125", "2.1250002")
    assert fmt_pair(1.0, 1.0) == ("1", "1")
    # the same value to 17 digits, and two apart only there; -0 and 0 apart at 4
    assert fmt_pair(0.1 + 0.2, 0.1 + 0.2) == ("0.30000000000000004",) * 2
    assert fmt_pair(0.1 + 0.2, 0.3) == ("0.30000000000000004", "0.29999999999999999")
    assert fmt_pair(-0.0, 0.0) == ("-0", "0")
    assert fmt_pair(0.0, math.nan) == ("0", "nan")
    assert fmt_pair(None, 1.5) == ("?", "1.5")


def test_worst_output_prefers_unfixable_then_furthest_off() -> None:
    near = _output("near", False, 2e-4)
    far = _output("far", False, 5e-2)
    nan = _output("nan", False, None)
    ok = _output("ok", True, 9e-5)
    closer = _output("closer", True, 9.9e-5)
    assert worst_output([near, far, ok]) is far
    assert worst_output([near, nan, far]) is nan
    assert worst_output([ok, closer]) is closer
    assert worst_output([]) is None


@pytest.mark.parametrize(
    ("status", "stage", "message", "expected"),
    [
        ("error", "export", "boom", "export: boom"),
        ("error", None, "", "run: no message"),
        ("skipped", None, "", "skipped"),
        ("failed", "compare", "y drifted", "y drifted"),
        ("failed", "compare", "", "y: 5 of 100 elements (5.00%) out of tolerance; max abs"
                                  " 1.0e-2; atol 1e-4 + rtol 1e-3·|e|; needs atol ≥ 2.0e-4"),
    ],
)
def test_case_reason(status: str, stage: str | None, message: str, expected: str) -> None:
    case = CaseResult(id="m[x]", model="m", opset=17, exporter="dynamo", target="cpu",
                      dataset="d", batch_size=1, status=status, stage=stage,  # type: ignore[arg-type]
                      message=message, outputs=(_output("y", False, 2e-4),))
    assert case_reason(case) == expected


def test_output_sentence_for_each_kind_of_failure_recorded_without_a_kind() -> None:
    # Reports written before kinds: the figures say which verdict it was.
    shape = OutputComparison(name="y", passed=False, atol=0.0, rtol=0.0, required_atol=None,
                             expected_shape=(2, 3), actual_shape=(3, 2))
    assert output_sentence(shape) == "y: shape differs: expected (2, 3), got (3, 2)"
    dtype = OutputComparison(name="y", passed=False, atol=0.0, rtol=0.0, required_atol=None,
                             expected_dtype="float32", actual_dtype="float16")
    assert output_sentence(dtype) == "y: dtype differs: expected float32, got float16"
    nan = OutputComparison(name="y", passed=False, atol=0.0, rtol=0.0, required_atol=None,
                           elements=10, mismatches=2)
    assert output_sentence(nan) == (
        "y: 2 of 10 elements (20.00%) out of tolerance; NaN/Inf placement differs in 2 elements;"
        " max abs 0 over finite elements; atol 0 + rtol 0·|e|; no atol can pass (NaN/Inf"
        " placement differs)")
    assert output_sentence(_output("y", True, 0.0)) == (
        "y: max abs 1.0e-2 within atol 1e-4 + rtol 1e-3·|e|")
