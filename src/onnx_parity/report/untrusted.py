"""Reading a JSON report as untrusted input: the one gate every reader of a report goes through
(`merge`, `--baseline`, `--durations`, publishing). Bounded before anything is built from it
(report/jsonlimits.py: its size, nesting depth, string lengths and integer digits; strict JSON,
no NaN or Infinity literals, no number that overflows to one); then the report's JSON Schema
(report/schema.py, checked by spec/conforms.py).
Whatever the bytes, the answer is a value or a ReportFormatError naming the file and what is
wrong, never another exception.
"""

from __future__ import annotations

import os
from typing import Any

from onnx_parity.report.jsonlimits import (
    REPORT_LIMITS,
    JsonLimits,
    parse_bounded_json,
    read_bounded,
)
from onnx_parity.report.jsonvalues import ReportFormatError
from onnx_parity.report.schema import report_schema
from onnx_parity.spec.conforms import violation


def load_report(path: str | os.PathLike[str],
                limits: JsonLimits = REPORT_LIMITS) -> dict[str, Any]:
    """The JSON value of a report file, within the bounds (report/jsonlimits.py) and checked
    against the report's schema. OSError (a file missing or unreadable) is left to the caller,
    who says what the file was for."""
    return parse_report(read_bounded(path, limits), os.fspath(path), limits)


def parse_report(data: bytes, where: str,
                 limits: JsonLimits = REPORT_LIMITS) -> dict[str, Any]:
    """Bytes → the report's JSON value; a ReportFormatError says what is wrong, at `where`."""
    value = parse_bounded_json(data, where, limits)
    _check_schema(value, where)
    assert isinstance(value, dict)  # the schema's "type": "object"
    return value


def _check_schema(value: Any, where: str) -> None:
    """The first violation of the report's schema, located."""
    found = violation(value, report_schema())
    if found is not None:
        place, said = found
        raise ReportFormatError(where + "".join(
            f"[{p}]" if isinstance(p, int) else f".{p}" for p in place) + f": {said}")
