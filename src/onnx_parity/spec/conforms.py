"""The one JSON Schema check of this package, written without jsonschema: whether a value
conforms to a schema (the spec's pre-check), and where a value first breaks a schema, in words
(every JSON report read back: report/untrusted.py).

Why not jsonschema everywhere: importing it costs about a tenth of a second, more than the rest
of reading a spec, and the ONNX-only golden check must stay near a bare script's time; a spec
that conforms needs none of its messages. And on a report of thousands of cases it takes about
ten times as long as the located walk here. So jsonschema is left to word a spec's problems
(spec/violations.py), and the tests check both answers here against it, on the example specs
and on thousands of mutated specs and reports.

`conforms` knows the keywords spec_schema() uses, as draft 2020-12 defines them, and may only
err one way: a document it accepts must be one jsonschema accepts. Whatever it does not know (a
keyword, a Python type that is no JSON value, a `$ref` outside `$defs`) it rejects, and
jsonschema decides. `violation` knows the few keywords report_schema() uses (type, enum,
pattern, minimum, exclusiveMinimum, minItems, maxItems, items, required, properties,
additionalProperties), checked in one pass over json.loads's own types.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sized
from typing import Any

from onnx_parity.escape import visible
from onnx_parity.spec.schema import spec_schema

# Keywords that never reject a document (annotations, and the definitions themselves).
_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$comment",
                          "$schema", "$defs", "deprecated", "readOnly", "writeOnly"})
_JSON_TYPES = (dict, list, str, bool, int, float, type(None))


def conforms(instance: Any, schema: Mapping[str, Any]) -> bool:
    """True only where jsonschema's Draft202012Validator(schema) finds no error."""
    return _Check(schema).valid(instance, schema)


def spec_conforms(instance: Any) -> bool:
    """Whether a spec document conforms to spec_schema() (True only where jsonschema agrees)."""
    return conforms(instance, _spec_schema())


@functools.lru_cache(maxsize=1)
def _spec_schema() -> dict[str, Any]:
    return spec_schema()


Predicate = Callable[[Any], bool]


class _Check:
    """Each schema compiled once into a predicate: a spec of a thousand models checks the same
    few schemas tens of thousands of times. The keywords read most (types, properties, $ref,
    items, if) compile to their own closures; the rest call their check in _KEYWORDS."""

    def __init__(self, root: Mapping[str, Any]) -> None:
        self.defs: Mapping[str, Any] = root.get("$defs", {})
        self.compiled: dict[int, tuple[Any, Predicate]] = {}  # by id, the schema kept alive

    def valid(self, instance: Any, schema: Any) -> bool:
        return self.predicate(schema)(instance)

    def predicate(self, schema: Any) -> Predicate:
        if schema is True or schema is False:
            return _ANY if schema else _NONE
        known = self.compiled.get(id(schema))
        if known is None:
            known = self.compiled[id(schema)] = (schema, self._compile(schema))
        return known[1]

    def _compile(self, schema: Any) -> Predicate:
        """A schema's keywords, in its order: annotations and `then`/`else` (read by `if`) left
        out; a keyword this module does not know, or a schema that is no mapping, rejects."""
        if not isinstance(schema, Mapping):
            return _NONE
        checks: list[Predicate] = []
        for keyword, value in schema.items():
            if keyword in _ANNOTATIONS or keyword in ("then", "else"):
                continue
            compiler = _COMPILERS.get(keyword)
            found = compiler(self, value, schema) if compiler is not None else None
            checks.append(found or self._keyword(keyword, value, schema))

        def conforming(instance: Any) -> bool:
            if not isinstance(instance, _JSON_TYPES):
                return False
            for check in checks:  # noqa: SIM110 - all() would build a generator per value
                if not check(instance):
                    return False
            return True

        return conforming

    def _keyword(self, keyword: str, value: Any, schema: Any) -> Predicate:
        check = _KEYWORDS.get(keyword)
        if check is None:
            return _NONE
        return lambda instance: check(self, value, instance, schema)

    def ref(self, value: Any, _: Any) -> Predicate | None:
        prefix = "#/$defs/"
        if not isinstance(value, str) or not value.startswith(prefix):
            return _NONE
        name = value[len(prefix):]
        if name not in self.defs:
            return _NONE
        # Compiled when first used: a definition may refer to itself.
        return lambda instance: self.predicate(self.defs[name])(instance)

    def types(self, value: Any, _: Any) -> Predicate | None:
        names = value if isinstance(value, list) else [value]
        if not all(isinstance(name, str) and name in _KINDS for name in names):
            return None  # integer and number: _is_type's rules
        kinds = tuple(_KINDS[name] for name in names)
        return lambda instance: isinstance(instance, kinds)

    def properties(self, value: Any, _: Any) -> Predicate | None:
        if not isinstance(value, Mapping):
            return None
        named = [(key, self.predicate(sub)) for key, sub in value.items()]

        def check(instance: Any) -> bool:
            if not isinstance(instance, dict):
                return True
            return all(test(instance[key]) for key, test in named if key in instance)

        return check

    def additional_properties(self, value: Any, schema: Any) -> Predicate | None:
        named = schema.get("properties", {})
        patterns = schema.get("patternProperties", {})
        test = self.predicate(value)

        def check(instance: Any) -> bool:
            if not isinstance(instance, dict):
                return True
            extras = [key for key in instance if key not in named
                      and not any(_search(pattern, key) for pattern in patterns)]
            return all(test(instance[key]) for key in extras)

        return check

    def property_names(self, value: Any, _: Any) -> Predicate | None:
        test = self.predicate(value)
        return lambda instance: not isinstance(instance, dict) or all(map(test, instance))

    def items(self, value: Any, schema: Any) -> Predicate | None:
        if "prefixItems" in schema:
            return lambda instance: not isinstance(instance, list)
        test = self.predicate(value)
        return lambda instance: not isinstance(instance, list) or all(map(test, instance))

    def all_of(self, value: Any, _: Any) -> Predicate | None:
        if not isinstance(value, list):
            return None
        tests = [self.predicate(sub) for sub in value]
        return lambda instance: all(test(instance) for test in tests)

    def condition(self, value: Any, schema: Any) -> Predicate | None:
        test = self.predicate(value)
        then = self.predicate(schema["then"]) if "then" in schema else _ANY
        otherwise = self.predicate(schema["else"]) if "else" in schema else _ANY
        return lambda instance: then(instance) if test(instance) else otherwise(instance)

    def any_of(self, value: Any, instance: Any, _: Any) -> bool:
        return any(self.valid(instance, sub) for sub in value)

    def one_of(self, value: Any, instance: Any, _: Any) -> bool:
        return sum(self.valid(instance, sub) for sub in value) == 1

    def pattern_properties(self, value: Any, instance: Any, _: Any) -> bool:
        if not isinstance(instance, dict):
            return True
        return all(self.valid(item, sub) for pattern, sub in value.items()
                   for key, item in instance.items() if _search(pattern, key))


def _any(_: Any) -> bool:
    return True


def _none(_: Any) -> bool:
    return False


_ANY: Predicate = _any
_NONE: Predicate = _none


def _search(pattern: str, key: Any) -> bool:
    return isinstance(key, str) and re.search(pattern, key) is not None


def _is_type(instance: Any, name: str) -> bool:
    if name == "integer":
        return (isinstance(instance, int) and not isinstance(instance, bool)) or (
            isinstance(instance, float) and instance.is_integer())
    if name == "number":
        return isinstance(instance, (int, float)) and not isinstance(instance, bool)
    return name in _KINDS and isinstance(instance, _KINDS[name])


_KINDS: dict[str, type] = {
    "object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def _number(instance: Any) -> bool:
    return isinstance(instance, (int, float)) and not isinstance(instance, bool)


def _equal(one: Any, two: Any) -> bool:
    """jsonschema's equality: True is not 1, 1 is 1.0, containers compared item by item."""
    if isinstance(one, str) or isinstance(two, str):
        return bool(one == two)
    if isinstance(one, list) and isinstance(two, list):
        return len(one) == len(two) and all(map(_equal, one, two))
    if isinstance(one, dict) and isinstance(two, dict):
        return one.keys() == two.keys() and all(_equal(one[k], two[k]) for k in one)
    if isinstance(one, bool) or isinstance(two, bool):
        return type(one) is type(two) and one == two
    return bool(one == two)


def _unique(items: list[Any]) -> bool:
    return all(not _equal(items[i], items[j])
               for i in range(len(items)) for j in range(i + 1, len(items)))


def _type(_c: _Check, value: Any, instance: Any, _s: Any) -> bool:
    names = value if isinstance(value, list) else [value]
    return any(_is_type(instance, name) for name in names)


def _bound(test: Callable[[Any, Any], bool]) -> Callable[[_Check, Any, Any, Any], bool]:
    return lambda _c, value, instance, _s: not _number(instance) or test(instance, value)


def _length(kind: type[Sized], test: Callable[[int, Any], bool]) -> Callable[..., bool]:
    return lambda _c, value, instance, _s: not isinstance(instance, kind) or test(
        len(instance), value)


_KEYWORDS: dict[str, Callable[[_Check, Any, Any, Any], bool]] = {
    "type": _type,
    "enum": lambda _c, value, instance, _s: any(_equal(instance, each) for each in value),
    "const": lambda _c, value, instance, _s: _equal(instance, value),
    "minimum": _bound(lambda x, v: x >= v),
    "maximum": _bound(lambda x, v: x <= v),
    "exclusiveMinimum": _bound(lambda x, v: x > v),
    "exclusiveMaximum": _bound(lambda x, v: x < v),
    "minLength": _length(str, lambda n, v: n >= v),
    "maxLength": _length(str, lambda n, v: n <= v),
    "minItems": _length(list, lambda n, v: n >= v),
    "maxItems": _length(list, lambda n, v: n <= v),
    "minProperties": _length(dict, lambda n, v: n >= v),
    "maxProperties": _length(dict, lambda n, v: n <= v),
    "uniqueItems": lambda _c, value, instance, _s: (
        not value or not isinstance(instance, list) or _unique(instance)),
    "pattern": lambda _c, value, instance, _s: (
        not isinstance(instance, str) or re.search(value, instance) is not None),
    "required": lambda _c, value, instance, _s: (
        not isinstance(instance, dict) or all(key in instance for key in value)),
    "anyOf": _Check.any_of,
    "oneOf": _Check.one_of,
    "patternProperties": _Check.pattern_properties,
}

# The keywords compiled to closures of their own; where one returns None (a schema this module
# would only misread), the keyword's check in _KEYWORDS runs as it is.
_COMPILERS: dict[str, Callable[[_Check, Any, Any], Predicate | None]] = {
    "$ref": _Check.ref,
    "type": _Check.types,
    "properties": _Check.properties,
    "additionalProperties": _Check.additional_properties,
    "propertyNames": _Check.property_names,
    "items": _Check.items,
    "allOf": _Check.all_of,
    "if": _Check.condition,
}


# -- where a value first breaks a schema, in words ------------------------------------------------

# JSON has no Inf/NaN: these strings stand for them in every float field of a report. (A pattern
# applies to strings only; written without anyOf, which costs jsonschema a pass per branch.)
NUMBER = {"type": ["number", "string"], "pattern": "^(inf|-inf|nan)$"}

Place = tuple[str | int, ...]


def violation(value: Any, schema: Mapping[str, Any]) -> tuple[Place, str] | None:
    """Where `value` first breaks `schema` (of the keywords report_schema() uses), and what is
    wrong there in words; None when it follows it. Depth-first, in document order."""
    return _first(value, schema, ())


def _first(value: Any, schema: Mapping[str, Any], place: Place) -> tuple[Place, str] | None:
    kinds = schema.get("type")
    if kinds is not None and not _is(value, kinds):
        return place, f"expected {_expected(schema)}, found {_shown(value)}"
    if "enum" in schema and not any(_equal(value, word) for word in schema["enum"]):
        words = [word for word in schema["enum"] if word is not None]
        null = " (or null)" if None in schema["enum"] else ""
        return place, f"{_shown(value)} is not one of {', '.join(map(str, words))}{null}"
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        return place, f"expected {_expected(schema)}, found {_shown(value)}"
    if type(value) in (int, float):
        if "minimum" in schema and value < schema["minimum"]:
            return place, f"{_shown(value)} is less than {schema['minimum']}"
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            return place, f"{_shown(value)} is not more than {schema['exclusiveMinimum']}"
    if isinstance(value, list):
        return _first_in_list(value, schema, place)
    if isinstance(value, dict):
        return _first_in_object(value, schema, place)
    return None


def _first_in_list(value: list[Any], schema: Mapping[str, Any],
                   place: Place) -> tuple[Place, str] | None:
    if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", len(value)):
        return place, f"expected {schema.get('minItems', 0)} to {schema.get('maxItems', 'any')} "\
                      f"items, found {len(value)}"
    items = schema.get("items")
    if items is None:
        return None
    for index, item in enumerate(value):
        found = _first(item, items, (*place, index))
        if found is not None:
            return found
    return None


def _first_in_object(value: dict[str, Any], schema: Mapping[str, Any],
                     place: Place) -> tuple[Place, str] | None:
    missing = next((key for key in schema.get("required", ()) if key not in value), None)
    if missing is not None:
        return place, f"missing {missing!r}"
    properties, others = schema.get("properties", {}), schema.get("additionalProperties")
    for key, item in value.items():
        part = properties.get(key, others)
        found = _first(item, part, (*place, key)) if part is not None else None
        if found is not None:
            return found
    return None


def _is(value: Any, kinds: str | list[str] | tuple[str, ...]) -> bool:
    """Whether `value` is of one of JSON Schema's `kinds`: a bool is no number, and 1.0 is an
    integer. (Read by type, not by isinstance: this runs for every value of a report.)"""
    kind = _KIND_OF.get(type(value))
    kinds = (kinds,) if isinstance(kinds, str) else kinds
    if kind is None:
        return False
    if kind in kinds:
        return True
    if kind == "integer":
        return "number" in kinds
    return kind == "number" and "integer" in kinds and float(value).is_integer()


# json.loads makes exactly these types.
_KIND_OF: dict[type, str] = {dict: "object", list: "array", str: "string", bool: "boolean",
                             type(None): "null", int: "integer", float: "number"}

_WORDS = {"string": "a string", "integer": "an integer", "number": "a number",
          "boolean": "true or false", "object": "an object", "array": "a list", "null": "null"}


def _expected(schema: Mapping[str, Any]) -> str:
    """What a part of the schema takes, in words: "an integer or null"."""
    kinds = schema.get("type", "value")
    listed = kinds if isinstance(kinds, list) else [kinds]
    if schema.get("pattern") == NUMBER["pattern"]:
        return " or ".join(['a number or "inf", "-inf", "nan"', *(
            "null" for kind in listed if kind == "null")])
    items = schema.get("items", {}).get("type")
    if kinds == "array" and isinstance(items, str) and items in _WORDS:
        return f"a list of {_WORDS[items].split(' ', 1)[1]}s"
    return " or ".join(_WORDS.get(kind, f"a {kind}") for kind in listed)


def _shown(value: Any) -> str:
    return visible(repr(value)[:60])
