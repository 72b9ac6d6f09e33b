from __future__ import annotations

import dataclasses
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from onnx_parity.errors import SpecProblem
from onnx_parity.escape import one_line
from onnx_parity.report.describe import models_in_order
from onnx_parity.report.junit import junit_xml_string, spec_junit_xml, write_junit
from onnx_parity.report.xmlout import element
from onnx_parity.results import RunReport
from report_fixtures import HOSTILE_MODEL, check_golden, failing_case, sample_report

# Everything XML 1.0 allows in a document, per its `Char` production.
_XML_CHAR = re.compile("[\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]*")


def _parse(text: str) -> ET.Element:
    return ET.fromstring(text.encode("utf-8"))


def test_junit_matches_golden() -> None:
    check_golden("report.junit.xml", junit_xml_string(sample_report()))


def test_counts_are_right_at_every_level() -> None:
    report = sample_report()
    root = _parse(junit_xml_string(report))
    assert root.tag == "testsuites"
    counts = report.counts
    assert root.get("tests") == str(len(report.cases)) == "9"
    assert root.get("failures") == str(counts["failed"]) == "3"
    assert root.get("errors") == str(counts["error"]) == "2"
    assert root.get("skipped") == str(counts["skipped"]) == "1"
    assert root.get("time") == "12.345"
    groups = models_in_order(report)
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == [one_line(m) for m in groups]
    for suite, cases in zip(suites, groups.values(), strict=True):
        testcases = suite.findall("testcase")
        assert suite.get("tests") == str(len(cases)) == str(len(testcases))
        for status, tag, attribute in [
            ("failed", "failure", "failures"),
            ("error", "error", "errors"),
            ("skipped", "skipped", "skipped"),
        ]:
            expected = sum(c.status == status for c in cases)
            assert suite.get(attribute) == str(expected)
            assert sum(t.find(tag) is not None for t in testcases) == expected
        assert [t.get("name") for t in testcases] == [one_line(c.id) for c in cases]
        assert all(t.get("classname") == f"onnx-parity.{one_line(c.model)}"
                   for t, c in zip(testcases, cases, strict=True))
        seconds = sum(float(t.get("time", "x")) for t in testcases)
        assert float(suite.get("time", "x")) == pytest.approx(seconds)


def test_failure_error_and_skip_carry_the_explanation() -> None:
    root = _parse(junit_xml_string(sample_report()))
    by_name = {t.get("name"): t for t in root.iter("testcase")}
    drifted = by_name["mlp[opset17-cpu-wide-b8]"]
    failure = drifted.find("failure")
    assert failure is not None and failure.get("type") == "OutputDrift"
    assert failure.get("message", "").startswith("logits drifted")
    assert "needs atol ≥ 3.1e-2" in (failure.text or "")
    assert "worst element at sample 3 [0, 17]: expected 6.25, got 6.281" in (failure.text or "")
    assert "hidden" not in (failure.text or "")  # only failing outputs in the failure
    out = drifted.findtext("system-out") or ""
    assert "output hidden: passed" in out
    assert "providers: {\"active\": [\"CPUExecutionProvider\"]}" in out

    error = by_name["resnet_tiny[onnx-cuda-imagenet-b1]"].find("error")
    assert error is not None and error.get("type") == "RunError"
    assert error.get("message", "").startswith("run: [ONNXRuntimeError] RUNTIME_EXCEPTION: ")
    skipped = by_name["mlp[opset17-cuda-wide-b8]"].find("skipped")
    assert skipped is not None and "not available" in skipped.get("message", "")
    passed = by_name["mlp[opset17-cpu-random-b1]"]
    assert passed.find("failure") is None and passed.find("error") is None
    assert "note: factory returned a module in training mode" in (
        passed.findtext("system-out") or "")
    assert passed.get("file") == "models/parity.yaml" and passed.get("line") == "12"


def test_environment_and_spec_are_suite_properties() -> None:
    root = _parse(junit_xml_string(sample_report()))
    suite = root.find("testsuite")
    assert suite is not None
    properties = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert properties["spec"] == "models/parity.yaml"
    assert properties["spec.line"] == "12"
    assert properties["environment.torch"] == "2.13.0+cpu"
    assert properties["environment.evil|key"] == "a|b\n<i>x</i> & y"


def test_hostile_text_is_escaped_and_illegal_characters_are_gone() -> None:
    text = junit_xml_string(sample_report())
    assert _XML_CHAR.fullmatch(text)
    assert "\x1b" not in text and "\x00" not in text and "\x7f" not in text
    root = _parse(text)
    assert not list(root.iter("script")) and not list(root.iter("b"))
    evil = [t for t in root.iter("testcase")
            if t.get("classname", "").startswith("onnx-parity.evil")]
    assert len(evil) == 2
    assert evil[0].get("name") == one_line(HOSTILE_MODEL) + "[opset17-cpu-random-b1]"
    error = evil[0].find("error")
    assert error is not None
    assert "<b>bold</b> & `code`" in (error.text or "")  # kept as text, not markup
    assert "\r" not in (error.text or "")
    assert "esc\x1b[31mred" not in (error.text or "") and "escred bell" in (error.text or "")


def test_characters_xml_cannot_carry_are_removed() -> None:
    message = "lone surrogate \ud800, non-character \ufffe, NUL \x00, vertical tab \x0b"
    case = dataclasses.replace(failing_case("m", 1), status="error", stage="load", message=message)
    report = RunReport(spec_path="s\x00.yaml", environment={"k\ud800": "v\uffff"}, cases=(case,))
    root = _parse(junit_xml_string(report))
    error = root.find("testsuite/testcase/error")
    assert error is not None
    assert error.get("message") == "load: lone surrogate , non-character , NUL , vertical tab"
    assert error.get("type") == "LoadError"


def test_empty_report_is_a_valid_document() -> None:
    root = _parse(junit_xml_string(RunReport(spec_path="s.yaml", environment={}, cases=())))
    assert root.tag == "testsuites" and root.get("tests") == "0" and root.get("skipped") == "0"
    assert list(root) == []


def test_write_junit_writes_the_same_bytes(tmp_path: Path) -> None:
    path = tmp_path / "reports" / "junit.xml"
    write_junit(sample_report(), path)
    assert path.read_bytes() == junit_xml_string(sample_report()).encode("utf-8")
    assert junit_xml_string(sample_report()) == junit_xml_string(sample_report())


_XML_TEXT = st.text(st.sampled_from(list("ab &<>\"'\r\n\t\u00e9\u20ac")), max_size=6)


@given(st.sampled_from(["testcase", "property", "failure"]),
       st.dictionaries(st.sampled_from(["name", "value", "time"]), _XML_TEXT, max_size=3),
       st.none() | _XML_TEXT)
def test_an_element_is_written_as_elementtree_writes_it(tag: str, attributes: dict[str, str],
                                                        text: str | None) -> None:
    made = ET.Element(tag, attributes)
    made.text = text
    assert element(tag, attributes, text) == ET.tostring(made, encoding="unicode")


def test_the_document_is_what_elementtree_indents_and_writes() -> None:
    """Every element is put together as text: the document is byte for byte what ElementTree
    makes of its own tree, indented by ET.indent, for every kind of testcase (passed, failed,
    error, skipped, a hostile name) and for a spec that cannot be used."""
    report = sample_report()
    hostile = failing_case(HOSTILE_MODEL, 1, line=3)
    for text in (junit_xml_string(report),
                 junit_xml_string(dataclasses.replace(report, cases=(*report.cases, hostile))),
                 spec_junit_xml([SpecProblem("s.yaml", 4, 2, "bad <key> & \"more\"")], "s.yaml")):
        root = _parse(text)
        ET.indent(root, space="  ")
        assert text == ('<?xml version="1.0" encoding="utf-8"?>\n'
                        + ET.tostring(root, encoding="unicode") + "\n")
