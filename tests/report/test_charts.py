"""The job summary's Mermaid charts against tests/golden/charts.md (UPDATE_GOLDEN=1 rewrites
it): one headroom chart for the run, every failing case a bar from 0 in units of its own
tolerance with a line at 1, the trend against a baseline, labels no model name can break out
of, the cut to MAX_BARS with its note, and a failing rollout's error per step."""

from __future__ import annotations

import dataclasses
import math
import re

from onnx_parity.findings import CaseDetails, RolloutRecord, RolloutStep
from onnx_parity.report.charts import CAP, MAX_BARS, MAX_STEPS, charts_section, label
from onnx_parity.report.summary import summary_markdown
from onnx_parity.results import CaseResult, CaseTrend, OutputComparison, RunReport
from report_fixtures import (
    HOSTILE_MODEL,
    check_golden,
    failing_case,
    passing_case,
    sample_report,
)


def _trended(report: RunReport) -> RunReport:
    """The sample report with a baseline: each compared case's error ×10 of the one before."""
    cases = tuple(dataclasses.replace(c, baseline=CaseTrend("compared", ratio=10.0 ** (i - 1)))
                  if c.outputs else c for i, c in enumerate(report.cases))
    return dataclasses.replace(report, cases=cases)


def test_the_charts_read_as_the_golden_file() -> None:
    report = _trended(sample_report())
    text = charts_section(report)
    check_golden("charts.md", text)
    assert text in summary_markdown(report)
    assert text.count("xychart-beta") == text.count("```mermaid")
    for line in text.splitlines():  # every quoted label is closed on its line
        if line.startswith("    "):
            assert line.count('"') % 2 == 0, line


def test_a_hostile_model_name_stays_inside_its_quotes() -> None:
    quoted = label(HOSTILE_MODEL + '"] \n```\n%%{init}%%', 200)
    assert quoted.startswith('"') and quoted.endswith('"')
    assert re.fullmatch(r'"[A-Za-z0-9 ._+=/()-]*"', quoted), quoted


def _output(name: str = "y", **figures: object) -> OutputComparison:
    base: dict[str, object] = dict(name=name, passed=False, atol=1e-4, rtol=1e-3, elements=16,
                                   mismatches=8, expected_dtype="float32",
                                   actual_dtype="float32", scale=3.0)
    base.update(figures)
    return OutputComparison(**base)  # type: ignore[arg-type]


def _case(model: str, *outputs: OutputComparison, status: str = "failed") -> CaseResult:
    return dataclasses.replace(failing_case(model, 1), outputs=outputs, status=status)


def _bars(text: str) -> tuple[list[str], list[float], list[str], str]:
    chart = text[:text.index("```\n", text.index("```mermaid") + 10)]
    names = re.findall(r'"([^"]*)"', re.findall(r"x-axis \[(.*)\]", chart)[0])
    bars = [float(v) for v in re.findall(r"    bar \[([^\]]*)\]", chart)[0].split(", ")]
    line = re.findall(r"    line \[([^\]]*)\]", chart)[0].split(", ")
    axis = re.findall(r"    y-axis .*", chart)[0]
    return names, bars, line, axis


def test_one_chart_for_the_run_draws_every_failing_case_from_zero() -> None:
    """A real bug, float noise under `atol: 0`, an int8 metric, a case near its tolerance, one
    far within it, and two no tolerance measures (NaN placement, a powerless tolerance): one
    chart, every failing numeric case a bar from 0 in units of its tolerance with the line at
    1, the units said where they are not atol, the real bug ranked above the noise."""
    bug = _case("sign-gate", _output(required_atol=4.8, max_abs=4.8))
    noise = _case("attention", _output(atol=0.0, rtol=0.0, required_atol=3.6e-7,
                                       max_abs=3.6e-7))
    int8 = _case("outlier", _output(kind="metric", metrics={"cosine": -0.17},
                                    thresholds={"cosine": 0.99}, failed=("cosine",),
                                    criteria=("cosine >= 0.99",), mismatches=0))
    near = _case("near", _output(passed=True, required_atol=6e-5, mismatches=0),
                 status="passed")
    far = _case("far", _output(passed=True, required_atol=1e-7, mismatches=0),
                status="passed")
    blind = _case("nan", _output(required_atol=None, kind="nonfinite"))
    powerless = _case("tiny", _output(required_atol=0.0, powerless=True, kind="powerless"))
    report = dataclasses.replace(sample_report(),
                                 cases=(noise, far, near, int8, bug, blind, powerless))
    text = charts_section(report)
    assert text.count("```mermaid") == 1  # one chart for the run, not one per model
    names, bars, line, axis = _bars(text)
    assert [n.split(" ")[1] for n in names] == ["sign-gate", "outlier", "attention", "near"]
    assert names[0].startswith("4.8e4x ") and names[1].startswith("1.2e2x ")
    assert names[2].startswith("inf ") and names[3].startswith("0.6x ")
    assert bars == [CAP, CAP, CAP, 0.6] and set(line) == {"1"}
    assert axis.endswith(f" 0 --> {CAP:g}")  # every bar starts at 0
    assert "attention\\[opset18-cpu-random-b1\\]: atol 0: any error fails" in text
    assert "outlier\\[opset18-cpu-random-b1\\]: cosine: (1 - cosine) over (1 - 0.99)" in text
    assert "2 failing cases not drawn: no tolerance measures what failed" in text
    assert "far " not in " ".join(names)


def test_many_cases_are_ranked_and_cut_with_a_note() -> None:
    cases = tuple(_case(f"wide{i:02d}", _output(required_atol=1e-4 * (i + 2)))
                  for i in range(MAX_BARS + 5))
    report = dataclasses.replace(sample_report(), cases=cases)
    text = charts_section(report)
    names, bars, _, _ = _bars(text)
    assert len(bars) == MAX_BARS and names[0].split(" ")[1] == f"wide{MAX_BARS + 4}"
    assert f"5 more cases not drawn (the chart shows the worst {MAX_BARS})" in text


def test_a_failing_rollout_draws_its_error_per_step_over_its_atol() -> None:
    """A failing rollout's chart is the followed output's error at each step over its atol
    (1e-4 here), from 0, with the line at 1: 1e-6 is 0.01, 1e-4 is 1, an infinite error is
    drawn at CAP; steps past MAX_STEPS are left out with a note. A passing rollout has none."""
    errors = [1e-6, 1e-5, 1e-4, 1e-3, math.inf] + [1e-3] * (MAX_STEPS)
    steps = tuple(RolloutStep(step=n, passed=e < 1e-4, max_abs={"y": e})
                  for n, e in enumerate(errors, start=1))
    record = CaseDetails(rollout=RolloutRecord(steps=len(errors), per_step=steps,
                                               first_failing=4, judged=4, output="y"))
    stream = dataclasses.replace(failing_case("stream", 1), details=record)
    calm = dataclasses.replace(passing_case("calm", 1), details=record)
    text = charts_section(dataclasses.replace(sample_report(), cases=(stream, calm)))
    assert text.count("per step - above 1 fails") == 1
    chart = text[text.index("per step - above 1 fails"):]
    line = re.findall(r"    bar \[([^\]]*)\]", chart)[0]
    tolerance = re.findall(r"    line \[([^\]]*)\]", chart)[0]
    assert set(tolerance.split(", ")) == {"1"}
    assert line.split(", ")[:5] == ["0.01", "0.1", "1", "10", "10"]
    assert re.search(r"y-axis \"max abs / atol 1e-4\" 0 --> 10", chart)
    assert len(line.split(", ")) == MAX_STEPS
    assert "5 more steps of stream\\[opset18-cpu-random-b1\\] not drawn" in text
