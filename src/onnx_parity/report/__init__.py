"""The report writers: each reads a RunReport and nothing else, and gives the same bytes for it."""

# No `from __future__ import annotations`: the name is taken by github.annotations, exported here.

from onnx_parity.report.console import case_line, final_table
from onnx_parity.report.github import annotations, baseline_warning, escape_data, escape_property
from onnx_parity.report.jsonfile import ReportFormatError, read_json, to_dict, write_json
from onnx_parity.report.junit import junit_xml_string, write_junit
from onnx_parity.report.summary import summary_markdown, write_summary

__all__ = [
    "ReportFormatError",
    "annotations",
    "baseline_warning",
    "case_line",
    "escape_data",
    "escape_property",
    "final_table",
    "junit_xml_string",
    "read_json",
    "summary_markdown",
    "to_dict",
    "write_json",
    "write_junit",
    "write_summary",
]
