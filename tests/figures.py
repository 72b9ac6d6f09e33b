"""Golden text compared as words and figures, for the goldens written from a real run
(tests/golden/faulty.txt): what float32 kernels compute differs from one CPU to the next
(AVX2, AVX-512, VNNI, SSE pick different instructions and orders of summation), so its figures
are compared as the measurements they are, and everything else exactly.

- A figure is a number written with a decimal point (`1.5e-5`, `0.3766`, `×1.5`, `3.12`): it
  stands for the interval its digits round from, and two figures agree when those intervals,
  widened by FIGURE_RTOL of the larger, overlap. So `needs atol ≥ 1.6e-5` on one CPU and
  `1.5e-5` on another agree (seen with PyTorch's SSE kernels instead of AVX2), while `1.5e-5`
  and `3.0e-5` do not.
- A number without a point is a count, an index, a step, a line or a setting written exactly
  (`1 of 32`, `[0, 0, 2]`, `step 4 of 20`, `1e-4`): it is text, compared exactly.
- A sparkline (`▁▂▃▇█`) is a chart of figures: the same number of bars, each within BAR_LEVELS
  of its golden height (seen: two bars of a 20-step rollout's chart one level apart on a CPU
  with AVX-512 VNNI).
- Everything else, line breaks and spaces included, is the structure and must be equal.
"""

from __future__ import annotations

import math
import re

FIGURE_RTOL = 0.05  # a float32 error from other kernels: the stream's figures moved by 2%
BAR_LEVELS = 1  # a bar is an eighth of the chart's largest: 5% of that crosses at most one
BARS = "▁▂▃▄▅▆▇█"
_PIECE = re.compile(rf"((?<![\w.])-?\d+\.\d+(?:e-?\d+)?(?![\w.])|[{BARS}]+)")
SHOWN = 3  # differences listed in a failing test's message


def pieces(line: str) -> list[str]:
    """The line cut into text, figure, text, figure, …: odd places hold figures and charts."""
    return _PIECE.split(line)


def is_chart(piece: str) -> bool:
    return piece[0] in BARS


def unit(figure: str) -> float:
    """The place value of a figure's last digit: `1.5e-5` → 1e-6, `0.3766` → 1e-4."""
    mantissa, _, exponent = figure.lstrip("-").partition("e")
    return 10.0 ** (int(exponent or 0) - len(mantissa.partition(".")[2]))


def figures_agree(expected: str, actual: str) -> bool:
    a, b = float(expected), float(actual)
    slack = (unit(expected) + unit(actual)) / 2 + FIGURE_RTOL * max(abs(a), abs(b))
    return math.isclose(a, b, rel_tol=0.0, abs_tol=slack)


def charts_agree(expected: str, actual: str) -> bool:
    return len(expected) == len(actual) and all(
        abs(BARS.index(e) - BARS.index(a)) <= BAR_LEVELS
        for e, a in zip(expected, actual, strict=True))


def _line_agrees(expected: str, actual: str) -> bool:
    want, got = pieces(expected), pieces(actual)
    if len(want) != len(got):
        return False
    for place, (e, a) in enumerate(zip(want, got, strict=True)):
        if place % 2 == 0:
            agree = e == a
        elif is_chart(e) or is_chart(a):
            agree = is_chart(e) and is_chart(a) and charts_agree(e, a)
        else:
            agree = figures_agree(e, a)
        if not agree:
            return False
    return True


def differences(expected: str, actual: str) -> list[str]:
    """Where `actual` departs from the golden `expected`, line by line, beyond what another
    CPU's float32 arithmetic explains; empty where it agrees."""
    want, got = expected.split("\n"), actual.split("\n")
    found = [f"line {n}:\n  golden: {e}\n  actual: {a}"
             for n, (e, a) in enumerate(zip(want, got, strict=False), start=1)
             if not _line_agrees(e, a)]
    if len(want) != len(got):
        found.append(f"{len(want)} lines in the golden file, {len(got)} in the actual text")
    return found


def assert_agrees(name: str, expected: str, actual: str) -> None:
    found = differences(expected, actual)
    assert not found, (
        f"{name} differs from its golden file beyond the figures' tolerance "
        f"(tests/figures.py); if the change is intended, rerun with UPDATE_GOLDEN=1 and review "
        "the diff:\n" + "\n".join(found[:SHOWN])
        + (f"\n… and {len(found) - SHOWN} more" if len(found) > SHOWN else ""))
