"""How the schema's violations read to a person: located, in words, with did-you-mean."""

from __future__ import annotations

import difflib
import functools
import json
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from onnx_parity.escape import visible
from onnx_parity.spec.model import RESERVED_SESSION_OPTIONS
from onnx_parity.spec.schema import (
    DATASET_KEYS,
    DIM_PATTERN,
    NAME_PATTERN,
    OP_PATTERN,
    TORCH_PATTERN,
    spec_schema,
)
from onnx_parity.spec.yamlnodes import LocatedDocument, Mark, NodePath, YamlProblem

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import ValidationError

# How a value that fails a pattern is described, and why the pattern exists.
_PATTERN_NOUNS: dict[str, tuple[str, str]] = {
    NAME_PATTERN: ("a name", "names"),
    DIM_PATTERN: ("a dimension name", "dimension names"),
    TORCH_PATTERN: ("'path/to/file.py:callable' or 'package.module:callable'", "references"),
    OP_PATTERN: ("an ONNX op type such as Shape", "ONNX op types such as Shape"),
}
_NAME_RULE = (
    "use letters, digits, '_', '.' and '-', not starting with '.' or '-', because names end up "
    "in case ids such as mlp[opset17-cpu-wide-b8]"
)
_TYPE_NOUNS: dict[str, tuple[str, str]] = {
    "integer": ("an integer", "integers"),
    "number": ("a number", "numbers"),
    "string": ("a string", "strings"),
    "boolean": ("a boolean", "booleans"),
    "object": ("a mapping", "mappings"),
    "array": ("a list", "lists"),
    "null": ("nothing", "nothing"),
}


def did_you_mean(word: str, options: Iterable[str], cutoff: float = 0.6) -> str:
    """'; did you mean 'x'?' for the closest option (ignoring case), or ''."""
    by_lower = {option.lower(): option for option in options}
    match = difflib.get_close_matches(word.lower(), list(by_lower), n=1, cutoff=cutoff)
    return f"; did you mean '{by_lower[match[0]]}'?" if match else ""


def quoted(value: Any, limit: int = 60) -> str:
    """User text in a message, quoted, with newlines and control characters shown escaped."""
    text = visible(str(value))
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return "'" + text + "'"


def describe_place(path: NodePath, root: Any) -> tuple[str, NodePath]:
    """The entity a path belongs to, e.g. "model 'mlp'", and the path inside it."""
    if len(path) >= 2 and path[0] == "models" and isinstance(path[1], int):
        model = f"model {_model_label(root, path[1])}"
        if len(path) >= 4 and path[2] == "inputs":
            return f"input {quoted(path[3])} of {model}", path[4:]
        return model, path[2:]
    if len(path) >= 2 and path[0] in ("targets", "datasets"):
        return f"{str(path[0])[:-1]} {quoted(path[1])}", path[2:]
    if path and path[0] == "defaults":
        return "defaults", path[1:]
    return "", path


def _model_label(root: Any, index: int) -> str:
    models = root.get("models") if isinstance(root, dict) else None
    if isinstance(models, list) and 0 <= index < len(models):
        entry = models[index]
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            return quoted(entry["name"])
    return f"#{index + 1}"


def describe_path(path: NodePath, root: Any) -> str:
    """A path in words for message prefixes: "model 'mlp': tolerance.atol"."""
    place, rest = describe_place(path, root)
    return ": ".join(part for part in (place, _field(rest)) if part)


def _field(rest: NodePath) -> str:
    text = ""
    for part in rest:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def describe(schema: Mapping[str, Any], plural: bool = False) -> str:
    """What a schema accepts, in words: 'a non-empty list of integers from 7 to 25'."""
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        schema = {**_definitions()[ref.rsplit("/", 1)[1]], **schema}
    if "anyOf" in schema:
        return " or ".join(describe(option, plural) for option in schema["anyOf"])
    if "enum" in schema:
        return "one of " + ", ".join(quoted(v) for v in schema["enum"])
    if "const" in schema:
        const = schema["const"]
        return str(const).lower() if isinstance(const, bool) else quoted(const)
    if schema.get("pattern") in _PATTERN_NOUNS:
        return _PATTERN_NOUNS[schema["pattern"]][plural]
    types = schema.get("type", "string")
    kind = next((t for t in types if t != "null"), "null") if isinstance(types, list) else types
    noun = _TYPE_NOUNS.get(kind, (kind, kind))[plural]
    if kind == "array" and "items" in schema:
        non_empty = "non-empty " if schema.get("minItems", 0) >= 1 else ""
        article = "" if plural else "a "
        noun = f"{article}{non_empty}list{'s' if plural else ''} of "
        items = schema["items"]
        noun += describe(items, plural=True) if isinstance(items, Mapping) else "values"
    if kind == "integer" and schema.get("minimum") == 1 and "maximum" not in schema:
        return "positive integers" if plural else "a positive integer"
    if kind == "number" and schema.get("exclusiveMinimum") == 0:
        return "positive numbers" if plural else "a positive number"
    if kind in ("integer", "number"):
        noun += _bounds(schema)
    if kind == "string" and schema.get("minLength", 0) >= 1:
        noun = "non-empty " + noun if plural else "a non-empty string"
    return str(noun)


def _bounds(schema: Mapping[str, Any]) -> str:
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None and high is not None:
        return f" from {low} to {high}"
    if low is not None:
        return f" >= {low}"
    if schema.get("exclusiveMinimum") is not None:
        return f" > {schema['exclusiveMinimum']}"
    return ""


def _show(value: Any) -> str:
    return quoted(value) if isinstance(value, str) else repr(value)


def describe_value(value: Any, mark: Mark | None = None) -> str:
    """A value as the user wrote it, with its YAML type: "a string 'eighteen'"."""
    if value is None:
        return "an empty value"
    if isinstance(value, bool):
        text = mark.text if mark is not None and mark.text else str(value).lower()
        hint = "" if text.lower() in ("true", "false") else f" (quote it if you meant '{text}')"
        return f"a boolean {text}{hint}"
    if isinstance(value, int):
        return f"an integer {value}"
    if isinstance(value, float):
        return f"a number {value!r}"
    if isinstance(value, str):
        return f"a string {quoted(value)}" if value else "an empty string"
    if isinstance(value, list):
        return "an empty list" if not value else "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


@functools.lru_cache(maxsize=1)
def _definitions() -> dict[str, Any]:
    definitions: dict[str, Any] = spec_schema()["$defs"]
    return definitions


@functools.lru_cache(maxsize=1)
def _validator() -> Draft202012Validator:
    # jsonschema costs ~0.1 s to import; only loading a spec pays for it.
    from jsonschema import Draft202012Validator

    return Draft202012Validator(spec_schema())


def schema_problems(doc: LocatedDocument) -> list[YamlProblem]:
    """Every violation of spec_schema() in the document, located and worded for a person."""
    errors = [inner for error in _validator().iter_errors(doc.value) for inner in _within(error)]
    typed = {tuple(e.absolute_path) for e in errors if e.validator == "type"}
    problems: list[YamlProblem] = []
    for error in errors:
        path: NodePath = tuple(error.absolute_path)
        # A wrong type says it all; enum, pattern or range errors on the same value are noise.
        if error.validator != "type" and path in typed:
            continue
        problems.extend(_explain(error, path, doc))
    return problems


def _within(error: ValidationError) -> list[ValidationError]:
    """A value that fails every option of an anyOf but has the type of just one of them
    (`regression: {factor: 0.5}`, `x: [0, 8]`) is wrong inside that option: its errors say
    what, not "no option fits"."""
    if error.validator != "anyOf" or not error.context \
            or not isinstance(error.instance, dict | list):
        return [error]  # a scalar's options read best together: "an integer or a name"
    by_option: dict[Any, list[ValidationError]] = {}
    for inner in error.context:
        by_option.setdefault(inner.relative_schema_path[0], []).append(inner)
    depth = len(error.absolute_path)
    fitting = [errors for errors in by_option.values()
               if not any(e.validator in ("type", "const") and len(e.absolute_path) == depth
                          for e in errors)]
    if len(fitting) != 1:
        return [error]
    return [e for inner in fitting[0] for e in _within(inner)]


def _explain(error: ValidationError, path: NodePath, doc: LocatedDocument) -> list[YamlProblem]:
    place, rest = describe_place(path, doc.value)
    if "propertyNames" in error.relative_schema_path:
        return _explain_key(error, path, doc)
    if error.validator == "additionalProperties":
        return _unknown_keys(error, path, doc)
    if error.validator == "required":
        mark = doc.value_mark(path)
        required = error.validator_value if isinstance(error.validator_value, list) else []
        return [
            YamlProblem(mark.line, mark.column, _missing_key(key, place, rest))
            for key in required
            if isinstance(error.instance, dict) and key not in error.instance
        ]
    mark = doc.value_mark(path)
    if error.validator == "uniqueItems":
        return _duplicate_items(error, path, doc)
    item = bool(rest) and isinstance(rest[-1], int)
    label = ": ".join(p for p in (place, _field(rest[:-1] if item else rest)) if p)
    message = _value_message(error, mark, item, rest)
    return [YamlProblem(mark.line, mark.column, f"{label}: {message}" if label else message)]


# Keys that take one value, whose plural takes several: the list a user writes under the one.
_PLURALS = {"exporter": "exporters"}


def _value_message(error: ValidationError, mark: Mark, item: bool, rest: NodePath) -> str:
    schema, value = error.schema, error.instance
    if not isinstance(schema, Mapping):  # pragma: no cover - only boolean schemas are not
        return error.message
    if rest == ("version",):
        return f"unsupported spec version {_show(value)}; this onnx-parity reads version 1"
    got = describe_value(value, mark)
    if error.validator == "enum" and isinstance(value, str):
        options = [str(v) for v in schema["enum"]]
        return f"expected {describe(schema)}, got {quoted(value)}{did_you_mean(value, options)}"
    if error.validator in ("minimum", "maximum", "exclusiveMinimum", "minLength", "pattern"):
        got = repr(value) if isinstance(value, (int, float)) else quoted(value)
        if schema.get("pattern") == NAME_PATTERN:
            return f"{quoted(value)} is not a valid name: {_NAME_RULE}"
    if error.validator == "minItems":
        return f"expected {describe(schema)}, got an empty list"
    if error.validator in _KNOWN_VALUE_VALIDATORS:
        if isinstance(value, list) and rest and rest[-1] in _PLURALS:
            key = str(rest[-1])
            return (f"expected {describe(schema)}, got a list; for several, write "
                    f"{_PLURALS[key]}: [{', '.join(map(str, value))}] instead of {key}")
        if item:
            index = int(rest[-1])
            return (
                f"expected a list of {describe(schema, plural=True)}, but item {index + 1} is {got}"
            )
        return f"expected {describe(schema)}, got {got}"
    return error.message


_KNOWN_VALUE_VALIDATORS = frozenset(
    {
        "type",
        "enum",
        "const",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "minLength",
        "pattern",
        "anyOf",
    }
)


def _missing_key(key: str, place: str, rest: NodePath) -> str:
    where = " of ".join(p for p in (_field(rest), place) if p)
    hint = (
        {
            "version": " (add 'version: 1' at the top)",
            "models": " (list the models to check under 'models:')",
        }.get(key, "")
        if not where
        else ""
    )
    return f"missing required key '{key}'" + (f" in {where}" if where else "") + hint


def _unknown_keys(
    error: ValidationError, path: NodePath, doc: LocatedDocument
) -> list[YamlProblem]:
    schema, instance = error.schema, error.instance
    if not isinstance(instance, dict) or not isinstance(schema, Mapping):
        return []  # pragma: no cover - additionalProperties only fails on mappings
    allowed = list(schema.get("properties", {}))
    kind = instance.get("kind")
    if "kind" in allowed and isinstance(kind, str) and kind in DATASET_KEYS:
        allowed = list(DATASET_KEYS[kind])
    place, rest = describe_place(path, doc.value)
    where = " of ".join(p for p in (_field(rest), place) if p)
    where = f"in {where}" if where else "at the top level"
    problems = []
    for key in instance:
        patterns = schema.get("patternProperties", {})
        if key in schema.get("properties", {}) or any(re.search(p, key) for p in patterns):
            continue
        hint = did_you_mean(key, allowed) or f"; expected one of: {', '.join(allowed)}"
        message = f"unknown key {quoted(key)} {where}{hint}"
        if path and path[-1] == "session_options" and key in RESERVED_SESSION_OPTIONS:
            # A real SessionOptions attribute, but one onnx-parity sets itself.
            message = (f"{quoted(key)} {where} is not a target's to set: "
                       f"{RESERVED_SESSION_OPTIONS[key]}")
        mark = doc.key_mark((*path, key))
        problems.append(YamlProblem(mark.line, mark.column, message))
    return problems


def _explain_key(error: ValidationError, path: NodePath, doc: LocatedDocument) -> list[YamlProblem]:
    key = error.instance
    mark = doc.key_mark((*path, str(key)))
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    if error.validator == "enum" and path and path[-1] == "precisions":
        options = [str(v) for v in schema.get("enum", ())]
        message = (f"{describe_path(path, doc.value)}: {quoted(key)} is not a reduced precision;"
                   f" use one of {', '.join(options)} (fp32 cases use the tolerance around it)"
                   f"{did_you_mean(str(key), options)}")
        return [YamlProblem(mark.line, mark.column, message)]
    if error.validator == "enum":
        # A dataset key that exists, but not for this kind; unknown keys are reported elsewhere.
        known = {k for keys in DATASET_KEYS.values() for k in keys}
        if key not in known:
            return []
        dataset = doc.value_at(path)
        kind = dataset.get("kind") if isinstance(dataset, dict) else None
        place, _ = describe_place(path, doc.value)
        message = (
            f"key {quoted(key)} does not apply to {place}, which is of kind "
            f"{quoted(kind)} (its keys: {', '.join(str(k) for k in schema['enum'])})"
        )
        return [YamlProblem(mark.line, mark.column, message)]
    if schema.get("pattern") == DIM_PATTERN:
        message = (
            f"{quoted(key)} is not a dimension name: use letters, digits and '_', not "
            "starting with a digit"
        )
        return [YamlProblem(mark.line, mark.column, f"{describe_path(path, doc.value)}: {message}")]
    noun = {"targets": "target", "datasets": "dataset", "inputs": "input", "outputs": "output"}.get(
        str(path[-1]) if path else "", ""
    )
    label = f"{noun} name" if noun else "name"
    return [
        YamlProblem(
            mark.line, mark.column, f"{label} {quoted(key)} is not a valid name: {_NAME_RULE}"
        )
    ]


def _duplicate_items(
    error: ValidationError, path: NodePath, doc: LocatedDocument
) -> list[YamlProblem]:
    items = error.instance if isinstance(error.instance, list) else []
    label = describe_path(path, doc.value)
    first: dict[Any, int] = {}
    problems = []
    for index, item in enumerate(items):
        key = _identity(item)
        if key not in first:
            first[key] = index
            continue
        mark = doc.value_mark((*path, index))
        message = f"{label}: {_show(item)} is listed twice (first as item {first[key] + 1})"
        problems.append(YamlProblem(mark.line, mark.column, message))
    return problems


def _identity(item: Any) -> Any:
    """Equal for items jsonschema's uniqueItems calls equal: 1 and 1.0, but not True and 1."""
    if isinstance(item, (list, dict)):
        return ("json", json.dumps(item, sort_keys=True, default=str))
    return (isinstance(item, bool), item)
