"""Reading a JSON report as untrusted input: the one gate every reader of a report goes through
(`merge`, `--baseline`, `--durations`, publishing). Bounded before anything is built from it:
its size, nesting depth, string lengths and integer digits; strict JSON (no NaN or Infinity
literals, no number that overflows to one); then the report's JSON Schema (report/schema.py).
Whatever the bytes, the answer is a value or a ReportFormatError naming the file and what is
wrong, never another exception.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from dataclasses import dataclass
from typing import Any

from onnx_parity.report.jsonvalues import ReportFormatError


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
        raise ReportFormatError(f"{path}: larger than {bounds.max_bytes >> 20} MiB, the most a "
                                "report may be")
    return data


def parse_report(data: bytes, where: str, bounds: Bounds = REPORT_BOUNDS) -> dict[str, Any]:
    """Bytes → the report's JSON value; a ReportFormatError says what is wrong, at `where`."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ReportFormatError(f"{where}: not UTF-8 (byte {exc.start})") from None
    try:
        value = json.loads(text, parse_int=_integer(bounds, where), parse_float=_float(where),
                           parse_constant=_constant(where))
    except json.JSONDecodeError as exc:
        raise ReportFormatError(f"{where}: not JSON: {exc}") from None
    except RecursionError:
        raise ReportFormatError(f"{where}: nested deeper than {bounds.max_depth} levels") from None
    _check_shape(value, where, bounds)
    _check_schema(value, where)
    assert isinstance(value, dict)  # the schema's "type": "object"
    return value


def _integer(bounds: Bounds, where: str) -> Any:
    def parse(text: str) -> int:
        if len(text.lstrip("-")) > bounds.max_digits:
            raise ReportFormatError(f"{where}: an integer of {len(text.lstrip('-'))} digits "
                                    f"(at most {bounds.max_digits})")
        return int(text)
    return parse


def _float(where: str) -> Any:
    def parse(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):  # 1e999: JSON's non-finite numbers are "inf" and "nan"
            raise ReportFormatError(f"{where}: the number {text[:40]} is not finite")
        return value
    return parse


def _constant(where: str) -> Any:
    def parse(text: str) -> float:
        raise ReportFormatError(f"{where}: {text} is not JSON; a report writes \"inf\", "
                                "\"-inf\" and \"nan\" as strings")
    return parse


def _check_shape(value: Any, where: str, bounds: Bounds) -> None:
    """Depth and string lengths, walked without recursion (the schema check recurses)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if len(item) > bounds.max_string:
                raise ReportFormatError(f"{where}: a string of {len(item)} characters (at most "
                                        f"{bounds.max_string})")
            continue
        if not isinstance(item, (dict, list)):
            continue
        if depth > bounds.max_depth:
            raise ReportFormatError(f"{where}: nested deeper than {bounds.max_depth} levels")
        if isinstance(item, dict):
            stack.extend((key, depth) for key in item)
            stack.extend((child, depth + 1) for child in item.values())
        else:
            stack.extend((child, depth + 1) for child in item)


def _check_schema(value: Any, where: str) -> None:
    """The first violation of the report's schema, located: the deepest, most specific one."""
    from jsonschema.exceptions import best_match

    # The best of the first few: a hostile file may hold millions of violations.
    problem = best_match(itertools.islice(_validator().iter_errors(value), 20))
    if problem is None:
        return
    place = where + "".join(f"[{p}]" if isinstance(p, int) else f".{p}"
                            for p in problem.absolute_path)
    raise ReportFormatError(f"{place}: {_said(problem)}")


def _said(problem: Any) -> str:
    """A violation in the words the report readers use."""
    from onnx_parity.escape import visible

    value = visible(repr(problem.instance)[:60])
    if problem.validator == "required":
        missing = next((k for k in problem.validator_value if k not in problem.instance), "?")
        return f"missing {missing!r}"
    branches = problem.schema.get("anyOf", [problem.schema])
    words = next((b["enum"] for b in branches if "enum" in b), None)
    if words is not None and all(b.get("type", "null") == "null" for b in branches):
        null = " (or null)" if {"type": "null"} in branches else ""
        return f"{value} is not one of {', '.join(map(str, words))}{null}"
    if problem.validator in ("type", "anyOf", "enum"):
        return f"expected {_expected(problem.schema)}, found {value}"
    return visible(problem.message[:200])


def _expected(schema: Any) -> str:
    """What a (part of the) schema takes, in words: "a number or null"."""
    if "anyOf" in schema:
        return " or ".join(_expected(branch) for branch in schema["anyOf"])
    if "enum" in schema:
        return ", ".join(f'"{word}"' for word in schema["enum"])
    kinds = schema.get("type", "value")
    listed = kinds if isinstance(kinds, list) else [kinds]
    said = " or ".join(_KINDS.get(k, str(k)) for k in listed)
    items = schema.get("items", {}).get("type")
    if kinds == "array" and items in _KINDS:
        return f"a list of {_KINDS[items].split(' ', 1)[1]}s"
    return said


_KINDS = {"string": "a string", "integer": "an integer", "number": "a number",
          "boolean": "true or false", "object": "an object", "array": "a list", "null": "null"}

_VALIDATOR: list[Any] = []


def _validator() -> Any:
    """The schema's validator, made once per process (jsonschema compiles it)."""
    if not _VALIDATOR:
        from jsonschema import Draft202012Validator

        from onnx_parity.report.schema import report_schema

        _VALIDATOR.append(Draft202012Validator(report_schema()))
    return _VALIDATOR[0]
