"""Typed access to schema-checked YAML values: each returns nothing for a value of the wrong
type, because the schema pass has already reported it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeVar

from onnx_parity.metrics.base import number as number
from onnx_parity.metrics.base import whole as whole

_T = TypeVar("_T")


def mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def entries(value: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, entry in mapping(value).items():
        if isinstance(entry, dict):
            yield name, entry


def strings(value: Any) -> tuple[str, ...]:
    return tuple(item for item in items(value) if isinstance(item, str))


def integer(value: Any) -> int | None:
    return whole(value)


def integers(value: Any) -> tuple[int, ...]:
    return tuple(n for n in (whole(item) for item in items(value)) if n is not None)


def sizes(value: Any) -> dict[str, int]:
    sizes = {name: whole(size) for name, size in mapping(value).items()}
    return {name: size for name, size in sizes.items() if size is not None}


def size_lists(value: Any) -> dict[str, tuple[int, ...]]:
    """The named dimensions given a list of sizes (`dims: {seq: [1, 7, 64]}`)."""
    lists = {name: integers(size) for name, size in mapping(value).items()
             if isinstance(size, list)}
    return {name: found for name, found in lists.items() if found}


def dim(value: Any) -> int | str | None:
    return value if isinstance(value, str) else whole(value)


def choice(value: Any, options: tuple[_T, ...], default: _T) -> _T:
    return next((option for option in options if option == value), default)
