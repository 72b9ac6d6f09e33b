"""Reading a JSON report as untrusted input: the one gate every reader of a report goes through
(`merge`, `--baseline`, `--durations`, publishing). Bounded before anything is built from it:
its size, nesting depth, string lengths and integer digits; strict JSON (no NaN or Infinity
literals, no number that overflows to one); then the report's JSON Schema (report/schema.py).
Whatever the bytes, the answer is a value or a ReportFormatError naming the file and what is
wrong, never another exception.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any

from onnx_parity.report.jsonvalues import ReportFormatError
from onnx_parity.report.schema import violation


@dataclass(frozen=True)
class Bounds:
    """What a report file may hold. A real report is far inside them: about 2 KB and a depth
    of 8 per case, its longest strings an exporter's message or log."""

    max_bytes: int = 128 << 20
    max_depth: int = 64  # objects and arrays inside each other
    max_string: int = 1 << 20  # characters in one string, keys included
    max_digits: int = 24  # digits of one integer; Python refuses to parse past 4,300


REPORT_BOUNDS = Bounds()


def load_report(path: str | os.PathLike[str], bounds: Bounds = REPORT_BOUNDS) -> dict[str, Any]:
    """The JSON value of a report file, checked against the bounds and the report's schema."""
    return parse_report(read_bounded(path, bounds), str(path), bounds)


def read_bounded(path: str | os.PathLike[str], bounds: Bounds = REPORT_BOUNDS) -> bytes:
    """A file's bytes, refused past `bounds.max_bytes` before they are read. OSError (a file
    that is missing or cannot be read) is left to the caller, who says what it was for."""
    with open(path, "rb") as handle:
        data = handle.read(bounds.max_bytes + 1)
    if len(data) > bounds.max_bytes:
        most = bounds.max_bytes
        size = f"{most >> 20} MiB" if most >= 1 << 20 else f"{most} bytes"
        raise ReportFormatError(f"{path}: larger than {size}, the most a report may be")
    return data


def parse_report(data: bytes, where: str, bounds: Bounds = REPORT_BOUNDS) -> dict[str, Any]:
    """Bytes → the report's JSON value; a ReportFormatError says what is wrong, at `where`."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ReportFormatError(f"{where}: not UTF-8 (byte {exc.start})") from None
    try:
        value = json.loads(text, parse_constant=_constant(where))
    except json.JSONDecodeError as exc:
        raise ReportFormatError(f"{where}: not JSON: {exc}") from None
    except ValueError:  # an integer past the 4,300 digits Python parses
        raise ReportFormatError(f"{where}: an integer of more than {bounds.max_digits} "
                                "digits") from None
    except RecursionError:
        raise ReportFormatError(f"{where}: nested deeper than {bounds.max_depth} levels") from None
    _check_shape(value, where, bounds)
    _check_schema(value, where)
    assert isinstance(value, dict)  # the schema's "type": "object"
    return value


def _constant(where: str) -> Any:
    def parse(text: str) -> float:
        raise ReportFormatError(f"{where}: {text} is not JSON; a report writes \"inf\", "
                                "\"-inf\" and \"nan\" as strings")
    return parse


def _check_shape(value: Any, where: str, bounds: Bounds) -> None:
    """Depth, string lengths, integer digits and finite numbers, walked without recursion (the
    schema check recurses). By type, not isinstance: json.loads makes exactly these types."""
    largest = 10 ** bounds.max_digits
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if kind is str:
            if len(item) > bounds.max_string:
                raise ReportFormatError(f"{where}: a string of {len(item)} characters (at most "
                                        f"{bounds.max_string})")
        elif kind is int:
            if not -largest < item < largest:
                raise ReportFormatError(f"{where}: an integer of more than {bounds.max_digits} "
                                        "digits")
        elif kind is float:
            if not math.isfinite(item):  # 1e999: non-finite numbers are "inf" and "nan"
                raise ReportFormatError(f"{where}: a number too large to be finite ({item})")
        elif kind is dict or kind is list:
            if depth > bounds.max_depth:
                raise ReportFormatError(f"{where}: nested deeper than {bounds.max_depth} "
                                        "levels")
            if kind is dict:
                stack.extend((key, depth) for key in item)
                stack.extend((child, depth + 1) for child in item.values())
            else:
                stack.extend((child, depth + 1) for child in item)


def _check_schema(value: Any, where: str) -> None:
    """The first violation of the report's schema, located."""
    found = violation(value)
    if found is not None:
        place, said = found
        raise ReportFormatError(where + "".join(
            f"[{p}]" if isinstance(p, int) else f".{p}" for p in place) + f": {said}")
