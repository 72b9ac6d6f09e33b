"""The machinery every spec check shares (a problem reported at its node, a path resolved
against the spec's folder, numbers JSON Schema lets through, a tolerance layer) and the checks of
the spec's datasets; targets.py checks the targets, resolve.py the models."""

from __future__ import annotations

import math
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from onnx_parity.metrics.registry import METRICS
from onnx_parity.spec.confine import Confinement, RealPaths, confinement
from onnx_parity.spec.model import (
    DATASET_KINDS,
    DEFAULT_DISTRIBUTION,
    DEFAULT_RANDOM_BATCHES,
    DEFAULT_RANDOM_SAMPLES,
    DEFAULT_REGRESSION,
    DEFAULT_SEED,
    DISTRIBUTIONS,
    DatasetSpec,
    Regression,
    ToleranceLayer,
    traced_size,
)
from onnx_parity.spec.values import (
    choice,
    entries,
    integer,
    integers,
    mapping,
    number,
    size_lists,
    sizes,
)
from onnx_parity.spec.violations import describe_path, describe_place, did_you_mean, quoted
from onnx_parity.spec.yamlnodes import LocatedDocument, NodePath, YamlProblem


def regression(defaults: Any, own: Any) -> Regression | None:
    """The model's regression check: its own `regression` over the defaults', key by key;
    `off` (or false) in the nearer place turns it off."""
    settings: dict[str, Any] = {}
    for value in (defaults, own):
        if value is False or value == "off":
            settings = {"off": True}
        elif isinstance(value, Mapping):
            settings = {k: v for k, v in settings.items() if k != "off"} | dict(value)
    if settings.get("off"):
        return None
    factor, latency = number(settings.get("factor")), number(settings.get("latency"))
    return Regression(factor=factor if factor is not None and factor > 1
                      else DEFAULT_REGRESSION.factor,
                      floor=number(settings.get("floor")),
                      latency=latency if latency is not None and latency > 1 else None)


class Checker:
    """Reports problems at their nodes and builds the spec's datasets and tolerance layers from
    schema-checked values (values of the wrong type were reported by the schema
    pass, so the accessors skip them quietly)."""

    def __init__(self, doc: LocatedDocument, path: Path,
                 confined: Confinement | None = None) -> None:
        self.doc = doc
        self.raw: dict[str, Any] = doc.value
        self.path = path
        self.folder = path.parent
        self.confined = confined or confinement(path)
        self.problems: list[YamlProblem] = []
        self.real = RealPaths()  # this reading's own: a folder is resolved once per spec
        self._places: dict[NodePath, str] = {}

    def report(self, path: NodePath, message: str, *, at_key: bool = False) -> None:
        mark = self.doc.key_mark(path) if at_key else self.doc.value_mark(path)
        self.problems.append(YamlProblem(mark.line, mark.column, message))

    def place(self, path: NodePath) -> str:
        # Every check of a model words its place, most of them whether or not they report.
        place = self._places.get(path)
        if place is None:
            place = self._places[path] = describe_place(path, self.raw)[0]
        return place

    def check_numbers(self, value: Any, path: NodePath) -> None:
        """NaN, infinities and huge integers pass JSON Schema's bounds; refuse them here."""
        if len(path) >= 3 and (path[0], path[2]) in (("models", "args"), ("models", "forward_args"),
                                                      ("targets", "provider_options")):
            return  # passed through to user code as they are
        if len(path) == 1 and str(path[0]).startswith("x-"):
            return  # extension keys hold anchors; what they are used for is checked there
        if isinstance(value, dict):
            for key, item in value.items():
                self.check_numbers(item, (*path, key))
        elif isinstance(value, list):
            for index, item in enumerate(value):
                self.check_numbers(item, (*path, index))
        elif isinstance(value, float) and not math.isfinite(value):
            text = self.doc.value_mark(path).text or repr(value)
            self.report(path, f"{describe_path(path, self.raw)}: expected a finite number, "
                              f"got {text}")
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**63:
            digits = len(str(abs(value)))
            self.report(path, f"{describe_path(path, self.raw)}: expected a smaller number, got "
                              f"one with {digits} digits")

    def existing(self, path: NodePath, raw: str, *, folder: bool,
                 what: str | Callable[[], str]) -> Path:
        """`raw` resolved against the spec's folder; reports it unless it is a file (folder)
        inside the repository. `what` may be given as a function: it is worded only for a
        problem."""
        resolved, inside = self.inside(path, raw, what)
        if not inside:
            return resolved  # said: where it leads matters, not whether it is there
        try:  # one stat answers both is_dir() and is_file(); resolving took it already
            mode = self.real.mode(resolved) or resolved.stat().st_mode
            ok = stat.S_ISDIR(mode) if folder else stat.S_ISREG(mode)
            other = stat.S_ISREG(mode) if folder else stat.S_ISDIR(mode)
        except (OSError, RuntimeError, ValueError):  # missing, symlink loops, NUL bytes
            ok = other = False
        if other:
            kind = "a file, not a folder" if folder else "a folder, not a file"
            self.report(path, f"{_worded(what)} {resolved} is {kind}")
        elif not ok:
            self.report(path, f"{_worded(what)} not found: {resolved}")
        return resolved

    def inside(self, path: NodePath, raw: str,
               what: str | Callable[[], str]) -> tuple[Path, bool]:
        """`raw` resolved against the spec's folder, symlinks and `..` too, and whether that
        is inside the repository (confine.py); reported at its node when it is not."""
        try:
            resolved = self.real.resolve(self.folder, raw)
        except (OSError, RuntimeError, ValueError):  # symlink loops, NUL bytes
            return self.folder / raw, True  # the caller finds it is no file
        if self.confined.holds(resolved):
            return resolved, True
        problem = self.confined.problem(_worded(what), resolved)
        if problem is not None:
            self.report(path, problem)
        return resolved, problem is None

    def dataset(self, name: str, entry: dict[str, Any]) -> DatasetSpec:
        base = ("datasets", name)
        kind = choice(entry.get("kind"), DATASET_KINDS, "random")
        path = None
        raw_path = entry.get("path")
        if kind != "random" and isinstance(raw_path, str) and raw_path:
            noun = "onnx-test-data folder" if kind == "onnx-test-data" else "npz file"
            path = self.existing((*base, "path"), raw_path, folder=kind == "onnx-test-data",
                                 what=lambda: f"{self.place(base)}: {noun}")
        distribution = choice(entry.get("distribution"), DISTRIBUTIONS, DEFAULT_DISTRIBUTION)
        low, high = number(entry.get("low")), number(entry.get("high"))
        if kind == "random" and distribution == "normal":
            for key in ("low", "high"):
                if key in entry:
                    self.report((*base, key), f"{self.place(base)}: '{key}' applies only to "
                                f"distribution: uniform, and this dataset is normal",
                                at_key=True)
        elif low is not None and high is not None and low >= high:
            self.report((*base, "high"),
                        f"{self.place(base)}: low ({low:g}) must be below high ({high:g})")
        random = kind == "random"
        samples = integer(entry.get("samples"))
        lists, fixed = size_lists(entry.get("dims")), sizes(entry.get("dims"))
        return DatasetSpec(
            name=name,
            kind=kind,
            seed=integer(entry.get("seed")) or DEFAULT_SEED,
            samples=samples if samples is not None else (
                DEFAULT_RANDOM_SAMPLES if random else None),
            batch_sizes=integers(entry.get("batch_sizes"))
            or (DEFAULT_RANDOM_BATCHES if random else ()),
            distribution=distribution,
            low=low,
            high=high,
            path=path,
            line=self.doc.key_mark(base).line,
            dims={name: traced_size(lists[name]) if name in lists else fixed[name]
                  for name in mapping(entry.get("dims")) if name in lists or name in fixed},
            dim_lists=lists,
        )

    def where(self, path: NodePath) -> str:
        """"model 'm': " for a model's own tolerance, "model 'm': tolerance.targets.cuda: "
        for one nested deeper."""
        place, rest = describe_place(path, self.raw)
        inner = describe_path(path, self.raw) if len(rest) > 1 else place
        return f"{inner}: " if inner else ""

    def layer(self, values: dict[str, Any], path: NodePath | None = None,
               outputs: tuple[str, ...] = ()) -> ToleranceLayer:
        """One place's tolerance keys; its output names are checked against the model's."""
        per_output: dict[str, ToleranceLayer] = {}
        for output, own in entries(values.get("outputs")):
            if path is not None and outputs and output not in outputs:
                self.report((*path, "outputs", output),
                            f"{self.where(path)}tolerance for output "
                            f"{quoted(output)}, which is not among its outputs "
                            f"({', '.join(dict.fromkeys(outputs))})"
                            f"{did_you_mean(output, outputs)}", at_key=True)
            per_output[output] = self.layer(own)
        precisions = {name: self.layer(own, (*path, "precisions", name) if path else None,
                                        outputs)
                      for name, own in entries(values.get("precisions"))}
        return ToleranceLayer(
            atol=number(values.get("atol")), rtol=number(values.get("rtol")),
            metrics={metric.key: setting for metric in METRICS
                     if (setting := metric.read(values.get(metric.key))) is not None},
            outputs=per_output, precisions=precisions)


def _worded(what: str | Callable[[], str]) -> str:
    return what if isinstance(what, str) else what()
