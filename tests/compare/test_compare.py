"""Tests for compare/outputs.py: the tolerance rule, NaN/Inf, dtypes, figures and messages."""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from onnx_parity.compare.elements import excess
from onnx_parity.compare.outputs import _dtype_name, compare_case, compare_output, summarize
from onnx_parity.compare.sentences import output_sentence
from onnx_parity.errors import CompareError
from onnx_parity.frozen import replaced
from onnx_parity.results import OutputComparison, Tolerance, TopK

# compare.py must not leak numpy warnings (overflow, invalid, divide) into users' logs.
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

Array = np.ndarray[Any, Any]


def one(expected: Any, actual: Any, atol: float = 0.0, rtol: float = 0.0) -> OutputComparison:
    return compare_output(
        "out", [(np.asarray(expected), np.asarray(actual))], Tolerance(atol, rtol)
    )


def up(x: float) -> float:
    return float(np.nextafter(x, math.inf))


# --- the rule -------------------------------------------------------------------------------


def test_atol_only_boundary_passes_and_one_ulp_more_fails() -> None:
    assert one([1.0], [1.25], atol=0.25).passed
    assert one([1.0], [0.75], atol=0.25).passed
    assert not one([1.0], [up(1.25)], atol=0.25).passed


def test_rtol_only_scales_with_the_expected_value() -> None:
    assert one([4.0], [5.0], rtol=0.25).passed  # 1 == 0.25 * 4
    assert not one([4.0], [up(5.0)], rtol=0.25).passed
    # rtol is relative to |expected|, not |actual|: 0.25 * 5 would let 4 -> 5.25 pass
    assert not one([4.0], [5.25], rtol=0.25).passed
    assert one([-4.0], [-5.0], rtol=0.25).passed


def test_atol_and_rtol_add_up() -> None:
    assert one([4.0], [5.5], atol=0.5, rtol=0.25).passed  # 1.5 == 0.5 + 0.25 * 4
    assert not one([4.0], [up(5.5)], atol=0.5, rtol=0.25).passed
    assert not one([4.0], [5.5], atol=0.5).passed
    assert not one([4.0], [5.5], rtol=0.25).passed


def test_zero_tolerance_means_exact() -> None:
    assert one([0.1, 0.2], [0.1, 0.2]).passed
    assert not one([0.1], [up(0.1)]).passed


def test_figures_are_exact_for_a_known_case() -> None:
    c = one([1.0, 2.0, 0.0, 4.0], [1.5, 2.0, 0.25, 4.0], rtol=0.5)
    # d = [.5, 0, .25, 0]; rtol*|e| = [.5, 1, 0, 2]; excess = [0, -1, .25, -2]
    assert not c.passed
    assert (c.elements, c.mismatches) == (4, 1)
    assert c.max_abs == 0.5
    assert c.mean_abs == 0.1875
    assert c.max_rel == math.inf  # expected 0, actual 0.25
    assert c.required_atol == 0.25
    assert c.worst_index == (0, 2)
    assert (c.worst_expected, c.worst_actual) == (0.0, 0.25)
    assert c.mismatch_share == 0.25


def test_max_rel_treats_zero_against_zero_as_zero() -> None:
    c = one([0.0, 2.0], [0.0, 2.5], atol=1.0)
    assert c.passed
    assert c.max_rel == 0.25
    assert c.required_atol == 0.5


def test_negative_or_nan_tolerance_is_a_programming_error() -> None:
    with pytest.raises(ValueError):
        one([1.0], [1.0], atol=-1.0)
    with pytest.raises(ValueError):
        one([1.0], [1.0], rtol=math.nan)


# --- NaN and Inf ----------------------------------------------------------------------------


def test_nan_on_both_sides_passes() -> None:
    c = one([math.nan, 1.0], [math.nan, 1.0])
    assert c.passed
    assert c.elements == 2
    assert c.required_atol == 0.0


@pytest.mark.parametrize(("expected", "actual"), [(math.nan, 1.0), (1.0, math.nan)])
def test_nan_on_one_side_fails_whatever_the_tolerance(expected: float, actual: float) -> None:
    c = one([2.0, expected], [2.0, actual], atol=1e300, rtol=1e300)
    assert not c.passed
    assert c.mismatches == 1
    assert c.required_atol is None
    assert c.worst_index == (0, 1)
    assert c.worst_expected is not None and c.worst_actual is not None
    assert math.isnan(c.worst_expected) != math.isnan(c.worst_actual)
    assert "NaN/Inf placement differs" in c.message
    assert "no atol can pass" in c.message


def test_infinities_must_match_exactly() -> None:
    assert one([math.inf, -math.inf], [math.inf, -math.inf]).passed
    plus_minus = one([math.inf], [-math.inf], atol=1e300)
    assert not plus_minus.passed and plus_minus.required_atol is None
    assert not one([math.inf], [1e308], atol=1e300, rtol=1e300).passed
    assert not one([1e308], [math.inf], atol=1e300, rtol=1e300).passed
    assert not one([math.inf], [math.nan]).passed


def test_the_first_placement_mismatch_is_the_worst_even_beside_larger_finite_errors() -> None:
    c = one([0.0, 1.0, math.inf, math.nan], [100.0, 1.0, 5.0, 0.0])
    assert c.mismatches == 3
    assert c.worst_index == (0, 2)
    assert c.max_abs == 100.0  # figures stay over the elements finite on both sides
    assert c.mean_abs == 50.0


# --- shapes ---------------------------------------------------------------------------------


def test_empty_tensors_pass_when_shapes_match() -> None:
    e = np.zeros((0, 3), np.float32)
    c = compare_output("out", [(e, e.copy())], Tolerance(0.0, 0.0))
    assert c.passed
    assert (c.elements, c.mismatches, c.max_abs, c.required_atol) == (0, 0, 0.0, 0.0)
    assert c.worst_index is None and c.worst_expected is None
    bad = compare_output("out", [(e, np.zeros((0, 4), np.float32))], Tolerance(0.0, 0.0))
    assert not bad.passed
    assert "shape differs in sample 0: expected (0, 3), got (0, 4)" in bad.message


def test_zero_dimensional_tensors() -> None:
    c = one(np.float32(1.0), np.float32(1.5), atol=0.1)
    assert not c.passed
    assert c.worst_index == (0,)
    assert (c.worst_expected, c.worst_actual) == (1.0, 1.5)
    assert c.expected_shape == ()
    assert c.required_atol == 0.5
    pairs = [(np.array(1.0), np.array(1.0)), (np.array(2.0), np.array(2.25))]
    two = compare_output("out", pairs, Tolerance(0.0, 0.0))
    assert two.worst_index == (1,)
    assert two.elements == 2


def test_shape_mismatch_names_the_sample_and_gives_no_figures() -> None:
    ok = np.zeros((1, 10), np.float32)
    pairs = [(ok, ok.copy()), (ok, np.zeros((1, 1, 10), np.float32))]
    c = compare_output("logits", pairs, Tolerance(1e-5, 1e-3))
    assert not c.passed
    assert c.message == "logits: shape differs in sample 1: expected (1, 10), got (1, 1, 10)"
    assert (c.expected_shape, c.actual_shape) == ((1, 10), (1, 1, 10))
    assert (c.elements, c.mismatches, c.required_atol, c.worst_index) == (0, 0, None, None)


def test_samples_may_differ_in_shape_and_worst_index_carries_the_sample() -> None:
    short = np.arange(3, dtype=np.float32).reshape(1, 3)
    long = np.arange(5, dtype=np.float32).reshape(1, 5)
    long_off = long.copy()
    long_off[0, 4] += 0.5
    pairs = [(short, short + np.float32(0.125)), (long, long_off)]
    c = compare_output("hidden", pairs, Tolerance(0.0, 0.0))
    assert not c.passed
    assert (c.elements, c.mismatches) == (8, 4)
    assert c.worst_index == (1, 0, 4)
    assert (c.worst_expected, c.worst_actual) == (4.0, 4.5)
    assert c.max_abs == 0.5
    assert c.mean_abs == (3 * 0.125 + 0.5) / 8
    assert "at sample 1 [0, 4]: expected 4, got 4.5" in c.message


# --- dtypes ---------------------------------------------------------------------------------


def test_dtype_mismatch_message_and_no_figures() -> None:
    c = one(np.zeros(3, np.float32), np.zeros(3, np.float64), atol=1.0)
    assert not c.passed
    assert c.message == "out: dtype differs in sample 0: expected float32, got float64"
    assert (c.expected_dtype, c.actual_dtype) == ("float32", "float64")
    assert (c.elements, c.required_atol, c.worst_index) == (0, None, None)


def test_byte_order_is_not_a_dtype_difference() -> None:
    e = np.array([1.0, 2.0], dtype=">f4")
    assert one(e, np.array([1.0, 2.0], dtype="<f4")).passed


def test_dtype_names_are_numpys_however_often_read() -> None:
    # the names are kept per dtype once worked out: a second read, and a dtype equal to an
    # earlier one but spelled otherwise, name it as numpy does
    for _ in range(2):
        for dtype in ("<f4", ">f4", "float32", "i8", "q", "U3", "U9", "S2", "O", "bool",
                      ml_dtypes.bfloat16, "M8[s]", "M8[ms]"):
            array = np.zeros(2, dtype)
            name = "string" if array.dtype.kind in "OUS" else array.dtype.name
            assert _dtype_name(array) == name, dtype


def test_a_verdict_changed_is_what_dataclasses_replace_makes() -> None:
    # replaced skips the constructor of a class with no __post_init__, as OutputComparison is
    assert not hasattr(OutputComparison, "__post_init__")
    c = one(np.array([1.0, 2.0]), np.array([1.0, 2.5]))
    changed = {"passed": True, "kind": "passed", "metrics": {"cosine": 1.0}, "message": "m"}
    assert replaced(c, **changed) == dataclasses.replace(c, **changed)
    assert repr(replaced(c, **changed)) == repr(dataclasses.replace(c, **changed))
    assert replaced(c, message="m").metrics is c.metrics and c.message != "m"
    with pytest.raises(TypeError, match="no field colour"):
        replaced(c, colour="red")


def test_int64_extremes_do_not_overflow() -> None:
    lo, hi = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    c = one(np.array([hi, lo]), np.array([lo, hi]))
    assert c.mismatches == 2
    assert c.max_abs == float(2**64 - 1)
    assert c.worst_index == (0, 0)
    assert f"expected {hi}, got {lo}" in c.message
    assert one(np.array([hi, lo]), np.array([lo, hi]), atol=2.0**64).passed
    assert not one(np.array([hi, lo]), np.array([lo, hi]), atol=2.0**63).passed


def test_int64_differences_are_exact_beyond_float64_precision() -> None:
    # float64 cannot tell 2**62 from 2**62 + 1; the comparison must.
    e, a = np.array([2**62], np.int64), np.array([2**62 + 1], np.int64)
    c = one(e, a, atol=0.5)
    assert not c.passed
    assert c.max_abs == 1.0
    assert one(e, a, atol=1.0).passed


def test_uint64_and_uint8_differences_do_not_wrap() -> None:
    top = np.iinfo(np.uint64).max
    c = one(np.array([0, top], np.uint64), np.array([top, 0], np.uint64))
    assert c.mismatches == 2 and c.max_abs == float(top)
    u8 = one(np.array([0, 255], np.uint8), np.array([255, 0], np.uint8), atol=254)
    assert u8.mismatches == 2 and u8.max_abs == 255.0
    assert one(np.array([0, 255], np.uint8), np.array([255, 0], np.uint8), atol=255).passed


def test_integer_rtol() -> None:
    assert one(np.array([100], np.int32), np.array([110], np.int32), rtol=0.1).passed
    assert not one(np.array([100], np.int32), np.array([111], np.int32), rtol=0.1).passed


def test_bool_must_be_equal_and_ignores_tolerance() -> None:
    assert one([True, False], [True, False]).passed
    c = one([True, False, False], [True, True, False], atol=10.0, rtol=10.0)
    assert not c.passed
    assert (c.elements, c.mismatches) == (3, 1)
    assert c.required_atol is None
    assert c.worst_index == (0, 1)
    assert (c.worst_expected, c.worst_actual) == (0.0, 1.0)
    assert "expected False, got True" in c.message
    assert "booleans must match exactly" in c.message


def test_float16_is_compared_in_float64() -> None:
    e = np.array([1.0], np.float16)
    a = np.array([1.0 + 2**-10], np.float16)
    assert one(e, a, rtol=1e-3).passed  # 2**-10 ~ 9.77e-4 <= 1e-3
    c = one(e, a, rtol=9e-4)
    assert not c.passed
    assert c.max_abs == 2**-10
    assert c.required_atol == pytest.approx(2**-10 - 9e-4, rel=1e-12)


def test_bfloat16_is_supported() -> None:
    e = np.array([1.0, math.nan, math.inf], ml_dtypes.bfloat16)
    a = np.array([1.0 + 2**-7, math.nan, math.inf], ml_dtypes.bfloat16)
    c = one(e, a, atol=2**-7)
    assert c.passed and c.max_abs == 2**-7
    assert c.expected_dtype == "bfloat16"
    failed = one(e, a, atol=2**-8)
    assert not failed.passed and failed.worst_index == (0, 0)
    other = one(e, a.astype(np.float32))
    assert other.message == "out: dtype differs in sample 0: expected bfloat16, got float32"


def test_complex_is_compared_by_the_magnitude_of_the_difference() -> None:
    z = np.array([1 + 1j, 3 - 4j], np.complex64)
    assert one(z, z.copy()).passed
    c = one(z, z + np.complex64(3e-4 + 4e-4j), atol=1e-4, rtol=0.0)
    assert not c.passed and c.max_abs == pytest.approx(5e-4, rel=1e-3)
    assert c.required_atol == pytest.approx(5e-4, rel=1e-3)
    assert one(z, z + np.complex64(3e-4 + 4e-4j), atol=6e-4, rtol=0.0).passed
    nan = np.array([complex(np.nan, 1.0)], np.complex128)
    assert one(nan, nan.copy()).passed
    assert one(nan, np.array([1 + 1j])).required_atol is None


def test_strings_must_match_exactly_however_numpy_holds_them() -> None:
    recorded = np.array(["abc", "déf"], dtype=object)  # onnx's to_array
    assert one(recorded, np.array(["abc", "déf"])).passed  # numpy's own str
    assert one(recorded, np.array([b"abc", "déf".encode()], dtype=object)).passed  # bytes
    c = one(recorded, np.array(["abc", "deg"], dtype=object), atol=1.0, rtol=1.0)
    assert not c.passed and c.required_atol is None and c.worst_index == (0, 1)
    assert "expected 'déf', got 'deg'; strings must match exactly" in c.message


# --- required_atol and messages -------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize("seed", range(5))
def test_required_atol_is_just_enough(dtype: Any, seed: int) -> None:
    rng = np.random.default_rng(seed)
    scale = 1000.0 if np.dtype(dtype).kind == "i" else 1.0
    e = (rng.standard_normal((4, 7)) * scale).astype(dtype)
    a = (e.astype(np.float64) + rng.standard_normal((4, 7)) * scale * 0.01).astype(dtype)
    rtol = [0.0, 1e-3, 0.01][seed % 3]
    c = one(e, a, rtol=rtol)
    assert c.required_atol is not None and c.required_atol > 0.0
    assert one(e, a, atol=c.required_atol, rtol=rtol).passed
    assert not one(e, a, atol=c.required_atol * (1 - 1e-9), rtol=rtol).passed


def test_failure_message_explains_where_and_by_how_much() -> None:
    e = np.linspace(0.0, 1.0, 80, dtype=np.float32).reshape(2, 4, 10)
    a = e.copy()
    a[1, 2, :] += np.float32(0.01)
    a[1, 3, :2] += np.float32(0.01)
    a[0, 1, 3] += np.float32(0.03)
    c = compare_output("logits", [(e, a)], Tolerance(1e-5, 1e-3))
    assert c.mismatches == 13
    assert c.message.startswith("logits: 13 of 80 elements (16.25%) out of tolerance; ")
    assert "worst at [0, 1, 3]: expected 0.1646, got 0.1946" in c.message
    assert "atol 1e-5 + rtol 1e-3·|e|" in c.message  # the wording every report uses
    printed = re.search(r"needs atol ≥ (\S+)$", c.message)
    assert printed is not None
    # The printed atol is rounded up, so it really passes.
    assert compare_output("logits", [(e, a)], Tolerance(float(printed[1]), 1e-3)).passed
    assert "\n" not in c.message


def test_close_values_are_printed_with_enough_digits_to_differ() -> None:
    c = one([0.123456789], [0.123457289])
    assert "expected 0.1234568, got 0.1234573" not in c.message
    assert "expected 0.123456789, got 0.123457289" in c.message


def test_passed_message_is_short() -> None:
    c = compare_output("logits", [(np.array([0.5]), np.array([0.5 + 2e-7]))], Tolerance(1e-5, 1e-3))
    assert c.passed
    assert c.message == "logits: max abs 2.0e-7 within atol 1e-5 + rtol 1e-3·|e|"


def test_zero_samples_is_a_programming_error() -> None:
    with pytest.raises(ValueError):
        compare_output("out", [], Tolerance(0.0, 0.0))


# --- compare_case and summarize -------------------------------------------------------------


def test_compare_case_uses_each_outputs_tolerance() -> None:
    e = [[np.array([1.0]), np.array([1.0])], [np.array([2.0]), np.array([2.0])]]
    a = [[np.array([1.1]), np.array([1.1])], [np.array([2.0]), np.array([2.0])]]
    tolerances = {"loose": Tolerance(0.2, 0.0), "tight": Tolerance(1e-3, 0.0)}
    loose, tight = compare_case(["loose", "tight"], e, a, tolerances.__getitem__)
    assert (loose.name, loose.passed, loose.atol) == ("loose", True, 0.2)
    assert (tight.name, tight.passed, tight.atol) == ("tight", False, 1e-3)
    assert tight.elements == 2  # one element in each of the two samples
    assert tight.worst_index == (0, 0)
    assert summarize((loose, tight)) == tight.message
    assert summarize((loose, loose)) == "all 2 outputs within tolerance"


def test_summarize_joins_every_failing_message() -> None:
    bad1 = one([1.0], [2.0])
    bad2 = one([True], [False])
    good = one([1.0], [1.0])
    assert summarize([bad1, good, bad2]) == f"{bad1.message}; {bad2.message}"


def test_output_count_mismatch_raises_compare_error() -> None:
    x = np.zeros(2)
    with pytest.raises(CompareError) as raised:
        compare_case(["logits", "hidden"], [[x, x]], [[x, x, x]], lambda _: Tolerance(0.0, 0.0))
    assert raised.value.stage == "compare"
    assert "expected 2, got 3" in raised.value.message
    assert "logits, hidden" in raised.value.message


def test_sample_count_mismatch_and_no_samples_are_programming_errors() -> None:
    x = np.zeros(2)
    with pytest.raises(ValueError):
        compare_case(["y"], [[x], [x]], [[x]], lambda _: Tolerance(0.0, 0.0))
    with pytest.raises(ValueError):
        compare_case(["y"], [], [], lambda _: Tolerance(0.0, 0.0))


# --- property test against an element-by-element reference ----------------------------------

DTYPES: list[Any] = [
    np.float16,
    np.float32,
    np.float64,
    ml_dtypes.bfloat16,
    np.int8,
    np.uint8,
    np.int32,
    np.int64,
    np.uint64,
    np.bool_,
]


def _elements(dtype: Any) -> st.SearchStrategy[Any]:
    if dtype is ml_dtypes.bfloat16:
        return st.floats(width=32)
    if np.dtype(dtype).kind == "f":
        special = st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0])
        return st.one_of(special, st.floats(width=np.dtype(dtype).itemsize * 8))
    return hnp.from_dtype(np.dtype(dtype))


@st.composite
def _samples(draw: st.DrawFn) -> tuple[list[tuple[Array, Array]], Tolerance]:
    dtype = draw(st.sampled_from(DTYPES))
    store = np.float32 if dtype is ml_dtypes.bfloat16 else dtype
    pairs = []
    for _ in range(draw(st.integers(1, 3))):
        shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4))
        e = draw(hnp.arrays(store, shape, elements=_elements(dtype)))
        other = draw(hnp.arrays(store, shape, elements=_elements(dtype)))
        replace = draw(hnp.arrays(np.bool_, shape))
        a = np.where(replace, other, e)
        if np.dtype(dtype).kind == "f" and draw(st.booleans()):
            # nudges around the tolerance boundary, not just wild values
            noise = draw(hnp.arrays(np.float64, shape, elements=st.floats(-1e-2, 1e-2)))
            with np.errstate(all="ignore"):
                a = (a.astype(np.float64) * (1.0 + noise)).astype(store)
        pairs.append((e.astype(dtype), a.astype(dtype)))
    atol = draw(st.sampled_from([0.0, 1e-6, 1e-3, 0.5, 1.0, 100.0]))
    rtol = draw(st.sampled_from([0.0, 1e-5, 1e-3, 0.1, 1.0]))
    return pairs, Tolerance(atol, rtol)


@dataclass
class _Expect:
    mismatches: int = 0
    placement: int = 0  # NaN/Inf placement mismatches
    finite: int = 0
    sum_abs: float = 0.0
    max_abs: float = 0.0
    max_rel: float = 0.0
    required: float = 0.0  # lower bound of required_atol
    scale: float = 0.0  # the largest |a - e| or rtol * |e|: required_atol is exact to its ulps
    largest_e: float = 0.0  # over the finite elements
    largest_a: float = 0.0
    powerless: bool = False


def _floating(dtype: np.dtype[Any]) -> bool:
    """float16/32/64, and bfloat16 and the float8 types, which numpy files as kind "V"."""
    return dtype.kind == "f" or (dtype.kind == "V" and "float" in dtype.name)


def _reference(pairs: list[tuple[Array, Array]], tol: Tolerance) -> _Expect:
    """The expected figures, one Python element at a time."""
    out = _Expect()
    for e, a in pairs:
        if e.dtype.kind in "biu":
            xs, ys = e.ravel().tolist(), a.ravel().tolist()
        else:
            xs, ys = e.astype(np.float64).ravel().tolist(), a.astype(np.float64).ravel().tolist()
        for x, y in zip(xs, ys, strict=True):
            if isinstance(x, bool):
                ok, d = x == y, float(x != y)
            elif isinstance(x, int):
                diff = abs(y - x)  # Python ints: exact
                ok = diff <= tol.atol + tol.rtol * abs(x)  # int <= float compares exactly
                d = float(diff)
            elif math.isnan(x) or math.isnan(y) or math.isinf(x) or math.isinf(y):
                bad = not (math.isnan(x) and math.isnan(y)) and x != y
                out.mismatches += bad
                out.placement += bad
                continue
            else:
                d = abs(y - x)
                ok = d <= tol.atol + tol.rtol * abs(x)
            out.mismatches += not ok
            out.finite += 1
            out.sum_abs += d
            out.max_abs = max(out.max_abs, d)
            rel = d / abs(x) if x != 0 else (0.0 if d == 0 else math.inf)
            out.max_rel = max(out.max_rel, rel)
            if not isinstance(x, bool):
                excess = d - tol.rtol * abs(x)
                if excess > out.required:  # NaN (inf - inf) never raises it
                    out.required = excess
                out.scale = max(out.scale, d, tol.rtol * abs(x))
            if _floating(e.dtype):
                out.largest_e = max(out.largest_e, abs(x))
                out.largest_a = max(out.largest_a, abs(y))
    # The power rule: a float output the tolerance could not have failed does not pass.
    out.powerless = (_floating(pairs[0][0].dtype) and out.mismatches == 0
                     and out.largest_e > 0 and max(out.largest_e, out.largest_a) <= tol.atol)
    return out


@settings(max_examples=300, deadline=None)
@given(_samples())
def test_agrees_with_an_element_by_element_reference(
    case: tuple[list[tuple[Array, Array]], Tolerance],
) -> None:
    pairs, tol = case
    c = compare_output("out", pairs, tol)
    want = _reference(pairs, tol)
    assert c.elements == sum(e.size for e, _ in pairs)
    assert c.mismatches == want.mismatches
    assert (c.placement, c.finite, c.samples) == (want.placement, want.finite, len(pairs))
    assert c.message == output_sentence(c)  # the one writer, from the figures alone
    assert c.powerless == want.powerless
    assert c.passed == (want.mismatches == 0 and not want.powerless)
    assert c.max_abs == pytest.approx(want.max_abs, rel=1e-12)
    assert c.max_rel == pytest.approx(want.max_rel, rel=1e-12)
    mean = want.sum_abs / want.finite if want.finite else 0.0
    assert c.mean_abs == pytest.approx(mean, rel=1e-9)
    if c.worst_index is not None:
        sample, *index = c.worst_index
        assert len(index) == pairs[sample][0].ndim
        assert all(0 <= i < n for i, n in zip(index, pairs[sample][0].shape, strict=True))
    else:
        assert want.finite == 0 and want.placement == 0
    is_bool = pairs[0][0].dtype == np.bool_
    if want.placement or (is_bool and want.mismatches):
        assert c.required_atol is None
    else:
        assert c.required_atol is not None
        assert c.required_atol >= want.required
        # float64 rounding of atol + rtol * |e| may need an atol a few ulps above the bound
        assert c.required_atol - want.required <= 8 * math.ulp(want.scale)
        if not is_bool and math.isfinite(c.required_atol):
            again = compare_output("out", pairs, Tolerance(c.required_atol, tol.rtol))
            assert again.mismatches == 0 and (again.passed or again.powerless)


@settings(max_examples=300, deadline=None)
@given(_samples())
def test_localizations_excess_holds_tensors_to_the_same_rule(
    case: tuple[list[tuple[Array, Array]], Tolerance],
) -> None:
    pairs, tol = case
    for e, a in pairs:
        c = compare_output("out", [(e, a)], tol)
        assert (excess(e, a, tol.atol, tol.rtol) <= 1.0) == (c.mismatches == 0)


def test_excess_does_not_round_across_the_boundary() -> None:
    # 2 / nextafter(2, 0) is 1 + 2**-53 exactly, which rounds to 1.0: a ratio computed plainly
    # would call this element within tolerance, which the rule does not.
    below_two = float(np.nextafter(2.0, 0.0))
    assert not one([0.0], [2.0], atol=below_two).passed
    assert excess(np.array([0.0]), np.array([2.0]), below_two, 0.0) > 1.0
    assert excess(np.array([0.0]), np.array([below_two]), below_two, 0.0) == 1.0
    # float64 cannot tell 2**62 from 2**62 + 1; the rule, and so excess, can.
    big = np.array([2**62], dtype=np.int64)
    assert excess(big, big + 1, 0.5, 0.0) > 1.0 and not one(big, big + 1, atol=0.5).passed
    assert excess(np.array([1.0, math.nan]), np.array([1.0, 2.0]), 1e9, 0.0) == math.inf
    assert excess(np.array([True]), np.array([False]), 1e9, 0.0) == math.inf
    assert excess(np.zeros((2, 3)), np.zeros((3, 2)), 1.0, 0.0) == math.inf
    # an fp16 graph against float32 PyTorch: values meet in float64
    assert excess(np.array([1.0], np.float32), np.array([1.0], np.float16), 0.0, 0.0) == 0.0


# --- kinds: what decided the verdict, for wording to say ----------------------------------------


def test_each_verdict_records_its_kind_and_the_figures_wording_needs() -> None:
    assert one([1.0], [1.0]).kind == "passed"
    assert one([1.0], [2.0]).kind == "elements"
    nan = one([math.nan, 1.0, 2.0], [1.0, 1.0, 2.0])
    assert (nan.kind, nan.placement, nan.finite) == ("nonfinite", 1, 2)
    assert one(np.array([True]), np.array([False])).kind == "exact"
    ints = one(np.array([2**62], np.int64), np.array([2**62 + 1], np.int64))
    assert ints.quoted == (str(2**62), str(2**62 + 1)) and ints.kind == "elements"
    shape = compare_output("y", [(np.zeros(2), np.zeros(2)), (np.zeros(3), np.zeros(2))],
                           Tolerance(0.0, 0.0))
    assert (shape.kind, shape.sample, shape.samples) == ("shape", 1, 2)
    assert shape.message == "y: shape differs in sample 1: expected (3,), got (2,)"
    mixed = compare_output("y", [(np.zeros(2), np.zeros(2)),
                                 (np.zeros(2, np.int64), np.zeros(2, np.int64))],
                           Tolerance(0.0, 0.0))
    assert mixed.kind == "mixed" and mixed.message == (
        "y: the reference's dtype changes between samples: float64 in sample 0, int64 in sample 1")
    odd = one(np.array(["2020-01-01"], "datetime64[D]"), np.array(["2020-01-01"], "datetime64[D]"))
    assert odd.kind == "unsupported" and odd.message == "out: cannot compare datetime64[D] outputs"
    tiny = compare_output("y", [(np.full(3, 1e-9), np.full(3, 2e-9))], Tolerance(1e-4, 1e-3))
    assert (tiny.kind, tiny.scale, tiny.actual_scale) == ("powerless", 1e-9, 2e-9)
    assert tiny.message.startswith(
        "y: no power: every element of the reference (largest |e| 1.0e-9) and of the output"
        " (largest 2.0e-9) lies within atol 1e-4 of zero")


def test_metric_verdicts_say_each_criterion_with_its_threshold() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 10))
    noisy = x + rng.standard_normal((4, 10)) * 0.3
    c = compare_output("y", [(x, noisy)], Tolerance(1.0, 0.0, elementwise=False,
                                                   metrics={"cosine": 0.999, "topk": TopK(2, 0.0)}))
    assert (c.kind, c.failed, c.thresholds) == ("metric", ("cosine",), {"cosine": 0.999,
                                                                          "top2": 0.0})
    assert c.message == (f"y: cosine {c.metrics['cosine']:.4f} < 0.999"
                         f" (SQNR {c.metrics['sqnr_db']:.1f} dB,"
                         f" top-2 agreement {c.metrics['top2']:.3g})")
    passed = compare_output("y", [(x, x)], Tolerance(1e-4, 0.0, metrics={"cosine": 0.99}))
    assert passed.kind == "passed" and passed.message == (
        "y: max abs 0 within atol 1e-4 + rtol 0·|e|; cosine 1.0000 ≥ 0.99 (SQNR inf dB,"
        " top-1 agreement 1)")


def test_sequence_and_map_outputs_say_where_they_part() -> None:
    tol = Tolerance(1e-4, 1e-3)
    (keys,) = compare_case(["p"], [[[{0: 0.1, 1: 0.9}]]], [[[{0: 0.1}]]], lambda _: tol)
    assert (keys.kind, keys.sample, keys.where) == ("structure", 0, "[0]")
    assert keys.message == "p: structure differs in sample 0: at [0]: expected the keys 0, 1, got 0"
    (empty,) = compare_case(["p"], [[None]], [[[1.0]]], lambda _: tol)
    assert empty.message == (
        "p: structure differs in sample 0: at the top: expected nothing (None), got a sequence")
    (drift,) = compare_case(["p"], [[{"a": 0.1, "b": 0.9}]], [[{"a": 0.1, "b": 0.5}]],
                            lambda _: tol)
    assert drift.where == "['b']" and drift.message.endswith("; worst element at p['b']")
