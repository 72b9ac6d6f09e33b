from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onnx_parity.errors import SpecProblem
from onnx_parity.report import github
from onnx_parity.report.github import escape_data, escape_property
from onnx_parity.report.publish import (
    GitHubOutput,
    ReportSettings,
    github_output,
    write_github,
    write_spec_problems,
)
from onnx_parity.report.summary import summary_markdown, write_summary
from onnx_parity.results import CaseResult, RunReport
from report_fixtures import (
    HOSTILE_MESSAGE,
    HOSTILE_MODEL,
    check_golden,
    failing_case,
    passing_case,
    sample_report,
)

SPEC = "models/parity.yaml"
PAYLOADS = [
    "plain",
    "new\nline",
    "carriage\rreturn\r\n",
    "::error::injected",
    "%0A::error::x",
    "%25%%0D",
    "::stop-commands::tok3n",
    "a,b:c=d",
    "line=1,title=x::y",
    "",
]


# GitHub's runner undoes the escaping in this order (actions/toolkit, command.ts).
def unescape_data(text: str) -> str:
    return text.replace("%0D", "\r").replace("%0A", "\n").replace("%25", "%")


def unescape_property(text: str) -> str:
    return (text.replace("%0D", "\r").replace("%0A", "\n").replace("%3A", ":")
            .replace("%2C", ",").replace("%25", "%"))


def parse_command(line: str) -> tuple[str, dict[str, str], str]:
    """Split a workflow command the way the runner does, failing on anything it would not read
    as exactly one command."""
    assert "\n" not in line and "\r" not in line
    match = re.fullmatch(r"::([a-z-]+) ([^:]*)::(.*)", line)
    assert match, line
    name, raw_properties, data = match.groups()
    properties: dict[str, str] = {}
    for item in raw_properties.split(","):
        key, sep, value = item.partition("=")
        assert sep and key in {"file", "line", "title"} and key not in properties, item
        properties[key] = unescape_property(value)
    return name, properties, unescape_data(data)


@pytest.mark.parametrize("text", PAYLOADS)
def test_escapes_round_trip_through_githubs_unescaping(text: str) -> None:
    assert unescape_data(escape_data(text)) == text
    assert unescape_property(escape_property(text)) == text
    assert "\n" not in escape_data(text) and "\r" not in escape_data(text)
    assert not {":", ",", "\n", "\r"} & set(escape_property(text))


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_escapes_round_trip_for_any_text(text: str) -> None:
    assert unescape_data(escape_data(text)) == text
    assert unescape_property(escape_property(text)) == text


def test_escape_examples() -> None:
    assert escape_data("50% off\r\nnow") == "50%25 off%0D%0Anow"
    assert escape_property("a:b,c%\n") == "a%3Ab%2Cc%25%0A"


def test_annotations_match_golden() -> None:
    check_golden("annotations.txt", "\n".join(github.annotations(sample_report(), SPEC)) + "\n")


def test_one_annotation_per_failing_model_on_its_line() -> None:
    lines = github.annotations(sample_report(), SPEC)
    parsed = [parse_command(line) for line in lines]
    assert [name for name, _, _ in parsed] == ["error"] * 3
    assert [p["line"] for _, p, _ in parsed] == ["12", "30", "44"]
    assert all(p["file"] == SPEC for _, p, _ in parsed)
    titles = [p["title"] for _, p, _ in parsed]
    assert titles[0] == "onnx-parity: mlp drifted in 1 of 4 cases"
    assert titles[1] == "onnx-parity: resnet_tiny drifted in 1 and errored in 1 of 3 cases"
    _, _, mlp_message = parsed[0]
    assert mlp_message == (
        "mlp[opset17-cpu-wide-b8]: logits drifted: 12 of 8192 elements beyond tolerance,"
        " max abs 0.0312"
    )
    _, _, resnet_message = parsed[1]
    # Within a model, its worst case first: the error before the failure.
    assert resnet_message.splitlines()[0].startswith(
        "resnet_tiny[onnx-cuda-imagenet-b1]: run: [ONNXRuntimeError] RUNTIME_EXCEPTION:")


def test_all_errors_say_errored_and_passing_models_get_none() -> None:
    case = dataclasses.replace(failing_case("exp", 1, line=3), status="error", stage="export",
                               message="Unsupported: aten::foo")
    report = RunReport(SPEC, {}, (case, passing_case("ok", 1, line=9)))
    (line,) = github.annotations(report, SPEC)
    _, properties, message = parse_command(line)
    assert properties["title"] == "onnx-parity: exp errored in 1 of 1 case"
    assert message == "exp[opset18-cpu-random-b1]: export: Unsupported: aten::foo"
    assert github.annotations(RunReport(SPEC, {}, (passing_case("ok", 1),)), SPEC) == []


def test_hostile_text_cannot_inject_a_command() -> None:
    lines = github.annotations(sample_report(), "spec,evil:file\n::error::x.yaml")
    for line in lines:
        name, properties, _ = parse_command(line)
        assert name == "error"
        assert properties["file"] == "spec,evil:file\n::error::x.yaml"
    _, properties, message = parse_command(lines[2])
    assert properties["title"] == (
        "onnx-parity: evil ::error::pwned%0A|<script>alert(1)</script>,x:y"
        " drifted in 1 and errored in 1 of 2 cases"
    )
    assert "::stop-commands::tok3n ::error file=x.py,line=1::injected %0A%25" in message
    assert "\x1b" not in message and "\x00" not in message


@pytest.mark.parametrize("payload", PAYLOADS)
def test_payloads_in_every_field_stay_inside_one_command(payload: str) -> None:
    case = CaseResult(
        id=f"{payload}[x]", model=payload, opset=17, exporter="dynamo", target=payload,
        dataset="d", batch_size=1, status="error", stage="run", message=payload, line=5,
    )
    (line,) = github.annotations(RunReport(payload, {}, (case,)), payload)
    name, properties, message = parse_command(line)
    assert name == "error" and properties["file"] == payload and properties["line"] == "5"
    assert message.startswith(" ".join(f"{payload}[x]".split()))


def _many_failing_models(n: int) -> RunReport:
    cases = tuple(failing_case(f"model{i:02d}", 1, line=10 * i + 1) for i in range(n))
    return RunReport(SPEC, {}, (*cases, passing_case("fine", 1)))


def test_past_the_limit_the_last_annotation_sums_up_the_rest() -> None:
    lines = github.annotations(_many_failing_models(15), SPEC)
    assert len(lines) == 10
    parsed = [parse_command(line) for line in lines]
    assert [p["line"] for _, p, _ in parsed[:9]] == [str(10 * i + 1) for i in range(9)]
    _, last, message = parsed[9]
    assert "line" not in last
    assert last["title"] == "onnx-parity: 6 more failing models"
    assert message.startswith("and 6 more failing models (6 failing cases): model09, model10,")
    assert "model14" in message and "model08" not in message

    exactly_ten = github.annotations(_many_failing_models(10), SPEC)
    assert len(exactly_ten) == 10 and all("more failing" not in line for line in exactly_ten)
    (only,) = github.annotations(_many_failing_models(3), SPEC, limit=1)
    assert parse_command(only)[1]["title"] == "onnx-parity: 3 more failing models"
    assert github.annotations(_many_failing_models(3), SPEC, limit=0) == []


def test_past_the_limit_the_worst_models_are_shown_worst_first() -> None:
    """15 failing models for 10 annotations: the errors, then the furthest from their
    tolerance; within a model its worst case first; the last sums up the rest."""
    cases: list[CaseResult] = []
    for i in range(15):
        mild = failing_case(f"model{i:02d}", 1, line=10 * i + 1)
        (output,) = mild.outputs
        cases.append(dataclasses.replace(mild, outputs=(dataclasses.replace(
            output, required_atol=1e-4 * (i + 2)),)))  # model14 is the furthest off
    cases[3] = dataclasses.replace(cases[3], status="error", stage="run", message="boom")
    worst = failing_case("model07", 2, line=71)
    (output,) = worst.outputs
    cases.append(dataclasses.replace(worst, outputs=(dataclasses.replace(
        output, required_atol=1.0),)))  # model07's second case: the worst failure of all
    lines = github.annotations(RunReport(SPEC, {}, tuple(cases)), SPEC)
    assert len(lines) == 10
    parsed = [parse_command(line) for line in lines]
    assert [p["title"].split()[1] for _, p, _ in parsed[:9]] == [
        "model03", "model07", "model14", "model13", "model12", "model11", "model10",
        "model09", "model08"]
    assert parsed[1][2].startswith("model07[opset18-cpu-random-b2]")
    assert parsed[9][2].startswith("and 6 more failing models (6 failing cases): model06, "
                                   "model05, model04, model02, model01, model00;")


def test_summary_matches_golden() -> None:
    check_golden("summary.md", summary_markdown(sample_report()))


def test_a_failing_rollout_says_at_which_step_it_failed() -> None:
    """A rollout's outputs are its first failing step's: the cell names the step, as the
    console's line does; a rollout that passed every step or failed otherwise names none."""
    from onnx_parity.findings import CaseDetails, RolloutRecord

    stream = dataclasses.replace(
        failing_case("stream", 1),
        details=CaseDetails(rollout=RolloutRecord(steps=20, first_failing=4, judged=4,
                                                  output="y")))
    within = dataclasses.replace(
        failing_case("within", 1), details=CaseDetails(rollout=RolloutRecord(steps=20, judged=9)))
    report = dataclasses.replace(sample_report(), cases=(stream, within))
    rows = [row for row in summary_markdown(report).splitlines() if row.startswith("| ")]
    cells = {_cells(row)[0].strip(): _cells(row)[-1].strip() for row in rows if "[" in row}
    assert cells["stream\\[opset18-cpu-random-b1\\]"].startswith(
        "step 4 of 20: y: 1 of 4 elements (25.00%) out of tolerance; max abs 2.5e-1")
    assert cells["within\\[opset18-cpu-random-b1\\]"].startswith("y: 1 of 4 elements")


def _cells(row: str) -> list[str]:
    """Split a GFM table row on the pipes that are not backslash-escaped."""
    assert row.startswith("| ") and row.endswith(" |"), row
    cells, current, escaped = [], "", False
    for char in row[1:-1]:
        if char == "|" and not escaped:
            cells.append(current)
            current = ""
        else:
            current += char
        escaped = char == "\\" and not escaped
    cells.append(current)
    return cells


def _table_rows(markdown: str) -> list[str]:
    return [line for line in markdown.split("\n") if line.startswith("|")]


def _check_tables(markdown: str) -> None:
    for row in _table_rows(markdown):
        assert len(_cells(row)) in (2, 4), row  # environment table: 2, case tables: 4
    tags = set(re.findall(r"<[^>]*>", markdown))
    assert tags <= {"<br>", "<details>", "</details>", "<summary>", "</summary>"}, tags


def test_summary_content_and_escaping() -> None:
    markdown = summary_markdown(sample_report())
    assert markdown.startswith("## ❌ onnx-parity: 3 passed, 3 failed, 2 errors, 1 skipped\n")
    _check_tables(markdown)
    assert "<script>" not in markdown and "&lt;script&gt;" in markdown
    assert "\x1b" not in markdown and "\x00" not in markdown and "\r" not in markdown
    assert (
        "| mlp\\[opset17-cpu-wide-b8\\] | ❌ failed | 1.23s | logits: 12 of 8192 elements (0.15%)"
        " out of tolerance; max abs 3.1e-2; worst at sample 3 \\[0, 17\\]: expected 6.25, got"
        " 6.281; atol 1e-5 + rtol 1e-3·\\|e\\|; needs atol ≥ 3.1e-2 |"
    ) in markdown
    assert "| ✅ passed | 0.41s | logits: max abs 2.4e-7 within atol 1e-5 + rtol 1e-3·\\|e\\|<br>" \
        "note: factory returned a module in training mode; checked in eval mode |" in markdown
    assert "**run**: \\[ONNXRuntimeError\\] RUNTIME\\_EXCEPTION" in markdown
    assert ("probs: 3 of 1000 elements (0.30%) out of tolerance; NaN/Inf placement differs in 3"
            " elements, first at \\[7\\]: expected 0, got nan;") in markdown


def test_a_run_that_did_not_finish_never_reads_green() -> None:
    passed = dataclasses.replace(sample_report(), cases=(passing_case("m", 1),))
    assert summary_markdown(passed).startswith("## ✅ onnx-parity: 1 passed")
    stopped = summary_markdown(dataclasses.replace(passed, complete=False))
    assert stopped.startswith("## ❌ onnx-parity: 1 passed")
    assert "**The run did not finish**" in stopped


def test_a_note_several_cases_carry_is_said_once_for_the_model() -> None:
    note = "the factory returned a module in training mode"
    cases = [dataclasses.replace(passing_case("vit", i), notes=(note, f"own {i}") if i < 3
                                 else (f"own {i}",)) for i in range(1, 5)]
    report = dataclasses.replace(sample_report(), cases=tuple(cases))
    markdown = summary_markdown(report)
    assert markdown.count(note) == 1
    assert f"> note (2 of 4 cases): {note}" in markdown
    assert all(f"note: own {i}" in markdown for i in range(1, 5))  # each case's own, on its row
    everyone = [dataclasses.replace(c, notes=(note,)) for c in cases]
    markdown = summary_markdown(dataclasses.replace(report, cases=tuple(everyone)))
    assert markdown.count(note) == 1 and f"> note: {note}" in markdown


@settings(max_examples=200, deadline=None)
@given(st.text(), st.text(), st.text())
def test_tables_keep_their_shape_for_any_text(model: str, message: str, note: str) -> None:
    cases = (
        dataclasses.replace(failing_case(model, 1), message=message, notes=(note,)),
        dataclasses.replace(failing_case(model, 2), status="error", stage="export",
                            message=message, outputs=()),
        dataclasses.replace(passing_case(model, 3), status="skipped", message=message),
    )
    markdown = summary_markdown(RunReport(message, {note: message}, cases))
    _check_tables(markdown)
    assert len([r for r in _table_rows(markdown) if len(_cells(r)) == 4]) == 2 + 3


def test_verdict_emoji() -> None:
    assert summary_markdown(RunReport(SPEC, {}, (passing_case("a", 1),))).startswith("## ✅ ")
    assert summary_markdown(RunReport(SPEC, {}, ())).startswith("## ⚠️ onnx-parity: 0 passed")
    skipped = dataclasses.replace(passing_case("a", 1), status="skipped")
    assert summary_markdown(RunReport(SPEC, {}, (skipped,))).startswith("## ⚠️ ")


def _big_report(n: int) -> RunReport:
    long = "x" * 5000
    cases = tuple(
        dataclasses.replace(failing_case(f"m{i % 7}", i), status="error", stage="export",
                            message=long, outputs=()) if i % 3 == 0
        else passing_case(f"m{i % 7}", i)
        for i in range(n)
    )
    return RunReport(SPEC, {"torch": "2.13"}, cases, seconds=1.0)


@pytest.mark.parametrize("max_bytes", [3_000, 20_000, 150_000])
def test_summary_truncates_at_a_row_boundary(max_bytes: int) -> None:
    report = _big_report(2000)
    markdown = summary_markdown(report, max_bytes=max_bytes)
    assert len(markdown.encode("utf-8")) <= max_bytes
    _check_tables(markdown)
    rows = [r for r in _table_rows(markdown) if len(_cells(r)) == 4 and "---" not in r]
    shown = len([r for r in rows if not r.startswith("| Case |")])
    match = re.search(r"\*\*Summary truncated:\*\* (\d+) of 2000 cases left out", markdown)
    assert match, markdown[-500:]
    assert shown + int(match.group(1)) == 2000
    assert "The JSON report has all of them." in markdown
    assert shown > 0
    # Every table ends with a blank line, so the note never joins a table.
    assert "|\n> ⚠️" not in markdown


def test_summary_within_the_limit_is_not_truncated() -> None:
    markdown = summary_markdown(_big_report(20))
    assert "truncated" not in markdown
    assert len(_table_rows(markdown)) == 20 + 7 * 2 + 3  # rows, headers, environment table
    assert len(max(markdown.split("\n"), key=len)) < 1200  # the 5000-char message was cut


def test_write_summary_appends(tmp_path: Path) -> None:
    path = tmp_path / "summary.md"
    path.write_text("earlier step output", encoding="utf-8")
    write_summary(sample_report(), path)
    write_summary(sample_report(), path)
    text = path.read_text(encoding="utf-8")
    single = summary_markdown(sample_report())
    assert text == "earlier step output\n\n" + single + single


def test_write_summary_respects_what_is_already_there(tmp_path: Path) -> None:
    path = tmp_path / "summary.md"
    path.write_text("a" * 990_000 + "\n", encoding="utf-8")
    write_summary(_big_report(2000), path, max_bytes=1_000_000)
    assert 990_001 < path.stat().st_size <= 1_000_000
    assert "Summary truncated" in path.read_text(encoding="utf-8")

    full = tmp_path / "full.md"
    full.write_text("a" * 999_990 + "\n", encoding="utf-8")
    write_summary(sample_report(), full, max_bytes=1_000_000)
    assert full.stat().st_size == 999_991  # nothing fits: left alone rather than overflowed


def test_hostile_model_heading_is_escaped() -> None:
    markdown = summary_markdown(sample_report())
    heading = next(line for line in markdown.split("\n") if line.startswith("### ❌ evil"))
    assert "\n" not in heading and "<" not in heading and "\\|" in heading
    assert HOSTILE_MODEL.split("\n")[0] in heading
    assert "tok3n" in markdown and HOSTILE_MESSAGE not in markdown


def test_truncation_keeps_failing_cases_before_passing_ones() -> None:
    passing = tuple(passing_case("busy", i) for i in range(400))
    failing = tuple(failing_case("late", i) for i in range(3))
    report = RunReport(SPEC, {}, (*passing, *failing))
    full = summary_markdown(report)
    markdown = summary_markdown(report, max_bytes=len(full.encode("utf-8")) // 4)
    assert all(f"late\\[opset18-cpu-random-b{i}\\]" in markdown for i in range(3))
    assert "### ✅ busy: 400 passed" in markdown  # the header still counts every case
    assert "(400 passed" not in markdown and " of 403 cases left out (" in markdown
    assert markdown.index("### ✅ busy") < markdown.index("### ❌ late")  # report order kept


def test_a_model_with_many_failing_cases_lists_the_first_twenty() -> None:
    report = RunReport(SPEC, {}, tuple(failing_case("big", i, line=2) for i in range(25)))
    (line,) = github.annotations(report, SPEC)
    _, properties, message = parse_command(line)
    assert properties["title"] == "onnx-parity: big drifted in 25 of 25 cases"
    lines = message.split("\n")
    assert len(lines) == 21 and lines[19].startswith("big[opset18-cpu-random-b19]: ")
    assert lines[20] == "… and 5 more failing cases; the job summary and the JSON report list them"


# -- what goes to GitHub: one policy for a run and for a spec that cannot be used --------------


def test_nothing_goes_to_github_outside_github_actions(tmp_path: Path) -> None:
    env = {"GITHUB_STEP_SUMMARY": str(tmp_path / "step.md")}
    assert github_output(ReportSettings(), env) == GitHubOutput()
    assert github_output(ReportSettings(), {**env, "GITHUB_ACTIONS": "false"}) == GitHubOutput()


@pytest.mark.parametrize(("annotations", "step_summary"),
                         [(True, True), (False, True), (True, False), (False, False)])
def test_on_github_the_flags_turn_each_output_off(tmp_path: Path, annotations: bool,
                                                   step_summary: bool) -> None:
    step = tmp_path / "step.md"
    settings = ReportSettings(annotations=annotations, step_summary=step_summary)
    output = github_output(settings, {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(step)})
    # The warning that a check was not done is not an annotation of a drift: it always goes.
    assert output.commands
    assert output.annotations is annotations
    assert output.step_summary == (step if step_summary else None)
    without_file = github_output(settings, {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": ""})
    assert without_file.step_summary is None


def test_a_run_and_a_broken_spec_follow_the_same_policy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    step = tmp_path / "step.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_WORKSPACE", str(tmp_path))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    quiet = ReportSettings(annotations=False, step_summary=False)
    spec = tmp_path / "parity.yaml"
    problem = SpecProblem(str(spec), 3, 1, "models: expected a list")
    write_github(quiet, sample_report())
    write_spec_problems(quiet, [problem], str(spec))
    assert "::error" not in capsys.readouterr().out and not step.exists()
    write_github(ReportSettings(), sample_report())
    write_spec_problems(ReportSettings(), [problem], str(spec))
    out = capsys.readouterr().out
    assert "::error file=parity.yaml,line=3,col=1," in out
    errors = [line for line in out.splitlines() if line.startswith("::error ")]
    assert len(errors) == len(github.annotations(sample_report(), SPEC)) + 1
    assert "problem in the spec; nothing was checked" in step.read_text(encoding="utf-8")
