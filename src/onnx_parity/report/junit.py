"""The JUnit XML report: one testsuite per model, one testcase per case, numbers in the text."""

from __future__ import annotations

import math
import os
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from typing import Any

from junit_xml import TestCase, TestSuite, to_xml_report_string

from onnx_parity.report.describe import (
    case_reason,
    failing_outputs,
    fmt_seconds,
    models_in_order,
    output_details,
    value_text,
)
from onnx_parity.report.escape import clean_text, one_line
from onnx_parity.report.jsonfile import write_text_atomic
from onnx_parity.results import CaseResult, RunReport

# CI front ends show the message attribute on one line; the full text is in the element body.
MESSAGE_LIMIT = 500
_ERROR_TYPES = {
    "plan": "PlanError",
    "load": "LoadError",
    "export": "ExportError",
    "check": "CheckError",
    "run": "RunError",
    "compare": "CompareError",
}


def _xml_text(text: str) -> str:
    """Text that survives XML: no illegal characters, and line ends XML parsers will not rewrite.

    junit-xml strips illegal characters only after serializing, and by then characters outside
    ASCII are already character references (&#55296; for a lone surrogate), which no parser
    accepts; so everything is cleaned before it reaches junit-xml.
    """
    return clean_text(text).replace("\r\n", "\n").replace("\r", "\n")


def _case_facts(case: CaseResult) -> list[str]:
    opset = "?" if case.opset is None else str(case.opset)
    batch = "?" if case.batch_size is None else str(case.batch_size)
    lines = [
        f"{one_line(case.id)}: {case.status} in {fmt_seconds(case.seconds)}",
        f"model {one_line(case.model)}, opset {opset}, exporter {one_line(case.exporter or '-')},"
        f" target {one_line(case.target)}, dataset {one_line(case.dataset)}, batch size {batch}",
    ]
    if case.line is not None:
        lines.append(f"spec line {case.line}")
    return lines


def _outputs_text(case: CaseResult, only_failing: bool) -> list[str]:
    failing = failing_outputs(case)
    chosen = failing if only_failing else failing + [o for o in case.outputs if o.passed]
    lines: list[str] = []
    for output in chosen:
        lines.extend(output_details(output))
    return lines


def _notes_and_details(case: CaseResult) -> list[str]:
    lines = [f"note: {note}" for note in case.notes]
    lines.extend(f"{key}: {value_text(value)}" for key, value in case.details.items())
    return lines


def _system_out(case: CaseResult) -> str:
    lines = _case_facts(case)
    if case.status != "passed" and case.message:
        lines.append(case_reason(case))
    lines.extend(_outputs_text(case, only_failing=False))
    lines.extend(_notes_and_details(case))
    return "\n".join(lines) + "\n"


def _testcase(case: CaseResult, spec_path: str) -> TestCase:
    test = TestCase(
        name=_xml_text(one_line(case.id)),
        classname=_xml_text(f"onnx-parity.{one_line(case.model)}"),
        elapsed_sec=case.seconds if math.isfinite(case.seconds) else 0.0,
        stdout=_xml_text(_system_out(case)),
        file=_xml_text(spec_path),
        line=case.line,
    )
    reason = case_reason(case)
    if case.status == "failed":
        body = [reason, *_outputs_text(case, only_failing=True)]
        test.add_failure_info(
            message=_xml_text(one_line(reason, MESSAGE_LIMIT)),
            output=_xml_text("\n".join(body) + "\n"),
            failure_type="OutputDrift",
        )
    elif case.status == "error":
        test.add_error_info(
            message=_xml_text(one_line(reason, MESSAGE_LIMIT)),
            output=_xml_text(reason + "\n"),
            error_type=_ERROR_TYPES.get(case.stage or "run", "RunError"),
        )
    elif case.status == "skipped":
        test.add_skipped_info(message=_xml_text(one_line(reason, MESSAGE_LIMIT)))
    return test


def _suite_properties(cases: list[CaseResult], report: RunReport) -> dict[str, str]:
    properties = {"spec": _xml_text(report.spec_path)}
    line = next((c.line for c in cases if c.line is not None), None)
    if line is not None:
        properties["spec.line"] = str(line)
    environment: Mapping[str, Any] = report.environment
    for key, value in environment.items():
        properties[_xml_text(one_line(f"environment.{key}"))] = _xml_text(value_text(value))
    return properties


def _time(seconds: float) -> str:
    return f"{seconds:.3f}" if math.isfinite(seconds) else "0.000"


def junit_xml_string(report: RunReport) -> str:
    """The JUnit XML document; the same report always gives the same bytes."""
    suites = [
        TestSuite(
            name=_xml_text(one_line(model)),
            test_cases=[_testcase(case, report.spec_path) for case in cases],
            properties=_suite_properties(cases, report),
        )
        for model, cases in models_in_order(report).items()
    ]
    root = ET.fromstring(to_xml_report_string(suites, prettyprint=False))
    # junit-xml leaves `skipped` off <testsuites>, prints times as raw float sums and omits
    # zero times; set them so every consumer sees the same counts and stable text.
    counts = report.counts
    root.set("name", "onnx-parity")
    root.set("tests", str(len(report.cases)))
    root.set("failures", str(counts["failed"]))
    root.set("errors", str(counts["error"]))
    root.set("skipped", str(counts["skipped"]))
    total = 0.0
    for suite_element, cases in zip(root, models_in_order(report).values(), strict=True):
        suite_seconds = 0.0
        for case_element, case in zip(suite_element.iter("testcase"), cases, strict=True):
            seconds = case.seconds if math.isfinite(case.seconds) else 0.0
            case_element.set("time", _time(seconds))
            suite_seconds += seconds
        suite_element.set("time", _time(suite_seconds))
        total += suite_seconds
    # The run's wall time when known (cases may overlap or share setup), else the cases' sum.
    wall = report.seconds if math.isfinite(report.seconds) and report.seconds > 0 else total
    root.set("time", _time(wall))
    ET.indent(root, space="  ")
    body = ET.tostring(root, encoding="unicode")
    return '<?xml version="1.0" encoding="utf-8"?>\n' + body + "\n"


def write_junit(report: RunReport, path: str | os.PathLike[str]) -> None:
    """Write the JUnit XML report atomically."""
    write_text_atomic(path, junit_xml_string(report))
