"""Located YAML: safe parsing into plain values that remember the line and column of every entry.

PyYAML's `safe_load` throws away where each value came from, expands aliases without limit and
reads `1e-5` as a string. Here the node tree is composed with a SafeLoader, checked (alias
expansion bound, recursion), and then turned into dicts, lists and scalars by hand so that every
key and value keeps its 1-based line and column.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from onnx_parity.frozen import frozen

NodePath = tuple[str | int, ...]

MAX_NODES = 100_000  # after alias expansion; a real spec has a few hundred
MAX_DEPTH = 64  # a real spec nests about 6 levels; deeper data would only strain recursion

_TAG = "tag:yaml.org,2002:"
STR_TAG, SEQ_TAG, MAP_TAG, MERGE_TAG = _TAG + "str", _TAG + "seq", _TAG + "map", _TAG + "merge"
NULL_TAG, BOOL_TAG, INT_TAG, FLOAT_TAG = _TAG + "null", _TAG + "bool", _TAG + "int", _TAG + "float"

# YAML 1.1's float needs a dot and a signed exponent; YAML 1.2 (and every user) also writes
# `1e-5`, `5e-3` and `1.0e5`. Timestamps and the `=` value tag are dropped so that `2024-01-01`
# or `=` stay text instead of becoming dates or failing to construct.
_FLOAT_RE = re.compile(
    r"""^(?:[-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+
    |[-+]?\.[0-9][0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)
_KEPT_TAGS = (NULL_TAG, BOOL_TAG, INT_TAG, MERGE_TAG)


class _Loader(yaml.SafeLoader):
    """SafeLoader whose implicit scalar types are null, bool, int and YAML 1.2 floats."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag in _KEPT_TAGS]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
for _first in "-+0123456789.":
    _Loader.yaml_implicit_resolvers.setdefault(_first, []).insert(0, (FLOAT_TAG, _FLOAT_RE))

_FastLoader: type[Any] | None = None
if getattr(yaml, "__with_libyaml__", False):

    class _CLoader(yaml.CSafeLoader):
        """The same resolvers over libyaml's parser: a spec of thousands of models parses
        in a fraction of the time. Its errors are reported by the Python loader's words."""

    _CLoader.yaml_implicit_resolvers = _Loader.yaml_implicit_resolvers
    _FastLoader = _CLoader

_CONSTRUCTOR = SafeConstructor()
_SCALAR_KINDS = {NULL_TAG: "null", BOOL_TAG: "boolean", INT_TAG: "integer", FLOAT_TAG: "float"}


@frozen
class Mark:
    """Where a key or value starts (1-based); `text` is a scalar's source text, e.g. `on`."""

    line: int
    column: int
    text: str | None = None


@frozen
class YamlProblem:
    """A located problem before the file name is attached."""

    line: int
    column: int
    message: str


class UnusableYaml(Exception):
    """The text cannot be turned into values at all (syntax, alias bomb, recursion)."""

    def __init__(self, problems: list[YamlProblem]) -> None:
        super().__init__("; ".join(p.message for p in problems))
        self.problems = problems


# A Mark's fields, as a tuple: a spec of thousands of models has tens of thousands of values,
# and only the few that a check reports or numbers need a Mark.
Where = tuple[int, int, str | None]


@dataclass
class LocatedDocument:
    """Plain values plus where every value and every mapping key starts, by path."""

    value: Any
    values: dict[NodePath, Where] = field(default_factory=dict)
    keys: dict[NodePath, Where] = field(default_factory=dict)
    problems: list[YamlProblem] = field(default_factory=list)

    def value_mark(self, path: NodePath) -> Mark:
        """The mark of the value at `path`, or of its nearest ancestor that has one."""
        for end in range(len(path), -1, -1):
            where = self.values.get(path[:end])
            if where is not None:
                return Mark(*where)
        return Mark(1, 1)

    def key_mark(self, path: NodePath) -> Mark:
        """The mark of the key that holds `path`, falling back to its value."""
        where = self.keys.get(path)
        return Mark(*where) if where is not None else self.value_mark(path)

    def value_at(self, path: NodePath) -> Any:
        """The value at `path`, or None where the path leads nowhere."""
        value = self.value
        for part in path:
            if isinstance(value, dict) and isinstance(part, str):
                value = value.get(part)
            elif isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value):
                value = value[part]
            else:
                return None
        return value


def load_located(text: str) -> LocatedDocument:
    """Parse one YAML document; raise UnusableYaml when there is nothing to check.

    An empty document gives a LocatedDocument whose value is None. Problems that still leave
    values to check (duplicate keys, non-text keys, unknown tags) are in `.problems`.
    """
    try:
        root = _compose(text)
        if root is None:
            return LocatedDocument(value=None)
        _check_expansion(root)
        builder = _Builder()
        value = builder.build(root, ())
    except RecursionError:
        # The composer and the builder recurse once per nesting level.
        message = f"the YAML is nested more than {MAX_DEPTH} levels deep"
        raise UnusableYaml([YamlProblem(1, 1, message)]) from None
    return LocatedDocument(value, builder.values, builder.keys, builder.problems)


def _compose(text: str) -> Node | None:
    if _FastLoader is not None:
        try:
            yaml.reader.Reader(text)  # the Python reader's rule for control characters
            fast = _FastLoader(text)
            try:
                found: Node | None = fast.get_single_node()
                return found
            finally:
                fast.dispose()
        except yaml.YAMLError:
            pass  # parsed again below, for the Python loader's located, worded problem
    loader = None
    try:
        loader = _Loader(text)  # the reader rejects control characters right here
        node: Node | None = loader.get_single_node()
        return node
    except yaml.MarkedYAMLError as exc:
        raise UnusableYaml([_syntax_problem(exc)]) from None
    except yaml.reader.ReaderError as exc:
        line, column = _position(text, exc.position)
        reason = f"character U+{exc.character:04X} is not allowed in YAML"
        raise UnusableYaml([YamlProblem(line, column, f"invalid YAML: {reason}")]) from None
    except yaml.YAMLError as exc:
        raise UnusableYaml([YamlProblem(1, 1, f"invalid YAML: {exc}")]) from None
    finally:
        if loader is not None:
            loader.dispose()


def _syntax_problem(exc: yaml.MarkedYAMLError) -> YamlProblem:
    """PyYAML splits its messages into a context ('while parsing a flow node') and a problem."""
    mark = exc.problem_mark or exc.context_mark
    message = "invalid YAML: "
    if exc.context:
        message += exc.context
        if exc.context_mark is not None:
            message += f" (line {exc.context_mark.line + 1})"
        message += ", " if exc.problem else ""
    message += exc.problem or ("" if exc.context else "cannot parse")
    if "'\\t'" in message:
        message += " (YAML indents with spaces, not tabs)"
    if mark is None:
        return YamlProblem(1, 1, message)
    return YamlProblem(mark.line + 1, mark.column + 1, message)


def _position(text: str, index: int) -> tuple[int, int]:
    before = text[:index]
    return before.count("\n") + 1, index - (before.rfind("\n") + 1) + 1


def _where(node: Node) -> Where:
    start = node.start_mark
    return start.line + 1, start.column + 1, node.value if isinstance(node, ScalarNode) else None


def _mark(node: Node) -> Mark:
    return Mark(*_where(node))


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _check_expansion(root: Node) -> None:
    """Refuse recursive aliases, documents that expand past MAX_NODES and very deep nesting.

    Sizes and heights are computed per node, once, so aliases are measured without expanding.
    """
    if _within_bounds(root):
        return
    sizes: dict[int, int] = {}
    heights: dict[int, int] = {}
    active: set[int] = set()

    def measure(node: Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise _refuse(node, "recursive alias: this anchored value contains an alias to itself")
        active.add(key)
        total, height = 1, 0
        for child in _children(node):
            total += measure(child)
            height = max(height, heights.get(id(child), 0))
            if total > MAX_NODES:
                break
        active.discard(key)
        sizes[key] = min(total, MAX_NODES + 1)
        heights[key] = height + 1
        return sizes[key]

    if measure(root) > MAX_NODES:
        # Point at the innermost value that alone is too big: the anchor being multiplied.
        node = root
        while bigger := [c for c in _children(node) if sizes.get(id(c), 0) > MAX_NODES]:
            node = bigger[0]
        raise _refuse(
            node,
            f"this value expands to more than {MAX_NODES} YAML nodes through aliases; "
            "refusing to expand it",
        )
    if heights[id(root)] > MAX_DEPTH:
        node = root
        for _ in range(MAX_DEPTH):
            node = max(_children(node), key=lambda c: heights.get(id(c), 0))
        raise _refuse(node, f"the YAML is nested more than {MAX_DEPTH} levels deep here")


def _within_bounds(root: Node) -> bool:
    """Whether walking the nodes, aliases expanded, ends within MAX_NODES and MAX_DEPTH: then
    _check_expansion has nothing to refuse. A spec without aliases is a tree that this walk
    counts at a fraction of the cost of measuring it; any walk that grows past a bound (a
    bomb, a recursive alias, deep nesting) stops there, for the measure to locate why."""
    count, stack = 1, [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            return False
        if isinstance(node, SequenceNode):
            children = node.value
        elif isinstance(node, MappingNode):
            children = [part for pair in node.value for part in pair]
        else:
            continue
        count += len(children)
        if count > MAX_NODES:
            return False
        stack.extend([(child, depth + 1) for child in children])
    return True


def _refuse(node: Node, message: str) -> UnusableYaml:
    mark = _mark(node)
    return UnusableYaml([YamlProblem(mark.line, mark.column, message)])


_Pair = tuple[Node, Node, bool]  # key node, value node, whether it came from a `<<` merge


class _Builder:
    """Turns a checked node tree into plain values, recording marks and soft problems."""

    def __init__(self) -> None:
        self.values: dict[NodePath, Where] = {}
        self.keys: dict[NodePath, Where] = {}
        self.problems: list[YamlProblem] = []

    def report(self, node: Node, message: str) -> None:
        mark = _mark(node)
        self.problems.append(YamlProblem(mark.line, mark.column, message))

    def build(self, node: Node, path: NodePath) -> Any:
        self.values[path] = _where(node)
        if isinstance(node, ScalarNode):
            return self._scalar(node)
        if isinstance(node, SequenceNode):
            if node.tag != SEQ_TAG:
                self.report(node, f"unsupported YAML tag '{node.tag}'; use a plain list")
            return [self.build(child, (*path, i)) for i, child in enumerate(node.value)]
        if not isinstance(node, MappingNode):  # pragma: no cover - the composer makes no others
            raise TypeError(f"unexpected YAML node {node!r}")
        if node.tag != MAP_TAG:
            self.report(node, f"unsupported YAML tag '{node.tag}'; use a plain mapping")
        return self._mapping(node, path)

    def _scalar(self, node: ScalarNode) -> Any:
        if node.tag in (STR_TAG, MERGE_TAG):
            return node.value
        kind = _SCALAR_KINDS.get(node.tag)
        if kind is None:
            self.report(node, f"unsupported YAML tag '{node.tag}'")
            return node.value
        try:
            if node.tag == NULL_TAG:
                return None
            if node.tag == BOOL_TAG:
                return _CONSTRUCTOR.construct_yaml_bool(node)
            if node.tag == INT_TAG:
                return _CONSTRUCTOR.construct_yaml_int(node)
            return _CONSTRUCTOR.construct_yaml_float(node)
        except (ArithmeticError, LookupError, ValueError, TypeError):
            # Only reachable through explicit tags such as `!!int abc`.
            self.report(node, f"'{node.value}' is not a valid YAML {kind}")
            return node.value

    def _key(self, node: Node) -> str | None:
        """A key's text; a key YAML reads as another type is reported, then kept as written."""
        if isinstance(node, ScalarNode) and node.tag == STR_TAG:
            return str(node.value)
        if isinstance(node, ScalarNode):
            kind = _SCALAR_KINDS.get(node.tag, "tagged value")
            self.report(
                node,
                f"a key must be text, but YAML reads {node.value!r} as a {kind}; "
                f"quote it: '{node.value}'",
            )
            return str(node.value)
        self.report(node, "a key must be text, not a list or a mapping")
        return None

    def _pairs(self, node: MappingNode) -> list[_Pair]:
        pairs: list[_Pair] = []
        for key_node, value_node in node.value:
            if key_node.tag != MERGE_TAG:
                pairs.append((key_node, value_node, False))
                continue
            sources = value_node.value if isinstance(value_node, SequenceNode) else [value_node]
            for source in sources:
                if isinstance(source, MappingNode):
                    pairs.extend((k, v, True) for k, v, _ in self._pairs(source))
                else:
                    self.report(source, "a '<<' merge takes a mapping or a list of mappings")
        return pairs

    def _mapping(self, node: MappingNode, path: NodePath) -> dict[str, Any]:
        pairs = self._pairs(node)
        explicit = {
            k.value
            for k, _, merged in pairs
            if not merged and isinstance(k, ScalarNode) and k.tag == STR_TAG
        }
        result: dict[str, Any] = {}
        for key_node, value_node, merged in pairs:
            if merged and isinstance(key_node, ScalarNode) and key_node.value in explicit:
                continue  # an explicit key overrides what a merge brings in
            key = self._key(key_node)
            if key is None:
                continue
            if key in result:
                if not merged:
                    first = self.keys[(*path, key)][0]
                    self.report(key_node, f"duplicate key '{key}' (first on line {first})")
                continue  # within merges the first source wins
            self.keys[(*path, key)] = _where(key_node)
            result[key] = self.build(value_node, (*path, key))
        return result
