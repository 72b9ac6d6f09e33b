"""Outputs that are not one tensor: sequences, maps and sequences of maps (scikit-learn's ZipMap
`output_probability`), compared element by element.

Both sides are flattened into their leaves, each with its path (`[1][2]` for the probability
of class 2 in the second row). The structure must match exactly: lengths, and the keys of every
map. The leaves are then one flat tensor per sample, which outputs.py compares with the
output's tolerance, naming the worst element by its path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from onnx_parity.compare.sentences import parting_words
from onnx_parity.frozen import frozen

Leaves = list[tuple[str, Any]]


def is_structured(value: Any) -> bool:
    return isinstance(value, list | tuple | Mapping) or value is None


def leaves(value: Any, path: str = "") -> Leaves:
    """(path, array) for every tensor or number in a nested sequence / map value."""
    if isinstance(value, Mapping):
        found: Leaves = []
        for key in sorted(value, key=lambda k: (str(type(k)), k)):
            found.extend(leaves(value[key], f"{path}[{key!r}]"))
        return found
    if isinstance(value, list | tuple):
        return [leaf for i, item in enumerate(value) for leaf in leaves(item, f"{path}[{i}]")]
    return [(path, np.asarray(value))]


Flat = list[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]


@frozen
class Parting:
    """Where two structures part: in `sample`, at `path` ("" at the top), each side holding
    what `holds` quotes (wording.parting_words)."""

    sample: int
    path: str
    holds: tuple[str, str]


def flatten_pairs(pairs: Sequence[tuple[Any, Any]]) -> tuple[Flat, list[list[str]]] | Parting:
    """Each sample's (expected, actual) as two flat arrays of their leaves, and the leaves'
    paths; or, where the structures differ, the first place where they part."""
    flat: Flat = []
    paths: list[list[str]] = []
    for sample, (recorded, ran) in enumerate(pairs):
        expected, actual = as_text(recorded), as_text(ran)
        if expected is None or actual is None:  # even both: a missing value is not compared
            return Parting(sample, "", parting_words("node", _kind(expected), _kind(actual)))
        difference = _difference(expected, actual)
        if difference is not None:
            return Parting(sample, *difference)
        ours, theirs = leaves(expected), leaves(actual)
        kinds = {array.dtype.kind for _, array in ours + theirs}
        common = object if kinds & set("OUS") else np.float64
        flat.append((_array(ours, common), _array(theirs, common)))
        paths.append([path for path, _ in ours])
    return flat, paths


def as_text(value: Any) -> Any:
    """The value with every byte string as text: recorded data (an ONNX MapProto, numpy's
    'S' arrays) keeps string keys and values as bytes where ONNX Runtime gives str, and
    b'setosa' and 'setosa' are the same label."""
    if isinstance(value, Mapping):
        return {_decoded(key): as_text(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [as_text(item) for item in value]
    if isinstance(value, bytes):
        return _decoded(value)
    if isinstance(value, np.ndarray) and value.dtype.kind in "OS" and value.size and any(
            isinstance(v, bytes) for v in value.flat):
        return np.array([_decoded(v) for v in value.flat], dtype=object).reshape(value.shape)
    return value


def _decoded(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _array(found: Leaves, dtype: Any) -> np.ndarray[Any, Any]:
    values = [v for _, array in found for v in np.ravel(array).tolist()]
    return np.array(values, dtype=dtype)


def _difference(expected: Any, actual: Any, path: str = "") -> tuple[str, tuple[str, str]] | None:
    """The first place where two structures part and what each holds there; None when they
    agree."""
    kinds = (_kind(expected), _kind(actual))
    if kinds[0] != kinds[1]:
        return path, parting_words("node", *kinds)
    if kinds[0] == "map":
        mine = sorted(expected, key=lambda k: (str(type(k)), k))
        yours = sorted(actual, key=lambda k: (str(type(k)), k))
        if mine != yours:
            return path, parting_words("keys", mine, yours)
        return next((found for key in mine
                     if (found := _difference(expected[key], actual[key], f"{path}[{key!r}]"))),
                    None)
    if kinds[0] == "sequence":
        if len(expected) != len(actual):
            return path, parting_words("length", len(expected), len(actual))
        return next((found for i, (e, a) in enumerate(zip(expected, actual, strict=True))
                     if (found := _difference(e, a, f"{path}[{i}]"))), None)
    if np.shape(expected) != np.shape(actual):
        return path, parting_words("shape", np.shape(expected), np.shape(actual))
    return None


def _kind(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, Mapping):
        return "map"
    if isinstance(value, list | tuple):
        return "sequence"
    return "tensor"
