from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from onnx_parity.escape import clean_text, markdown_cell, markdown_text, one_line, shorten


def test_clean_text_drops_terminal_sequences_whole_and_illegal_characters() -> None:
    text = "\x1b[1;31mred\x1b[0m \x1b]0;title\x07ok\x00 \x7f\x9b tab\tnl\ncr\r ☃ \ud800 \ufffe"
    assert clean_text(text) == "red ok  tab\tnl\ncr\r ☃  "


def test_one_line_and_shorten() -> None:
    assert one_line("  a\n\tb\r\n c  ") == "a b c"
    assert one_line("abcdef", 4) == "abc…"
    assert shorten("abc", 3) == "abc" and shorten("abc def", 5) == "abc…" and shorten("x", 0) == ""


def test_markdown_cell_escapes_structure_html_and_inline_markup() -> None:
    assert markdown_cell("a|b") == "a\\|b"
    assert markdown_cell("<script>&") == "&lt;script&gt;&amp;"
    assert markdown_cell("one\r\ntwo\nthree") == "one<br>two<br>three"
    assert markdown_cell("__init__ *x* `y` [z](u) ~s~ \\") == (
        "\\_\\_init\\_\\_ \\*x\\* \\`y\\` \\[z\\](u) \\~s\\~ \\\\"
    )
    assert markdown_text("a\nb|c") == "a b\\|c"


@given(st.text())
def test_markdown_cell_never_leaves_a_bare_pipe_newline_or_tag(text: str) -> None:
    cell = markdown_cell(text)
    assert "\n" not in cell and "\r" not in cell
    assert "<" not in cell.replace("<br>", "") and ">" not in cell.replace("<br>", "")
    escaped = False
    for char in cell:
        assert char != "|" or escaped
        escaped = char == "\\" and not escaped


def test_plain_text_takes_the_short_path_to_the_same_result() -> None:
    """clean_text and one_line skip their expressions for printable ASCII: the result is what
    the expressions give, on text made of every kind of piece they treat."""
    import random
    import re

    from onnx_parity import escape

    whitespace = re.compile(r"\s+")
    pieces = [" ", "  ", "a", "::", "x y", "\t", "\n", "\r", "\x0b", "\x1c", "\x1b[31m", "\x1b",
              "\x7f", "\x85", "é", "\u2028", "\ud800"]
    random.seed(0)
    for _ in range(20000):
        text = "".join(random.choice(pieces) for _ in range(random.randint(0, 8)))
        cleaned = escape._CONTROL.sub("", escape._ANSI.sub("", text))
        assert escape.clean_text(text) == cleaned
        assert escape.one_line(text) == whitespace.sub(" ", cleaned).strip()
