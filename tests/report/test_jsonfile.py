from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from typing import Any

import pytest

from onnx_parity.findings import CaseDetails, ProvidersRecord
from onnx_parity.report.jsonfile import ReportFormatError, read_json, to_dict, write_json
from onnx_parity.results import RunReport
from report_fixtures import check_golden, failing_case, passing_case, sample_report


def _no_constants(token: str) -> Any:
    raise AssertionError(f"JSON holds the non-standard constant {token}")


def _finite_report() -> RunReport:
    """A report whose every float is finite and whose free-form values are JSON-native, so the
    round trip can be checked with plain ==."""
    sample = sample_report()
    hostile = dataclasses.replace(
        sample.cases[7],
        details=CaseDetails(other={"k|<x>": "v\x00", "n": [1, 2.5, None, True, {"a": "b"}]})
    )
    surrogate = dataclasses.replace(
        failing_case("m", 3, line=7), message="lone surrogate \udc80 and ☃ and \x1b[31m"
    )
    cases = (*sample.cases[:6], hostile, surrogate, passing_case("m", 1))
    return dataclasses.replace(sample, cases=cases)


def test_json_matches_golden(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    write_json(sample_report(), path)
    check_golden("report.json", path.read_text(encoding="utf-8"))


def test_round_trip_is_exact(tmp_path: Path) -> None:
    report = _finite_report()
    path = tmp_path / "out" / "report.json"  # the folder is created
    write_json(report, path)
    assert read_json(path) == report


def test_round_trip_keeps_non_finite_numbers(tmp_path: Path) -> None:
    report = sample_report()
    path = tmp_path / "report.json"
    write_json(report, path)
    back = read_json(path)
    # NaN != NaN, so compare the encoded forms, then spot-check the decoded floats.
    assert to_dict(back) == to_dict(report)
    probs = back.cases[4].outputs[1]
    assert probs.max_rel == math.inf
    assert probs.required_atol is None
    assert probs.worst_actual is not None and math.isnan(probs.worst_actual)
    evil = back.cases[8].outputs[0]
    assert evil.atol == -math.inf and math.isnan(evil.rtol) and evil.required_atol == math.inf
    assert math.isnan(back.cases[6].seconds)
    assert back == dataclasses.replace(back)  # still a well-formed value


def test_file_is_strict_json_with_the_documented_shape(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    write_json(sample_report(), path)
    data = json.loads(path.read_text(encoding="utf-8"), parse_constant=_no_constants)
    assert list(data) == ["version", "spec", "seconds", "complete", "environment", "summary",
                          "baseline", "unmatched_expectations", "plan", "cases"]
    assert data["plan"] == {"spec_sha256": "0123456789abcdef" * 4, "onnx_parity": "0.1.0",
                            "split": "count", "durations_sha256": None, "shard": None,
                            "cases": [case["id"] for case in data["cases"]]}
    assert data["version"] == 1
    assert data["summary"] == {"passed": 3, "failed": 3, "errors": 2, "skipped": 1, "xfailed": 0}
    assert len(data["cases"]) == 9
    case = data["cases"][1]
    assert list(case) == [
        "id", "model", "opset", "exporter", "target", "dataset", "batch_size", "precision",
        "status", "stage", "message", "seconds", "line", "notes", "details", "outputs",
        "baseline", "settings", "tolerance_line",
    ]
    output = case["outputs"][1]
    assert output["name"] == "logits"
    assert output["mismatch_share"] == pytest.approx(12 / 8192)
    assert output["worst_index"] == [3, 0, 17]
    nan_output = data["cases"][4]["outputs"][1]
    assert nan_output["max_rel"] == "inf" and nan_output["worst_actual"] == "nan"
    assert data["cases"][7]["details"]["weird"]["nested"] == [1, 2.5, "inf", None, True]


def test_free_form_values_json_cannot_hold_become_text(tmp_path: Path) -> None:
    environment: dict[Any, Any] = {"path": Path("/x/y"), "versions": ("1", 2), 3: "int key"}
    report = RunReport(
        spec_path="s.yaml",
        environment=environment,
        cases=(passing_case("m", 1),),
    )
    path = tmp_path / "report.json"
    write_json(report, path)
    assert read_json(path).environment == {"path": "/x/y", "versions": ["1", 2], "3": "int key"}


def test_write_replaces_atomically_and_leaves_no_temp_files(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_text("old", encoding="utf-8")
    write_json(sample_report(), path)
    assert to_dict(read_json(path)) == to_dict(sample_report())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask


def test_failed_write_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "report.json"
    path.write_text("old", encoding="utf-8")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        write_json(sample_report(), path)
    assert path.read_text(encoding="utf-8") == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


def _write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_read_rejects_other_versions(tmp_path: Path) -> None:
    data = to_dict(sample_report())
    data["version"] = 2
    with pytest.raises(ReportFormatError, match="version 2"):
        read_json(_write(tmp_path, data))


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("status", "exploded", r"cases\[0\]\.status: 'exploded' is not one of"),
        ("stage", "teleport", r"cases\[0\]\.stage: 'teleport' is not one of"),
        ("precision", "fp8", r"cases\[0\]\.precision: 'fp8' is not one of fp32, fp16, "),
        ("exporter", "jit", r"cases\[0\]\.exporter: 'jit' is not one of dynamo, torchscript"),
        ("opset", "17", r"cases\[0\]\.opset: expected an integer or null"),
        ("notes", "one", r"cases\[0\]\.notes: expected a list of strings"),
        ("seconds", "soon", r"cases\[0\]\.seconds: expected a number"),
    ],
)
def test_read_names_the_bad_field(tmp_path: Path, field: str, value: Any, match: str) -> None:
    data = to_dict(sample_report())
    data["cases"][0][field] = value
    with pytest.raises(ReportFormatError, match=match):
        read_json(_write(tmp_path, data))


def test_read_rejects_a_missing_field_and_non_json(tmp_path: Path) -> None:
    data = to_dict(sample_report())
    del data["cases"][1]["outputs"][0]["passed"]
    with pytest.raises(ReportFormatError, match=r"outputs\[0\]: missing 'passed'"):
        read_json(_write(tmp_path, data))
    path = tmp_path / "truncated.json"
    path.write_text('{"version": 1, "cases": [', encoding="utf-8")
    with pytest.raises(ReportFormatError, match="not JSON"):
        read_json(path)


def test_numpy_scalars_are_written_as_plain_json(tmp_path: Path) -> None:
    np = pytest.importorskip("numpy")
    case = failing_case("m", 1)
    output = dataclasses.replace(
        case.outputs[0], mismatches=np.int64(3), elements=np.int64(4), max_abs=np.float32(0.5),
        worst_index=(np.int64(0), np.int64(2)), expected_shape=(np.int64(4),),
    )
    case = dataclasses.replace(case, outputs=(output,),
                               details=CaseDetails(other={"n": np.int32(7),
                                                          "x": np.float64(np.inf)}))
    path = tmp_path / "report.json"
    write_json(RunReport("s.yaml", {}, (case,)), path)
    back = read_json(path).cases[0]
    assert back.outputs[0].mismatches == 3 and type(back.outputs[0].mismatches) is int
    assert back.outputs[0].worst_index == (0, 2) and back.outputs[0].max_abs == 0.5
    assert back.details.other == {"n": 7, "x": "inf"}


def test_what_wording_needs_survives_the_file_and_old_files_still_read(tmp_path: Path) -> None:
    import numpy as np

    from onnx_parity.compare.outputs import compare_case, compare_output
    from onnx_parity.compare.sentences import output_sentence
    from onnx_parity.results import Tolerance

    tolerance = Tolerance(1e-4, 1e-3, metrics={"cosine": 0.99999})
    drifted = compare_output("y", [(np.linspace(0, 1, 8), np.linspace(0, 1.1, 8))], tolerance)
    (parted,) = compare_case(["p"], [[[{0: 0.1}]]], [[[{1: 0.1}]]], lambda _: tolerance)
    case = dataclasses.replace(failing_case("m", 1), outputs=(drifted, parted))
    path = tmp_path / "report.json"
    write_json(RunReport("s.yaml", {}, (case,)), path)
    back = read_json(path).cases[0].outputs
    assert back == (drifted, parted)
    assert [output_sentence(o) for o in back] == [drifted.message, parted.message]

    data = to_dict(RunReport("s.yaml", {}, (case,)))
    written = data["cases"][0]["outputs"][0]
    for key in ("kind", "samples", "placement", "finite", "thresholds", "failed", "quoted",
                "sample", "where", "actual_scale"):
        del written[key]  # a report from before kinds
    old = read_json(_write(tmp_path, data)).cases[0].outputs[0]
    assert old.kind is None and old.verdict_kind == "elements"
    assert output_sentence(old).startswith("y: 7 of 8 elements (87.50%) out of tolerance; ")
    data["cases"][0]["outputs"][0]["kind"] = "vibes"
    with pytest.raises(ReportFormatError, match=r"outputs\[0\]\.kind: 'vibes' is not one of"):
        read_json(_write(tmp_path, data))


def test_the_providers_record_reads_back_typed_and_is_written_as_it_was_read(
        tmp_path: Path) -> None:
    providers = ProvidersRecord(
        requested=("CUDAExecutionProvider", "CPUExecutionProvider"),
        active=("CPUExecutionProvider",), nodes={"CPUExecutionProvider": {"Gemm": 2, "Relu": 1}},
        cpu_shape_nodes={}, fallback_reason="libcudnn.so.9 is missing")
    case = dataclasses.replace(failing_case("m", 1), details=CaseDetails(providers=providers))
    data = to_dict(RunReport("s.yaml", {}, (case,)))
    assert data["cases"][0]["details"]["providers"] == {
        "requested": ["CUDAExecutionProvider", "CPUExecutionProvider"],
        "active": ["CPUExecutionProvider"],
        "nodes": {"CPUExecutionProvider": {"Gemm": 2, "Relu": 1}}, "cpu_shape_nodes": {},
        "fallback_reason": "libcudnn.so.9 is missing"}
    assert read_json(_write(tmp_path, data)).cases[0].details.providers == providers

    # A report from before cpu_shape_nodes: what it lacks stays out when it is written again.
    del data["cases"][0]["details"]["providers"]["cpu_shape_nodes"]
    old = read_json(_write(tmp_path, data))
    assert old.cases[0].details.providers == dataclasses.replace(providers, cpu_shape_nodes=None)
    assert to_dict(old) == data

    data["cases"][0]["details"]["providers"]["nodes"]["CPUExecutionProvider"]["Gemm"] = "two"
    with pytest.raises(ReportFormatError,
                       match=r"providers\.nodes\.CPUExecutionProvider\.Gemm: expected an integer"):
        read_json(_write(tmp_path, data))


def test_a_report_from_before_settings_were_recorded_reads_and_serves_as_a_baseline(
        tmp_path: Path) -> None:
    """No `settings` on its cases, no `per` on a latency: it reads, with none; as a baseline
    its outputs' tolerances still tell a changed atol, and its missing settings change nothing."""
    from onnx_parity.compare.baseline import trend_of
    from onnx_parity.findings import CallTimes, LatencyRecord
    from onnx_parity.report.jsonfile import read_baseline
    from onnx_parity.spec.model import Regression

    timed = dataclasses.replace(failing_case("m", 1), settings={"precision": "fp32"},
                                details=CaseDetails(latency=LatencyRecord(
                                    CallTimes(1.0, 0.9, 1.1, 3), per="step")))
    write_json(RunReport("parity.yaml", {}, (timed, passing_case("n", 1))), tmp_path / "new.json")
    data = json.loads((tmp_path / "new.json").read_text())
    assert data["cases"][0]["settings"] == {"precision": "fp32"}
    assert data["cases"][0]["details"]["latency"]["per"] == "step"
    for case in data["cases"]:
        del case["settings"]
        case["details"].get("latency", {}).pop("per", None)
    (tmp_path / "old.json").write_text(json.dumps(data))
    old = read_json(tmp_path / "old.json")
    assert all(case.settings == {} for case in old.cases)
    latency = old.cases[0].details.latency
    assert latency is not None and latency.per == "call"
    baseline = read_baseline(str(tmp_path / "old.json"))
    assert baseline.usable
    (output,) = timed.outputs
    now = dataclasses.replace(timed, settings={"precision": "fp32", "target": "{}"},
                              outputs=(dataclasses.replace(output, atol=1e-3),))
    trend, _ = trend_of(now, Regression(), baseline)
    assert trend is not None and [(c.setting, c.before, c.after, c.direction)
                                  for c in trend.settings] == [("atol", "1e-4", "1e-3",
                                                                "loosened")]
