"""JSON's values for the reports written to and read from it: numbers that may be infinite,
free-form values made JSON-safe, a reader that names the field a value is wrong in, and the
words their JSON Schema is written in."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any, TypeVar

from onnx_parity.errors import ParityError
from onnx_parity.spec.conforms import NUMBER as NUMBER  # json_float's values, worded by the check

# JSON has no Inf/NaN; these strings stand for them in every float field.
_NON_FINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}
_Word = TypeVar("_Word", bound=str)  # one of a Literal's words


class ReportFormatError(ParityError):
    """A JSON report that this version cannot read back; says which field and why."""


# Values may arrive as numpy scalars from the comparison; float()/int() make them JSON's own.
def json_float(x: float) -> float | str:
    if math.isfinite(x):
        return float(x)
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def opt_float(x: float | None) -> float | str | None:
    return None if x is None else json_float(x)


def json_ints(values: tuple[int, ...] | None) -> list[int] | None:
    return None if values is None else [int(v) for v in values]


def free(value: Any) -> Any:
    """A free-form value (environment, details) as JSON: tuples become lists, non-finite floats
    strings, and anything JSON cannot hold its str(), so writing the report never fails."""
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, numbers.Integral):  # numpy registers its integer types here
        return int(value)
    if isinstance(value, numbers.Real):
        return json_float(float(value))
    if isinstance(value, Mapping):
        return {str(k): free(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [free(v) for v in value]
    return str(value)


# -- their JSON Schema: the words report/schema.py and report/records.py write a schema in -------

def or_null(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema`, or null: "null" added to its types (the other keywords ignore a null)."""
    if "enum" in schema:
        return {**schema, "enum": [*schema["enum"], None]}
    types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    return {**schema, "type": [*types, "null"]}


def object_of(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required)}


def list_of(items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": items}


STR = {"type": "string"}
STRS = list_of(STR)
OPT_STR = {"type": ["string", "null"]}
INT = {"type": "integer"}
OPT_INT = {"type": ["integer", "null"]}
COUNT = {"type": "integer", "minimum": 0}
BOOL = {"type": "boolean"}
OBJ = {"type": "object"}
OPT_NUM = or_null(NUMBER)
NUMS = {"type": "object", "additionalProperties": NUMBER}
MS = {"type": "number", "minimum": 0}  # written as measured: finite


class Reader:
    """Typed access to one JSON object, naming the offending field when a value is wrong."""

    def __init__(self, data: Any, where: str) -> None:
        if not isinstance(data, dict):
            raise ReportFormatError(f"{where}: expected an object, found {type(data).__name__}")
        self.data: dict[str, Any] = data
        self.where = where

    def _get(self, key: str, default: Any = ...) -> Any:
        if key in self.data:
            return self.data[key]
        if default is ...:
            raise ReportFormatError(f"{self.where}: missing {key!r}")
        return default

    def _wrong(self, key: str, expected: str) -> ReportFormatError:
        value = self.data.get(key)
        return ReportFormatError(f"{self.where}.{key}: expected {expected}, found {value!r}")

    def text(self, key: str, default: Any = ...) -> str:
        value = self._get(key, default)
        if not isinstance(value, str):
            raise self._wrong(key, "a string")
        return value

    def opt_text(self, key: str) -> str | None:
        value = self._get(key, None)
        if value is not None and not isinstance(value, str):
            raise self._wrong(key, "a string or null")
        return value

    def one_of(self, key: str, words: tuple[_Word, ...], default: Any = ...) -> _Word:
        """A string that must be one of `words` (a Literal's arguments)."""
        return self._word(key, self.text(key, default), words)

    def opt_one_of(self, key: str, words: tuple[_Word, ...]) -> _Word | None:
        value = self.opt_text(key)
        return None if value is None else self._word(key, value, words)

    def _word(self, key: str, value: str, words: tuple[_Word, ...]) -> _Word:
        for word in words:
            if word == value:
                return word
        raise ReportFormatError(f"{self.where}.{key}: {value!r} is not one of {', '.join(words)}")

    def flag(self, key: str, default: Any = ...) -> bool:
        value = self._get(key, default)
        if not isinstance(value, bool):
            raise self._wrong(key, "true or false")
        return value

    def integer(self, key: str, default: Any = ...) -> int:
        value = self._get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._wrong(key, "an integer")
        return value

    def opt_integer(self, key: str) -> int | None:
        value = self._get(key, None)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise self._wrong(key, "an integer or null")
        return value

    def number(self, key: str, default: Any = ...) -> float:
        value = self._get(key, default)
        if isinstance(value, str) and value in _NON_FINITE:
            return _NON_FINITE[value]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self._wrong(key, 'a number or "inf", "-inf", "nan"')
        return float(value)

    def opt_number(self, key: str) -> float | None:
        return None if self._get(key, None) is None else self.number(key)

    def opt_integers(self, key: str) -> tuple[int, ...] | None:
        value = self._get(key, None)
        if value is None:
            return None
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise self._wrong(key, "a list of integers or null")
        return tuple(value)

    def numbers(self, key: str) -> tuple[float, ...]:
        """A list of numbers, "inf" and the like included."""
        value = self._get(key)
        if not isinstance(value, list):
            raise self._wrong(key, "a list of numbers")
        return tuple(Reader({"v": v}, f"{self.where}.{key}").number("v") for v in value)

    def texts(self, key: str) -> tuple[str, ...]:
        value = self._get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self._wrong(key, "a list of strings")
        return tuple(value)

    def mapping(self, key: str) -> dict[str, Any]:
        value = self._get(key, {})
        if not isinstance(value, dict):
            raise self._wrong(key, "an object")
        return value

    def at(self, key: str) -> Reader:
        return Reader(self.mapping(key), f"{self.where}.{key}")

    def objects(self, key: str) -> list[Reader]:
        value = self._get(key, [])
        if not isinstance(value, list):
            raise self._wrong(key, "a list")
        return [Reader(item, f"{self.where}.{key}[{i}]") for i, item in enumerate(value)]
