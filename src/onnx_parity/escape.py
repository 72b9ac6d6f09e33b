"""Making untrusted text (model names, paths, exporter messages) safe for each report format and
for the console, where GitHub Actions reads any line starting with `::` as a workflow command."""

from __future__ import annotations

import re

# Terminal colour and cursor sequences (exporters and ORT colour their logs); removing the whole
# sequence beats leaving "[31m" behind once the ESC byte is gone.
_ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: ESC [ params intermediates final
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: ESC ] ... BEL or ST
    r"|\x1b[@-Z\\-_]"  # two-byte escapes
)
# Characters XML 1.0 forbids, plus DEL and the C1 controls (which terminals may act on).
# Tab, newline and carriage return stay: callers decide whether text may span lines.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")
_WHITESPACE = re.compile(r"\s+")

ELLIPSIS = "…"


def clean_text(text: str) -> str:
    """`text` without terminal escape sequences and without characters no report can carry."""
    if text.isascii() and text.isprintable():  # most text: nothing to remove, said at C speed
        return text
    return _CONTROL.sub("", _ANSI.sub("", text))


_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_INVISIBLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\ufffe\uffff]")


def visible(text: str) -> str:
    """User text inside a one-line message: every newline, tab and control character shown as
    its escape (`\\n`, `\\x1b`), so a name cannot start a line of its own."""
    return _INVISIBLE.sub(lambda m: _ESCAPES.get(m.group(), f"\\x{ord(m.group()):02x}"
                                                if ord(m.group()) < 0x100
                                                else f"\\u{ord(m.group()):04x}"), text)


def no_command(line: str) -> str:
    """A console line that GitHub Actions will not read as a workflow command: one whose text
    starts with `::` (after leading spaces) gets a backslash in front."""
    return "\\" + line if line.lstrip().startswith("::") else line


def console_lines(text: str) -> str:
    """Text for the console, line by line: no escape sequences or control characters, and no
    line that is a workflow command. Newlines the text has stay newlines."""
    return "\n".join(no_command(clean_text(line)) for line in text.split("\n"))


def shorten(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, marking the cut with an ellipsis."""
    if len(text) <= limit:
        return text
    if limit <= 0:
        return ""
    return text[: limit - 1].rstrip() + ELLIPSIS


def one_line(text: str, limit: int | None = None) -> str:
    """Clean `text`, fold every run of whitespace (newlines included) into one space, shorten."""
    if text.isascii() and text.isprintable():  # spaces are its only whitespace
        folded = " ".join(text.split())
    else:
        folded = _WHITESPACE.sub(" ", clean_text(text)).strip()
    return folded if limit is None else shorten(folded, limit)


def markdown_cell(text: str) -> str:
    """`text` as the content of one GitHub-Flavored-Markdown table cell, rendered literally.

    A `|` would end the cell and a newline the row; `<`, `>` and `&` become entities so no HTML
    gets through; Markdown's inline markers are backslash-escaped so `__init__` or `*args` in an
    exporter message stays as written instead of turning bold.
    """
    text = clean_text(text)
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = re.sub(r"([\\`*_\[\]~|])", r"\\\1", text)
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\t", " ")
    return "<br>".join(part.strip() for part in text.split("\n"))


def markdown_text(text: str) -> str:
    """`text` as one line of Markdown outside a table (a heading), rendered literally."""
    return markdown_cell(one_line(text))
