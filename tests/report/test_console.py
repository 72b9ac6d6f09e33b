from __future__ import annotations

import dataclasses

from onnx_parity.report.console import case_line, final_table
from onnx_parity.results import RunReport
from report_fixtures import HOSTILE_MODEL, check_golden, failing_case, passing_case, sample_report


def _console(report: RunReport) -> str:
    return "\n".join(case_line(case) for case in report.cases) + "\n\n" + final_table(report)


def test_console_matches_golden() -> None:
    check_golden("console.txt", _console(sample_report()))


def test_case_lines_align_and_explain_what_did_not_pass() -> None:
    report = sample_report()
    lines = [case_line(case) for case in report.cases]
    assert lines[0] == "PASSED  mlp[opset17-cpu-random-b1] (0.41s)"
    assert lines[1] == (
        "FAILED  mlp[opset17-cpu-wide-b8] (1.23s): logits drifted: 12 of 8192 elements beyond"
        " tolerance, max abs 0.0312"
    )
    assert lines[3].startswith("SKIPPED mlp[opset17-cuda-wide-b8] (0.00s): target cuda:")
    assert lines[5].startswith("ERROR   resnet_tiny[onnx-cuda-imagenet-b1] (0.05s): run: ")
    assert all(line[8] != " " and line[7] == " " for line in lines)  # ids start in one column
    for line in lines:
        assert "\n" not in line and "\x1b" not in line and "\x00" not in line


def test_long_reasons_are_cut_to_the_width() -> None:
    case = dataclasses.replace(failing_case("m", 1), message="word " * 100)
    line = case_line(case, width=100)
    assert len(line) == 100 and line.endswith("…")
    # A long id leaves the reason its minimum rather than nothing.
    long_id = dataclasses.replace(case, id="m" * 100)
    assert len(case_line(long_id, width=80).split(": ", 1)[1]) == 40


def test_final_table_counts_and_totals() -> None:
    table = final_table(sample_report())
    lines = table.splitlines()
    assert lines[0].split() == ["model", "passed", "failed", "errors", "skipped", "worst", "case"]
    assert lines[2].split()[:5] == ["mlp", "2", "1", "0", "1"]
    assert "mlp[opset17-cpu-wide-b8]: logits drifted" in lines[2]
    assert lines[3].split()[:5] == ["resnet_tiny", "1", "1", "1", "0"]
    assert "resnet_tiny[onnx-cuda-imagenet-b1]: run:" in lines[3]  # an error outranks drift
    assert lines[-1] == "3 passed, 3 failed, 2 errors, 1 skipped in 12.3s"
    # The count columns line up however long the model names are.
    for column in ("passed", "failed", "errors", "skipped"):
        end = lines[0].index(column) + len(column)
        assert all(row[end - 1].isdigit() and row[end] == " " for row in lines[2:5])
    single = RunReport("s", {}, (dataclasses.replace(failing_case("a", 1), status="error",
                                                     stage="load"),), seconds=2.0)
    assert final_table(single).splitlines()[-1] == "0 passed, 0 failed, 1 error, 0 skipped in 2.0s"
    passed = final_table(RunReport("s", {}, (passing_case("a", 1),)))
    assert passed.splitlines()[2].endswith("  —")


def test_worst_drift_is_the_one_furthest_from_passing() -> None:
    mild = failing_case("m", 1)
    severe = dataclasses.replace(
        failing_case("m", 2),
        outputs=(dataclasses.replace(failing_case("m", 2).outputs[0], required_atol=5.0),),
    )
    table = final_table(RunReport("s", {}, (mild, severe)))
    assert "m[opset18-cpu-random-b2]: y drifted in case 2" in table


def test_no_colour() -> None:
    assert "\x1b" not in _console(sample_report())


def test_a_model_name_cannot_open_a_workflow_command() -> None:
    report = RunReport("s", {}, (failing_case("::error::owned", 1),))
    rows = final_table(report).splitlines()
    assert not any(row.lstrip().startswith("::") for row in rows)
    assert rows[2].startswith("\\::error::owned")
    assert all(not line.lstrip().startswith("::") for line in _console(sample_report()).split("\n"))
    assert HOSTILE_MODEL not in _console(sample_report())  # its newline was folded
