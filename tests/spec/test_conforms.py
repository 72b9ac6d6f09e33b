"""The schema check without jsonschema (spec/conforms.py) answers as jsonschema does, on the
example specs and on thousands of documents made wrong from them one value at a time."""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator
from typing import Any

from jsonschema import Draft202012Validator

from helpers import EXAMPLES
from onnx_parity.spec import spec_schema
from onnx_parity.spec.conforms import conforms
from onnx_parity.spec.yamlnodes import load_located

# What a value is replaced by: every JSON type, values at and past common bounds, names that
# break patterns, and duplicates for uniqueItems.
REPLACEMENTS: tuple[Any, ...] = (None, True, False, 0, 1, -1, 1.0, 0.5, -0.5, 2.5, 1e9, "",
                                 "x", "has space", "cpu", "fp16", [], [1], ["a", "a"], [1, True],
                                 {}, {"zz": 1}, {"name": "n"})


def _places(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _places(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _places(item, (*path, index))


def _mutants(doc: Any, rng: random.Random) -> Iterator[Any]:
    places = [path for path in _places(doc) if path]
    for path in rng.sample(places, min(len(places), 40)):
        for how in rng.sample(range(len(REPLACEMENTS) + 2), 2):
            mutant = copy.deepcopy(doc)
            parent = mutant
            for step in path[:-1]:
                parent = parent[step]
            if how == len(REPLACEMENTS):
                del parent[path[-1]]
            elif how == len(REPLACEMENTS) + 1:
                if isinstance(parent, dict):
                    parent["zz_unknown"] = 1
                else:
                    parent.append(copy.deepcopy(parent[path[-1]]))  # a duplicate item
            else:
                parent[path[-1]] = copy.deepcopy(REPLACEMENTS[how])
            yield mutant


def test_it_agrees_with_jsonschema_on_the_examples_and_their_mutants() -> None:
    schema = spec_schema()
    validator = Draft202012Validator(schema)
    rng = random.Random(34)
    checked = accepted = 0
    for path in sorted(EXAMPLES.glob("*.yaml")):
        doc = load_located(path.read_text()).value
        assert conforms(doc, schema), path  # the fast path: no jsonschema for a good spec
        assert validator.is_valid(doc)
        for mutant in _mutants(doc, rng):
            expected = validator.is_valid(mutant)
            assert conforms(mutant, schema) == expected, (path, mutant)
            checked += 1
            accepted += expected
    assert checked > 300 and 0 < accepted < checked  # both answers were exercised


def test_what_it_does_not_know_goes_to_jsonschema() -> None:
    # An unknown keyword, a $ref outside $defs, a value that is no JSON value: rejected here,
    # so jsonschema decides (violations.py).
    assert not conforms(1, {"format": "date"})
    assert not conforms(1, {"$ref": "other.json#/x"})
    assert not conforms({"a": object()}, {"properties": {"a": {}}})
    assert not conforms([1, True], {"prefixItems": [{}], "items": {}})
    assert conforms([1, True], {"uniqueItems": True})  # True is not 1, as in jsonschema
    assert not conforms([1, 1.0], {"uniqueItems": True})
    assert conforms(2.0, {"type": "integer", "if": {"minimum": 3}, "then": False})


def test_each_compiled_keyword_agrees_with_jsonschema() -> None:
    # Compiled once per schema: a definition that refers to itself, `if` without a branch,
    # types that are and are not plain classes, `items` beside `prefixItems`, names checked.
    tree = {"$defs": {"node": {"type": "object", "additionalProperties": False,
                               "properties": {"value": {"type": ["integer", "null"]},
                                              "kids": {"type": "array",
                                                       "items": {"$ref": "#/$defs/node"}}}}},
            "$ref": "#/$defs/node"}
    cases: list[tuple[Any, dict[str, Any]]] = [
        ({"value": 1, "kids": [{"value": 2.0, "kids": []}, {"value": None}]}, tree),
        ({"value": 1, "kids": [{"value": 2.5}]}, tree),
        ({"kids": [{"other": 1}]}, tree),
        (3, {"if": {"minimum": 2}}),
        (1, {"if": {"minimum": 2}, "else": {"type": "string"}}),
        ([1, "a"], {"items": {"type": "integer"}, "prefixItems": [{}]}),
        ({"a-b": 1}, {"propertyNames": {"pattern": "^[a-z]+$"}}),
        ({"ab": 1}, {"propertyNames": {"pattern": "^[a-z]+$"}}),
        (True, {"type": ["number", "boolean"]}),
        (True, {"type": "integer"}),
        ({"a": 1, "x-b": {}}, {"additionalProperties": False, "properties": {"a": {}},
                               "patternProperties": {"^x-": {"type": "object"}}}),
        ({"a": 1}, {"allOf": [{"required": ["a"]}, {"properties": {"a": {"const": 1}}}]}),
    ]
    for instance, schema in cases:
        assert conforms(instance, schema) == Draft202012Validator(schema).is_valid(instance), (
            instance, schema)
    assert not conforms({"a": 1}, {"$ref": "#/$defs/missing"})  # jsonschema raises: it says
