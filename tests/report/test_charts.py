"""The job summary's Mermaid charts against tests/golden/charts.md (UPDATE_GOLDEN=1 rewrites
it): headroom per case, the trend against a baseline, labels no model name can break out of,
the cut to MAX_BARS with its note, and a rollout's error per step."""

from __future__ import annotations

import dataclasses
import math
import re

from onnx_parity.findings import CaseDetails, RolloutRecord, RolloutStep
from onnx_parity.report.charts import MAX_BARS, MAX_STEPS, charts_section, label
from onnx_parity.report.summary import summary_markdown
from onnx_parity.results import CaseTrend, RunReport
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


def test_many_cases_are_ranked_and_cut_with_a_note() -> None:
    cases = tuple(passing_case("wide", i) for i in range(MAX_BARS + 5))
    report = dataclasses.replace(sample_report(), cases=cases)
    text = charts_section(report)
    bars = re.search(r"bar \[([^\]]*)\]", text)
    assert bars is not None and len(bars[1].split(", ")) == MAX_BARS
    assert f"5 more cases of wide not drawn (the chart shows the worst {MAX_BARS})" in text


def test_a_rollout_draws_its_error_per_step_over_its_atol() -> None:
    """A rollout's chart is the followed output's error at each step over its atol (atol 1e-4
    here): 1e-6 is -2, 1e-4 is 0, an infinite error is drawn at the top; steps past MAX_STEPS
    are left out with a note."""
    errors = [1e-6, 1e-5, 1e-4, 1e-3, math.inf] + [1e-3] * (MAX_STEPS)
    steps = tuple(RolloutStep(step=n, passed=e < 1e-4, max_abs={"y": e})
                  for n, e in enumerate(errors, start=1))
    stream = dataclasses.replace(
        failing_case("stream", 1),
        details=CaseDetails(rollout=RolloutRecord(steps=len(errors), per_step=steps,
                                                  first_failing=4, judged=4, output="y")))
    text = charts_section(dataclasses.replace(sample_report(), cases=(stream,)))
    chart = text[text.index("per step - above 0 fails"):]
    line = re.findall(r"    bar \[([^\]]*)\]", chart)[0]
    tolerance = re.findall(r"    line \[([^\]]*)\]", chart)[0]
    assert set(tolerance.split(", ")) == {"0"}
    assert line.split(", ")[:5] == ["-2", "-1", "0", "1", "8"]
    assert len(line.split(", ")) == MAX_STEPS
    assert "5 more steps of stream\\[opset18-cpu-random-b1\\] not drawn" in text
