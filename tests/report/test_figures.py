"""tests/figures.py, the comparison of a golden text from a real run: figures within their
printed digits and FIGURE_RTOL, chart bars within a level, and everything else exact. The golden
file of examples/faulty.yaml, moved as another CPU could print it, still agrees; a change of its
structure does not."""

from __future__ import annotations

import re

from figures import BARS, charts_agree, differences, figures_agree, is_chart, pieces, unit
from report_fixtures import GOLDEN


def test_a_figure_stands_for_the_interval_its_digits_round_from() -> None:
    assert unit("1.5e-5") == 1e-6 and unit("0.3766") == 1e-4 and unit("-4.8e0") == 0.1
    assert figures_agree("1.6e-5", "1.5e-5")  # needs atol, PyTorch's AVX2 against SSE kernels
    assert figures_agree("0.3766", "0.376635")  # 4 digits on one CPU, 6 where 4 tie on another
    assert figures_agree("1.5", "1.57")  # a growth per step, 5% off
    assert not figures_agree("1.5e-5", "1.8e-5")
    assert not figures_agree("-0.1", "0.1")
    assert charts_agree("▁▂▃▄▇▆", "▁▃▃▄▆▆")  # two bars a level apart, as on a CPU with VNNI
    assert not charts_agree("▁▂▃▄▇▆", "▁▂▃▄▇") and not charts_agree("▁▂▃", "▁▂▅")


def test_numbers_without_a_point_are_text() -> None:
    line = "step 4 of 20: y: 1 of 32 elements (3.12%); atol 1e-4, opset18, models.py:65, 2.13.0"
    assert pieces(line)[1::2] == ["3.12"]
    assert differences(line, line.replace("1 of 32", "2 of 32"))
    assert differences(line, line.replace("1e-4", "2e-4"))
    assert differences("a  b", "a b") and differences("a\nb", "a")
    assert differences("max abs 1.5e-5", "max abs 1.6e-5") == []


def _another_cpu(text: str) -> str:
    """The text as another CPU could print it: each figure one unit off in its last digit (what
    a change of 1e-3 does to a figure on a rounding boundary: `needs atol ≥ 1.6e-5` read
    `1.5e-5` with other kernels) and each bar of a chart one level off, up and down in turn."""
    lines = []
    for line in text.split("\n"):
        parts = pieces(line)
        for place in range(1, len(parts), 2):
            up = place % 4 == 1
            if is_chart(parts[place]):
                parts[place] = "".join(
                    BARS[BARS.index(bar) + 1 if (up or bar == BARS[0]) and bar != BARS[-1]
                         else BARS.index(bar) - 1] for bar in parts[place])
            else:
                parts[place] = _nudged(parts[place], up)
        lines.append("".join(parts))
    return "\n".join(lines)


def _nudged(figure: str, up: bool) -> str:
    mantissa, e, exponent = figure.partition("e")
    digits = len(mantissa.partition(".")[2])
    step = unit(figure) / (10.0 ** int(exponent or 0))
    return f"{float(mantissa) + (step if up else -step):.{digits}f}{e}{exponent}"


def test_the_golden_holds_on_another_cpu_but_not_for_another_structure() -> None:
    """The golden file as another CPU could print it agrees with it; a change of its words,
    counts, steps, lines, or of a figure or bar beyond that, does not."""
    golden = (GOLDEN / "faulty.txt").read_text(encoding="utf-8")
    other = _another_cpu(golden)
    chart = re.search(f"[{BARS}]{{20}}", other)
    assert chart is not None
    moved = [(a, b) for line, nudged in zip(golden.split("\n"), other.split("\n"), strict=True)
             for a, b in zip(pieces(line)[1::2], pieces(nudged)[1::2], strict=True)]
    assert len(moved) > 100 and all(a != b for a, b in moved)  # every figure and chart moved
    assert differences(golden, other) == []
    drawn = re.search(f"[{BARS}]{{20}}", golden)
    assert drawn is not None
    bar = BARS.index(drawn[0][0])
    changed = {
        "a word": other.replace("grew", "shrank", 1),
        "a count": other.replace("1 of 32 elements", "2 of 32 elements", 1),
        "a step": other.replace("step 4 of 20", "step 5 of 20", 1),
        "a figure twice its size": re.sub(r"max abs 1\.\de-5", "max abs 3.0e-5", other, count=1),
        "a bar left out": other.replace(chart[0], chart[0][1:], 1),
        "a bar two levels off": other.replace(
            chart[0], BARS[bar + 2 if bar < 4 else bar - 2] + drawn[0][1:], 1),
        "a line left out": other.replace("\n        ↳ no drift in the intermediate tensors", "", 1),
    }
    for change, text in changed.items():
        assert text != other, change
        assert differences(golden, text), change


