"""The bounds a JSON report is read within (file size, nesting, string length, integer digits):
a report is untrusted data wherever it comes from (`merge`, `--baseline`, `--durations`,
`publish`), and one past a bound is refused, naming the file and the limit, before it can cost
the reader its memory or its time."""

from __future__ import annotations

import math
import os
import stat
from typing import Any

from onnx_parity.frozen import frozen
from onnx_parity.report.jsonvalues import ReportFormatError


@frozen
class JsonLimits:
    """What one JSON document may hold. The defaults fit reports of tens of thousands of cases
    (a case is about 2 KB) with room to spare."""

    bytes: int = 128 << 20  # the file
    depth: int = 64  # objects and arrays inside each other; a report nests about 8 deep
    string: int = 1 << 20  # characters in one string or key (an exporter's whole message fits)
    digits: int = 32  # of one integer; int64 has 19


REPORT_LIMITS = JsonLimits()


def read_bounded_json(path: str | os.PathLike[str], limits: JsonLimits = REPORT_LIMITS) -> Any:
    """The JSON value in the file at `path`, read within `limits` (read_bounded, then
    parse_bounded_json)."""
    return parse_bounded_json(read_bounded(path, limits), os.fspath(path), limits)


def read_bounded(path: str | os.PathLike[str], limits: JsonLimits = REPORT_LIMITS) -> bytes:
    """The bytes of the file at `path`, within `limits.bytes`. A file that is not a regular file
    (a FIFO would block the reader, a device never ends) or too large raises ReportFormatError
    naming the file; OSError as reading raises it, for the caller to say what it was for."""
    where = os.fspath(path)
    # O_NONBLOCK: opening a FIFO must not wait for a writer; a regular file ignores it.
    fd = os.open(where, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as handle:
        facts = os.fstat(handle.fileno())
        if not stat.S_ISREG(facts.st_mode):
            raise ReportFormatError(f"{where}: not a regular file")
        if facts.st_size > limits.bytes:
            raise ReportFormatError(f"{where}: {size_text(facts.st_size)} is over the limit of "
                                    f"{size_text(limits.bytes)} for a report")
        raw = handle.read(limits.bytes + 1)  # the file may grow after fstat
    if len(raw) > limits.bytes:
        raise ReportFormatError(f"{where}: more than the limit of {size_text(limits.bytes)} for a "
                                "report")
    return raw


def parse_bounded_json(raw: bytes, where: str, limits: JsonLimits = REPORT_LIMITS) -> Any:
    """The JSON value of `raw`, refused (ReportFormatError naming `where` and the limit) when it
    is too large, not UTF-8, not JSON, holds NaN or Infinity (reports spell them as strings), or
    nests, strings or digits past `limits`."""
    import json

    if len(raw) > limits.bytes:
        raise ReportFormatError(f"{where}: more than the limit of {size_text(limits.bytes)} for a "
                                "report")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ReportFormatError(f"{where}: not UTF-8: {exc}") from None

    def integer(digits: str) -> int:
        if len(digits.lstrip("-")) > limits.digits:
            raise _Refused(f"an integer of {len(digits.lstrip('-'))} digits, over the limit "
                           f"of {limits.digits}")
        return int(digits)

    def constant(name: str) -> Any:
        raise _Refused(f"{name}, which JSON does not have (reports write it as a string)")

    try:
        value = json.loads(text, parse_int=integer, parse_constant=constant)
    except _Refused as exc:
        raise ReportFormatError(f"{where}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ReportFormatError(f"{where}: not JSON: {exc}") from None
    except RecursionError:
        raise ReportFormatError(f"{where}: nested deeper than the limit of {limits.depth}") \
            from None
    except ValueError as exc:  # Python's own bound on an integer's digits
        raise ReportFormatError(f"{where}: not JSON: {exc}") from None
    problem = _past_limits(value, limits)
    if problem is not None:
        raise ReportFormatError(f"{where}: {problem}")
    return value


class _Refused(ValueError):
    """A value the parser met that is past a bound; json.loads lets it through."""


def _past_limits(value: Any, limits: JsonLimits) -> str | None:
    """Why `value` is past `limits` (nesting, a string's length, a number too large to be
    finite: 1e999 parses to inf), or None; walked without recursion, so a deep value cannot
    exhaust the stack here either."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return f"a number too large to be finite ({item}); reports write \"inf\" as a string"
        if isinstance(item, str):
            if len(item) > limits.string:
                return (f"a string of {len(item)} characters, over the limit of "
                        f"{limits.string}")
        elif isinstance(item, (dict, list)):
            if depth >= limits.depth:
                return f"nested deeper than the limit of {limits.depth}"
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return None


def size_text(size: int) -> str:
    """`12.5 MiB`, or `300 bytes` below one MiB."""
    return f"{size / (1 << 20):.1f} MiB" if size >= 1 << 20 else f"{size} bytes"
