"""Whether a spec document conforms to its JSON Schema, answered without jsonschema: the
keywords spec_schema() uses, as draft 2020-12 defines them.

jsonschema costs about a tenth of a second to import, more than the rest of reading a spec, and
a spec that conforms needs none of its error messages. So conformance is checked here first;
only a document this check rejects goes to jsonschema (violations.py), which says what is wrong.
The check may only err one way: a document it accepts must be one jsonschema accepts. Whatever
it does not know (a keyword, a Python type that is no JSON value, a `$ref` outside `$defs`) it
rejects, and jsonschema decides.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sized
from typing import Any

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
    from onnx_parity.spec.schema import spec_schema

    return spec_schema()


class _Check:
    def __init__(self, root: Mapping[str, Any]) -> None:
        self.defs: Mapping[str, Any] = root.get("$defs", {})

    def valid(self, instance: Any, schema: Any) -> bool:
        if schema is True or schema is False:
            return schema
        if not isinstance(schema, Mapping) or not isinstance(instance, _JSON_TYPES):
            return False
        for keyword, value in schema.items():
            if keyword in _ANNOTATIONS:
                continue
            if keyword in ("if", "then", "else"):
                if keyword == "if" and not self._condition(instance, schema):
                    return False
                continue
            check = _KEYWORDS.get(keyword)
            if check is None or not check(self, value, instance, schema):
                return False
        return True

    def _condition(self, instance: Any, schema: Mapping[str, Any]) -> bool:
        branch = "then" if self.valid(instance, schema["if"]) else "else"
        return branch not in schema or self.valid(instance, schema[branch])

    def ref(self, value: Any, instance: Any, _: Any) -> bool:
        prefix = "#/$defs/"
        if not isinstance(value, str) or not value.startswith(prefix):
            return False
        name = value[len(prefix):]
        return name in self.defs and self.valid(instance, self.defs[name])

    def properties(self, value: Any, instance: Any, _: Any) -> bool:
        if not isinstance(instance, dict):
            return True
        return all(self.valid(instance[key], sub) for key, sub in value.items()
                   if key in instance)

    def pattern_properties(self, value: Any, instance: Any, _: Any) -> bool:
        if not isinstance(instance, dict):
            return True
        return all(self.valid(item, sub) for pattern, sub in value.items()
                   for key, item in instance.items() if _search(pattern, key))

    def additional_properties(self, value: Any, instance: Any, schema: Any) -> bool:
        if not isinstance(instance, dict):
            return True
        named = schema.get("properties", {})
        patterns = schema.get("patternProperties", {})
        extras = [key for key in instance if key not in named
                  and not any(_search(pattern, key) for pattern in patterns)]
        return all(self.valid(instance[key], value) for key in extras)

    def property_names(self, value: Any, instance: Any, _: Any) -> bool:
        return not isinstance(instance, dict) or all(self.valid(key, value) for key in instance)

    def items(self, value: Any, instance: Any, schema: Any) -> bool:
        if not isinstance(instance, list):
            return True
        return "prefixItems" not in schema and all(self.valid(item, value) for item in instance)

    def any_of(self, value: Any, instance: Any, _: Any) -> bool:
        return any(self.valid(instance, sub) for sub in value)

    def all_of(self, value: Any, instance: Any, _: Any) -> bool:
        return all(self.valid(instance, sub) for sub in value)

    def one_of(self, value: Any, instance: Any, _: Any) -> bool:
        return sum(self.valid(instance, sub) for sub in value) == 1


def _search(pattern: str, key: Any) -> bool:
    return isinstance(key, str) and re.search(pattern, key) is not None


def _is_type(instance: Any, name: str) -> bool:
    if name == "integer":
        return (isinstance(instance, int) and not isinstance(instance, bool)) or (
            isinstance(instance, float) and instance.is_integer())
    if name == "number":
        return isinstance(instance, (int, float)) and not isinstance(instance, bool)
    kinds: dict[str, type | tuple[type, ...]] = {
        "object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}
    return name in kinds and isinstance(instance, kinds[name])


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
    "$ref": _Check.ref,
    "properties": _Check.properties,
    "patternProperties": _Check.pattern_properties,
    "additionalProperties": _Check.additional_properties,
    "propertyNames": _Check.property_names,
    "items": _Check.items,
    "anyOf": _Check.any_of,
    "allOf": _Check.all_of,
    "oneOf": _Check.one_of,
}
