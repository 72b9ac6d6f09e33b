"""Comparing outputs: (expected, actual) tensors in, verdicts (figures and a kind) out.

sentences.output_sentence says each verdict; compare records it as the message, for the JSON.

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
part being placed as for floats. Other dtypes fail ("unsupported").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from onnx_parity.compare import metrics
from onnx_parity.compare.blind import Watch, blindness
from onnx_parity.compare.elements import compare_elements, kind_of
from onnx_parity.compare.sentences import output_sentence, outputs_sentence
from onnx_parity.compare.structured import flatten_pairs, is_structured
from onnx_parity.errors import CompareError
from onnx_parity.frozen import replaced
from onnx_parity.metrics.base import holds
from onnx_parity.metrics.registry import gating
from onnx_parity.results import ELEMENTWISE, OutputComparison, OutputKind, Tolerance
from onnx_parity.spec.model import Detections
from onnx_parity.wording import criterion_text, gates

__all__ = ["compare_case", "compare_output", "summarize", "verdict"]


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
    return _worded(_compare(name, pairs, tolerance))


def _worded(result: OutputComparison) -> OutputComparison:
    """The result with its sentence, written by wording from its figures, for the JSON."""
    return replaced(result, message=output_sentence(result))


def _compare(
    name: str,
    pairs: Sequence[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]],
    tolerance: Tolerance,
) -> OutputComparison:
    if not pairs:
        raise ValueError(f"{name}: no samples to compare")
    atol, rtol = float(tolerance.atol), float(tolerance.rtol)
    if not (atol >= 0.0 and rtol >= 0.0):  # also rejects NaN
        raise ValueError(f"{name}: tolerance must be non-negative, got atol {atol}, rtol {rtol}")
    arrays = [(np.asarray(e), np.asarray(a)) for e, a in pairs]

    base: dict[str, Any] = {"name": name, "atol": atol, "rtol": rtol, "required_atol": None,
                            "samples": len(arrays)}
    # Every sample's dtype first, then every sample's shape: a dtype error explains a shape one.
    checks: tuple[tuple[OutputKind, Callable[[np.ndarray], Any]], ...] = (
        ("dtype", _dtype_name), ("shape", _shape_of))
    for what, read in checks:
        for s, (e, a) in enumerate(arrays):
            if read(e) != read(a):
                return OutputComparison(
                    passed=False, kind=what, sample=s, expected_shape=e.shape,
                    actual_shape=a.shape, expected_dtype=_dtype_name(e),
                    actual_dtype=_dtype_name(a), **base)

    e0, a0 = arrays[0]
    base.update(
        expected_shape=e0.shape,
        actual_shape=a0.shape,
        expected_dtype=_dtype_name(e0),
        actual_dtype=_dtype_name(a0),
    )
    families = [kind_of(e.dtype) for e, _ in arrays]
    other = next((s for s, family in enumerate(families) if family != families[0]), None)
    if other is not None:
        # The expected side itself changed dtype family between samples: nothing sensible to say.
        return OutputComparison(passed=False, kind="mixed", sample=other,
                                quoted=(e0.dtype.name, arrays[other][0].dtype.name), **base)
    kind = families[0]
    if kind == "unsupported":
        return OutputComparison(passed=False, kind="unsupported", **base)

    result = compare_elements(arrays, kind, atol, rtol, base)
    if kind == "float":
        return _judge(result, arrays, tolerance)
    if kind == "complex" and result.passed:
        return _power(result, arrays)
    return result


def _judge(result: OutputComparison, arrays: Sequence[tuple[np.ndarray[Any, Any],
                                                            np.ndarray[Any, Any]]],
           tolerance: Tolerance) -> OutputComparison:
    """A floating output against every criterion its tolerance gives: atol/rtol element by
    element (unless not given), and the metrics it sets over the output. Every metric always
    measured is recorded whichever ones gate it."""
    measured = metrics.measures(arrays, tolerance.metrics)
    found = measured.metrics
    thresholds = gates(tolerance)
    failed = tuple(metric.name(setting) for metric, setting in gating(tolerance.metrics)
                   if not holds(metric, found[metric.name(setting)], metric.threshold(setting)))
    criteria = ([ELEMENTWISE] if tolerance.elementwise else []) + [
        criterion_text(n, threshold) for n, threshold in thresholds.items()]
    elements_failed = tolerance.elementwise and not result.passed
    judged = replaced(
        result, metrics=found, criteria=tuple(criteria), thresholds=thresholds, failed=failed,
        passed=not (elements_failed or failed), scale=measured.scale,
        histogram=measured.histogram,
        kind=result.kind if elements_failed else "metric" if failed else "passed")
    if judged.passed and tolerance.elementwise and not thresholds:
        return _power(judged, arrays)
    return judged


def _power(result: OutputComparison,
           arrays: Sequence[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]) -> OutputComparison:
    """A pass only counts if the tolerance could have failed it. Where every reference and
    actual element lies within atol of zero while the reference is not all zero, any output
    of that size passes (random weights can give outputs near 1e-10): not a pass. Outputs that
    are all zero (masks) stay checkable."""
    # A floating output's scale (metrics.scale) is already this; complex outputs have none.
    largest_e = result.scale if result.scale is not None else max(_largest(e) for e, _ in arrays)
    largest_a = max(_largest(a) for _, a in arrays)
    if not (largest_e > 0.0 and max(largest_e, largest_a) <= result.atol):
        return result
    return replaced(result, passed=False, powerless=True, kind="powerless",
                    scale=largest_e, actual_scale=largest_a)


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
    watch: Watch | None = None,
    detections: Detections | None = None,
    reference: str = "the reference",
) -> tuple[OutputComparison, ...]:
    """Compare every output of a case; expected[s][k] is output `names[k]` of sample s. With a
    `watch`, an output that passed but whose reference could see nothing before it
    (blind.py) did not pass: the case is in error, as for a powerless tolerance. The outputs
    `detections` names are compared as sets (detections.py); `reference` says who the
    expected side is ("PyTorch") where a sentence needs it.

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
    as_sets: dict[int, OutputComparison] = {}
    if detections is not None:
        from onnx_parity.compare.detections import compare_sets  # only a detection model

        as_sets = compare_sets(names, detections, expected, actual, tolerance_for, _compare,
                               reference)
    results = []
    for k, name in enumerate(names):
        pairs = [(exp_s[k], act_s[k]) for exp_s, act_s in zip(expected, actual, strict=True)]
        result = (_worded(as_sets[k]) if k in as_sets
                  else _compare_any(name, pairs, tolerance_for(name)))
        found = blindness(name, [e for e, _ in pairs], watch) if watch is not None else None
        if found is not None and result.passed:
            result = _worded(replaced(result, passed=False, powerless=True, kind=found))
        results.append(result)
    return tuple(results)


def _compare_any(name: str, pairs: Sequence[tuple[Any, Any]],
                 tolerance: Tolerance) -> OutputComparison:
    """A tensor output, or a sequence / map one (structured.py) compared leaf by leaf."""
    if not any(is_structured(e) or is_structured(a) for e, a in pairs):
        return compare_output(name, pairs, tolerance)
    flattened = flatten_pairs(pairs)
    if not isinstance(flattened, tuple):
        return _worded(OutputComparison(
            name=name, passed=False, kind="structure", atol=tolerance.atol, rtol=tolerance.rtol,
            required_atol=None, samples=len(pairs), sample=flattened.sample,
            where=flattened.path, quoted=flattened.holds))
    flat, paths = flattened
    result = _compare(name, flat, tolerance)
    if not result.passed and result.worst_index is not None and len(result.worst_index) >= 2:
        sample, index = result.worst_index[0], result.worst_index[1]
        result = dataclasses.replace(result, where=paths[sample][index])
    return _worded(result)


def verdict(comparisons: Sequence[OutputComparison]) -> Literal["passed", "failed", "error"]:
    """The case's status: failed when an output drifted; an error when the only outputs that
    did not pass are ones the tolerance could not have failed (no check took place there);
    passed otherwise."""
    if any(not c.passed and not c.powerless for c in comparisons):
        return "failed"
    return "error" if any(c.powerless for c in comparisons) else "passed"


def compared_positions(names: Sequence[str], ignored: Sequence[str]) -> list[int]:
    """Which of a model's outputs (`names`, in its order) a case compares: all but those the
    spec leaves out (ignore_outputs). The case and every re-run that explains it pick them here,
    so a cause is judged on the outputs the case was. An ignored name the model does not output
    is the spec's error, not a silent no-op."""
    unknown = [n for n in ignored if n not in names]
    if unknown:
        raise CompareError(f"ignore_outputs names {', '.join(unknown)}, which the model "
                           f"does not output (its outputs: {', '.join(names)})")
    return [k for k, name in enumerate(names) if name not in ignored]


def summarize(comparisons: Sequence[OutputComparison]) -> str:
    """The case's message: the failing outputs' sentences, or a short all-clear."""
    return outputs_sentence(comparisons)


def _dtype_name(array: np.ndarray) -> str:
    """The dtype as compared: strings are strings, however numpy holds them."""
    dtype = array.dtype
    try:
        return _DTYPE_NAMES[dtype]
    except KeyError:
        # numpy works `dtype.name` out in Python on every read (a few microseconds, four reads
        # an output); equal dtypes have the same name, so each is worked out once a process
        name = _DTYPE_NAMES[dtype] = "string" if dtype.kind in "OUS" else dtype.name
        return name


_DTYPE_NAMES: dict[np.dtype[Any], str] = {}


def _shape_of(array: np.ndarray) -> tuple[int, ...]:
    return tuple(array.shape)
