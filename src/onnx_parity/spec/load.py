"""Reading a spec: YAML with marks → schema check → semantic checks and defaults → a Spec."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

from onnx_parity.errors import SpecError, SpecProblem
from onnx_parity.spec.confine import Confinement, confinement
from onnx_parity.spec.conforms import spec_conforms
from onnx_parity.spec.model import Spec
from onnx_parity.spec.resolve import Resolver
from onnx_parity.spec.violations import describe_value, schema_problems
from onnx_parity.spec.yamlnodes import LocatedDocument, UnusableYaml, YamlProblem, load_located


def load_spec(path: str | Path, *, allow_outside_repo: bool = False) -> Spec:
    """Read, check and resolve a spec file; raise SpecError listing every problem found. Its
    paths must lie inside its repository (confine.py) unless `allow_outside_repo`."""
    shown = str(path)
    confined = confinement(Path(path), allow_outside=allow_outside_repo)
    try:
        outside = confined.problem("the spec", Path(path).resolve())
    except (OSError, RuntimeError, ValueError):
        outside = None  # reading it says what is wrong
    if outside is not None:
        raise SpecError([SpecProblem(shown, 1, 1, outside)])
    try:
        data = Path(path).read_bytes()
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise SpecError([SpecProblem(shown, 1, 1, f"cannot read the spec: {reason}")]) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        before = data[: exc.start]
        line, column = before.count(b"\n") + 1, exc.start - before.rfind(b"\n")
        message = f"the spec is not UTF-8 text (byte 0x{data[exc.start]:02x})"
        raise SpecError([SpecProblem(shown, line, column, message)]) from None
    spec = _parse(text, Path(path), shown, confined)
    return dataclasses.replace(spec, sha256=hashlib.sha256(data).hexdigest())


def parse_spec(text: str, path: Path, *, allow_outside_repo: bool = False) -> Spec:
    """Check and resolve spec text as if read from `path` (relative files resolve next to it)."""
    spec = _parse(text, Path(path), str(path),
                  confinement(Path(path), allow_outside=allow_outside_repo))
    return dataclasses.replace(spec, sha256=hashlib.sha256(text.encode("utf-8")).hexdigest())


def _parse(text: str, path: Path, shown: str, confined: Confinement) -> Spec:
    with _collector_paused():
        return _checked(text, path, shown, confined)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cycle collector paused while a spec is read: the nodes and values of a spec of
    thousands of models made it run 280 times, twice over every object, a seventh of the
    reading, to find nothing (they form no cycle; what does is collected afterwards)."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


def _checked(text: str, path: Path, shown: str, confined: Confinement) -> Spec:
    try:
        doc = load_located(text)
    except UnusableYaml as exc:
        raise SpecError(_located(shown, exc.problems)) from None
    if not isinstance(doc.value, dict):
        raise SpecError(_located(shown, [*doc.problems, _not_a_mapping(doc)]))
    # A document that conforms costs no import of jsonschema, which words the problems.
    problems = [*doc.problems, *([] if spec_conforms(doc.value) else schema_problems(doc))]
    resolver = Resolver(doc, Path(os.path.abspath(path)), confined)
    spec = resolver.spec()
    problems += resolver.problems
    if problems:
        raise SpecError(_located(shown, problems))
    return spec


def _located(shown: str, problems: list[YamlProblem]) -> list[SpecProblem]:
    unique = sorted({(p.line, p.column, p.message) for p in problems})
    return [SpecProblem(shown, line, column, message) for line, column, message in unique]


def _not_a_mapping(doc: LocatedDocument) -> YamlProblem:
    mark = doc.value_mark(())
    if doc.value is None:
        return YamlProblem(mark.line, mark.column,
                           "the spec is empty; it needs 'version: 1' and a 'models:' list")
    got = describe_value(doc.value, mark)
    message = f"the spec must be a mapping with 'version: 1' and 'models:', got {got}"
    return YamlProblem(mark.line, mark.column, message)

