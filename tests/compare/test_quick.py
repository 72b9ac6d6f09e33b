"""Tests for compare/quick.py: a step it vouches for is one compare_case passes, with the same
max abs (and atol, the rollout's nearness); every other step is left to compare_case."""

from __future__ import annotations

import numpy as np

from onnx_parity.compare import quick
from onnx_parity.compare.blind import Watch
from onnx_parity.compare.outputs import compare_case, verdict
from onnx_parity.compare.quick import Nearest, quick_case, quick_judged
from onnx_parity.compare.stepwise import judge_rollout
from onnx_parity.results import OutputComparison, Tolerance, TopK


def _cases() -> list[tuple[list[list[np.ndarray]], list[list[np.ndarray]], Tolerance]]:
    rng = np.random.default_rng(0)
    cases = []
    for n in range(300):
        dtype = (np.float32, np.float64, np.float16)[n % 3]
        shape = (2, 3, 5) if n % 7 else (0, 4)
        samples = 1 + n % 2
        e = [[(rng.standard_normal(shape) * 10.0 ** rng.integers(-12, 3)).astype(dtype)
              for _ in range(2)] for _ in range(samples)]
        noise = 10.0 ** rng.integers(-9, 0)
        a = [[(x + rng.standard_normal(shape) * noise).astype(dtype) for x in s] for s in e]
        if n % 11 == 0 and a[0][0].size:
            a[0][0].reshape(-1)[0] = (np.nan, np.inf, -np.inf)[n % 3]
            if n % 2:
                e[0][0].reshape(-1)[0] = a[0][0].reshape(-1)[0]
        if n % 13 == 0:
            a[0][1] = a[0][1].astype(np.float64)  # a dtype that differs
        if n % 17 == 0:
            e = [[np.zeros(shape, dtype) for _ in s] for s in e]
        atol = float(10.0 ** rng.integers(-8, 0))
        tolerance = (Tolerance(atol, 1e-3, metrics={"topk": TopK(1, 0.9)}) if n % 19 == 0
                     else Tolerance(atol, float(10.0 ** rng.integers(-6, -1))))
        cases.append((e, a, tolerance))
    return cases


def test_quick_vouches_only_for_what_compare_case_passes_with_the_same_figures() -> None:
    names = ["h", "c"]
    watch = Watch(distinct=False, from_model=True, constant=frozenset())
    vouched = full_only = 0
    for e, a, tolerance in _cases():
        full = compare_case(names, e, a, lambda _, t=tolerance: t, watch)
        quick = quick_case(names, e, a, lambda _, t=tolerance: t, watch)
        if quick is None:
            full_only += 1
            continue
        vouched += 1
        assert verdict(full) == "passed"
        assert [(c.name, c.passed, c.max_abs, c.atol, c.powerless) for c in quick] == [
            (c.name, c.passed, c.max_abs, c.atol, c.powerless) for c in full]
        # made from a template, equal to what the dataclass's own __init__ makes
        assert list(quick) == [OutputComparison(
            name=c.name, passed=True, atol=c.atol, rtol=c.rtol, max_abs=c.max_abs,
            samples=c.samples, kind="passed") for c in full]
    assert vouched > 50 and full_only > 50  # both ways were taken
    # Detections, output-count mismatches and non-arrays go the full way.
    x = [[np.ones(3, np.float32)]]
    assert quick_case(["h", "c"], x, x, lambda _: Tolerance(1e-3, 1e-3)) is None
    assert quick_case(["h"], [[[1.0]]], [[[1.0]]], lambda _: Tolerance(1e-3, 1e-3)) is None


def test_the_judged_step_is_found_among_quick_steps_as_judge_rollout_finds_it() -> None:
    rng = np.random.default_rng(1)
    tolerance = Tolerance(1e-2, 1e-3)
    steps, full_steps, quick, best = [], [], set(), Nearest()
    for k in range(30):
        e = [[rng.standard_normal((4, 4)).astype(np.float32)]]
        a = [[(e[0][0] + rng.standard_normal((4, 4)) * 1e-4 * (1 + (k * 7) % 13)).astype(
            np.float32)]]
        full = compare_case(["y"], e, a, lambda _: tolerance)
        found = quick_case(["y"], e, a, lambda _: tolerance)
        assert found is not None
        quick.add(k)
        best.add(k, found, (e, a))
        steps.append(found)
        full_steps.append(full)
    at = quick_judged(steps, quick)
    assert at is not None and at == best.step and best.pair is not None
    steps[at] = compare_case(["y"], *best.pair, lambda _: tolerance)
    assert judge_rollout(steps, {}) == judge_rollout(full_steps, {})
    # A failing step is never quick, and then the judged step is not one of the quick ones.
    e = [[np.zeros((2,), np.float32) + 1]]
    failing = compare_case(["y"], e, [[e[0][0] + 1]], lambda _: tolerance)
    assert quick_judged([*steps, failing], quick) is None


def _large_cases() -> list[tuple[list[np.ndarray], list[np.ndarray], Tolerance, str]]:
    """Samples large enough for the float32 way (quick._LARGE elements and more), each with
    what it tries: an element one float32 step either side of the tolerance, a NaN or an
    infinity, both sides equal, differences quantized to a few values (many ties for the
    largest), opposite signs (float32's difference rounds), a tolerance float32 cannot hold,
    float16 and integers."""
    rng = np.random.default_rng(2)
    tolerances = [(1e-3, 1e-3), (1e-6, 0.0), (1e-2, 1e-5), (1e-8, 1e-1), (0.0, 1e-3),
                  (1e-35, 1e-3), (1e-3, 1e-35), (1e25, 1e10)]
    modes = ["noise", "inside", "edge", "outside", "nan", "inf", "equal", "ties", "signs",
             "float16", "int"]
    cases = []
    for k in range(2 * len(tolerances) * len(modes)):  # each pair twice
        n = quick._LARGE + int(rng.integers(0, 3 * quick._LARGE))
        atol, rtol = tolerances[k % len(tolerances)]
        mode = modes[k % len(modes)]
        e = rng.standard_normal(n) * 10.0 ** rng.integers(-4, 4)
        a = e + rng.standard_normal(n) * (atol + rtol * np.abs(e)) * 0.1
        if mode == "ties":
            a = e + (atol + rtol * np.abs(e).min()) * 0.5 * rng.integers(0, 3, n)
        elif mode == "signs":
            a = -e * 1e-9
        elif mode == "equal":
            a = e.copy()
        e32, a32 = e.astype(np.float32), a.astype(np.float32)
        j = int(rng.integers(n))
        if mode in ("inside", "edge", "outside"):
            bound = float(e32[j]) + atol + rtol * abs(float(e32[j]))
            at = np.float32(bound)
            step = {"inside": -1, "edge": 0, "outside": 1}[mode]
            for _ in range(abs(step)):
                at = np.nextafter(at, np.float32(np.inf * step))
            a32[j] = at
        elif mode in ("nan", "inf"):
            a32[j] = np.nan if mode == "nan" else np.inf
        with np.errstate(over="ignore", invalid="ignore"):
            if mode == "float16":
                e32, a32 = e32.astype(np.float16), a32.astype(np.float16)
            elif mode == "int":
                e32, a32 = (e * 1e3).astype(np.int32), (a * 1e3).astype(np.int32)
        cases.append(([e32, e32[::-1].copy()], [a32, a32[::-1].copy()],
                      Tolerance(atol, rtol), mode))
    return cases


def test_the_float32_way_vouches_only_for_what_float64_passes_and_finds_its_max_abs() -> None:
    names = ["h", "c"]
    watch = Watch(distinct=False, from_model=True, constant=frozenset())
    by_float32 = decided = margin = 0
    scratch = quick.Scratch()  # shared, as a rollout's steps share it: sizes up and down
    for e, a, tolerance, mode in _large_cases():
        full = compare_case(names, [e], [a], lambda _, t=tolerance: t, watch)
        found = quick_case(names, [e], [a], lambda _, t=tolerance: t, watch, None, scratch)
        if found is None:
            # only what float64 fails, or cannot vouch for in part, is left to compare_case
            assert verdict(full) != "passed" or mode in ("nan", "inf", "int") or any(
                c.powerless for c in full) or not tolerance.elementwise, mode
        else:
            assert verdict(full) == "passed", mode
            assert [(c.max_abs, c.atol) for c in found] == [(c.max_abs, c.atol) for c in full]
        if mode in ("inside", "edge", "outside"):  # decided exactly as float64 does
            decided += 1
            assert (found is not None) == (verdict(full) == "passed"), (mode, tolerance)
        figures = quick._float32(e[0], a[0], tolerance.atol, tolerance.rtol)
        if figures is None and found is not None and mode in ("inside", "edge"):
            margin += 1  # inside the tolerance but not by float32's margin: float64 vouched
        if figures is not None:
            by_float32 += 1
            assert mode not in ("nan", "inf", "float16", "int", "outside")
            assert figures[0] == full[0].max_abs
    assert by_float32 >= 20 and decided >= 40 and margin >= 5
