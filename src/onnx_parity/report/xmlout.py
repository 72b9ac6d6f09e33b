"""The JUnit report's elements as text, byte for byte what `ET.tostring` writes of them: tags,
attributes in their order, text. The report is put together from them (report/junit.py), not
built as a tree: a suite of 1,884 one-node models is written several times a run
(report/live.py), and ElementTree's tree, its indentation and its serializer (which walks the
tree twice and formats each attribute through QName checks) cost more than the text they make.

Escaping is ElementTree's: `&`, `<` and `>` in text, and `"`, CR, LF and TAB besides in
attribute values, as character references.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["attribute", "element", "empty_tag", "start_tag"]


def start_tag(tag: str, attributes: Mapping[str, str]) -> str:
    """`<tag name="value" ...>`, as ET.tostring writes the start of an element with content."""
    return f"<{tag}{_attributes(attributes)}>"


def empty_tag(tag: str, attributes: Mapping[str, str]) -> str:
    """`<tag name="value" ... />`, as ET.tostring writes an element without text or children."""
    return f"<{tag}{_attributes(attributes)} />"


def _attributes(attributes: Mapping[str, str]) -> str:
    return "".join(f' {key}="{attribute(value)}"' for key, value in attributes.items())


def element(tag: str, attributes: Mapping[str, str], text: str | None = None) -> str:
    """An element without children: `<tag name="value" ...>text</tag>`, or `<tag ... />`
    without text, as ET.tostring writes it."""
    if text:
        return start_tag(tag, attributes) + _character_data(text) + f"</{tag}>"
    return empty_tag(tag, attributes)


def _character_data(text: str) -> str:
    if "&" in text:
        text = text.replace("&", "&amp;")
    if "<" in text:
        text = text.replace("<", "&lt;")
    if ">" in text:
        text = text.replace(">", "&gt;")
    return text


_REFERENCES = (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ('"', "&quot;"), ("\r", "&#13;"),
               ("\n", "&#10;"), ("\t", "&#09;"))


_PLAIN = re.compile(r'[^&<>"\r\n\t]*').fullmatch  # what an attribute value holds as it is


def attribute(text: str) -> str:
    """An attribute's value, escaped as ElementTree escapes it (without its quotes)."""
    if _PLAIN(text):
        return text
    for character, reference in _REFERENCES:
        if character in text:
            text = text.replace(character, reference)
    return text
