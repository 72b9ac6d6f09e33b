"""Semantic checks and defaults over schema-checked YAML values: the frozen Spec."""

from __future__ import annotations

import datetime
import re
import sys
from collections.abc import Mapping
from typing import Any

from onnx_parity.findings import EXPECTED_STATUSES, ExpectationRecord
from onnx_parity.frozen import replaced
from onnx_parity.literals import EXPORTERS, PRECISIONS, Exporter
from onnx_parity.spec.adapter import adapter_of
from onnx_parity.spec.confine import module_problem
from onnx_parity.spec.detections import detections
from onnx_parity.spec.entries import Checker, regression
from onnx_parity.spec.inputs import check_dim_sizes, check_reference_data, inputs_of
from onnx_parity.spec.model import (
    DEFAULT_DATASETS,
    DEFAULT_EXPORTER,
    DEFAULT_OPSETS,
    DEFAULT_PRECISIONS,
    DEFAULT_TARGETS,
    DEFAULT_TIMEOUT,
    PREDEFINED_DATASETS,
    PREDEFINED_TARGETS,
    DatasetSpec,
    ModelSpec,
    Spec,
    TargetSpec,
    ToleranceLayer,
    ToleranceRules,
)
from onnx_parity.spec.rollout import rollout_of
from onnx_parity.spec.schema import TORCH_PATTERN
from onnx_parity.spec.targets import target_of
from onnx_parity.spec.values import (
    choice,
    entries,
    integers,
    items,
    mapping,
    number,
    strings,
)
from onnx_parity.spec.violations import did_you_mean, quoted
from onnx_parity.spec.yamlnodes import NodePath


class Resolver(Checker):
    """Semantic checks and defaults over schema-checked values. Values of the wrong type were
    already reported by the schema pass, so every accessor here skips them quietly; a Spec built
    from such fallbacks is never returned."""

    def spec(self) -> Spec:
        self.check_numbers(self.raw, ())
        targets = dict(PREDEFINED_TARGETS)
        for name, entry in entries(self.raw.get("targets")):
            targets[name] = target_of(self, name, entry)
        datasets = dict(PREDEFINED_DATASETS)
        for name, entry in entries(self.raw.get("datasets")):
            datasets[name] = self.dataset(name, entry)
        defaults = mapping(self.raw.get("defaults"))
        self._check_references(("defaults",), defaults, targets, datasets)
        # Every model's first tolerance layer, the same for all: made once.
        self.defaults_tolerance = self.layer(mapping(defaults.get("tolerance")))
        # The tolerances of every model without one of its own: the spec's layers alone, one
        # value for all such models, so that what is worked out from it once per value (each
        # output's tolerance on a target, its text in every result: plan/cases.py) is worked
        # out once per run, not once per model.
        self.spec_tolerances = ToleranceRules(
            defaults=self.defaults_tolerance,
            targets={name: target.tolerance for name, target in targets.items()})
        models = tuple(
            self._model(index, entry, defaults, targets, datasets)
            for index, entry in enumerate(items(self.raw.get("models")))
            if isinstance(entry, dict)
        )
        self._check_unique_models()
        return Spec(self.path, 1, models, targets, datasets)

    def _check_references(self, base: NodePath, entry: dict[str, Any],
                          targets: Mapping[str, TargetSpec],
                          datasets: Mapping[str, DatasetSpec]) -> None:
        place = self.place(base)
        defined_sets: tuple[tuple[str, Mapping[str, Any]], ...] = (
            ("targets", targets), ("datasets", datasets))
        for key, defined in defined_sets:
            for index, name in enumerate(items(entry.get(key))):
                if isinstance(name, str) and name not in defined:
                    hint = did_you_mean(name, defined) or f"; defined {key}: {', '.join(defined)}"
                    self.report((*base, key, index),
                                f"{place}: undefined {key[:-1]} {quoted(name)}{hint}")

    # -- models -----------------------------------------------------------------------------

    def _model(self, index: int, entry: dict[str, Any], defaults: dict[str, Any],
               targets: Mapping[str, TargetSpec],
               datasets: Mapping[str, DatasetSpec]) -> ModelSpec:
        base = ("models", index)
        self._check_kind(base, entry)
        torch = entry.get("torch") if isinstance(entry.get("torch"), str) else None
        if torch is not None:
            torch_reference(self, base, torch)
        onnx = None
        if isinstance(entry.get("onnx"), str) and entry["onnx"]:
            onnx = self.existing((*base, "onnx"), entry["onnx"], folder=False,
                                  what=f"{self.place(base)}: onnx file")
        self._check_references(base, entry, targets, datasets)

        def setting(key: str) -> Any:
            return entry[key] if key in entry else defaults.get(key)

        dataset_names = strings(setting("datasets")) or DEFAULT_DATASETS
        if "torch" not in entry and "onnx" in entry and "reference" not in entry:
            check_reference_data(self, base, entry, dataset_names, datasets)
        outputs = strings(entry.get("outputs"))
        tolerances = self._tolerances(base, entry, outputs, targets)
        inputs = inputs_of(self, base, mapping(entry.get("inputs")))
        used = [datasets[n] for n in dataset_names if n in datasets]
        check_dim_sizes(self, base, mapping(entry.get("inputs")), used)
        name = entry.get("name")
        return ModelSpec(
            name=name if isinstance(name, str) else f"#{index + 1}",
            line=self.doc.value_mark(base).line,
            tolerance_line=(self.doc.key_mark((*base, "tolerance")).line
                            if "tolerance" in entry else None),
            torch=torch,
            args=dict(mapping(entry.get("args"))),
            forward_args=dict(mapping(entry.get("forward_args"))),
            ignore_outputs=self._named_outputs(base, entry, "ignore_outputs", outputs),
            constant_outputs=self._named_outputs(base, entry, "constant_outputs", outputs),
            onnx=onnx,
            inputs=inputs, outputs=outputs,
            opsets=integers(setting("opsets")) or DEFAULT_OPSETS,
            exporters=self._exporters(base, entry, defaults),
            precisions=tuple(p for p in strings(setting("precisions")) if p in PRECISIONS)
            or DEFAULT_PRECISIONS,
            calibration=self._calibration(base, entry, setting("precisions"), dataset_names,
                                          datasets),
            targets=strings(setting("targets")) or DEFAULT_TARGETS, datasets=dataset_names,
            tolerances=tolerances,
            timeout=number(setting("timeout")) or DEFAULT_TIMEOUT,
            memory_limit=number(setting("memory_limit")),
            regression=regression(defaults.get("regression"), entry.get("regression")),
            adapter=adapter_of(self, base, entry, defaults),
            rollout=rollout_of(self, base, entry, outputs),
            expect=expectations(self, base, entry.get("expect"), name),
            detections=detections(self, base, entry, outputs),
            reference=self._reference(base, entry, targets, setting("targets")),
        )

    def _reference(self, base: NodePath, entry: dict[str, Any],
                   targets: Mapping[str, TargetSpec], listed: Any) -> TargetSpec | None:
        """`reference: <target>`: a defined target, and at least one other to compare."""
        name = entry.get("reference")
        if not isinstance(name, str) or not name:
            return None
        place = self.place(base)
        if name not in targets:
            hint = did_you_mean(name, targets) or f"; defined targets: {', '.join(targets)}"
            self.report((*base, "reference"), f"{place}: reference names undefined target "
                        f"{quoted(name)}{hint}")
            return None
        others = [t for t in strings(listed) or DEFAULT_TARGETS if t != name]
        if not others:
            self.report((*base, "reference"), f"{place}: reference {quoted(name)} is the "
                        "model's only target: list the targets to compare against it in "
                        "'targets'")
        if entry.get("adapter") is not None or entry.get("rollout") is not None:
            self.report((*base, "reference"), f"{place}: a reference target is compared on "
                        "one call per sample; it takes no 'rollout' or 'adapter'")
        return targets[name]

    def _check_kind(self, base: NodePath, entry: dict[str, Any]) -> None:
        """Which of torch/onnx the model has decides which other keys make sense."""
        place = self.place(base)
        has_torch, has_onnx = "torch" in entry, "onnx" in entry
        if not has_torch and not has_onnx:
            self.report(base, f"{place} has neither 'torch' nor 'onnx': give the PyTorch model "
                              "to export ('torch'), an ONNX file ('onnx'), or both")
        if has_torch and not has_onnx and entry.get("inputs", {}) == {}:
            self.report(base, f"{place} is exported from 'torch', and the export needs "
                              "'inputs': the shape and dtype of each forward() argument, e.g. "
                              "inputs: {x: {shape: [batch, 10], dtype: float32}}")
        if has_onnx:
            for key in ("opsets", "exporter", "exporters"):
                if key in entry:
                    self.report((*base, key), f"{place}: '{key}' applies only to models that "
                                "are exported ('torch' without 'onnx'); this model's ONNX file "
                                "is used as it is", at_key=True)
        if not has_torch and "args" in entry:
            self.report((*base, "args"), f"{place}: 'args' are passed to the 'torch' callable, "
                        "but this model has no 'torch'", at_key=True)
        if not has_torch and "forward_args" in entry:
            self.report((*base, "forward_args"), f"{place}: 'forward_args' are passed to the "
                        "PyTorch module's forward(), but this model has no 'torch'", at_key=True)
        if "exporter" in entry and "exporters" in entry:
            self.report((*base, "exporters"), f"{place}: give 'exporter' or 'exporters', not "
                        "both", at_key=True)

    def _exporters(self, base: NodePath, entry: dict[str, Any],
                   defaults: dict[str, Any]) -> tuple[Exporter, ...]:
        """`exporters`, or `exporter` as a list of one; the model's own over the defaults."""
        for source in (entry, defaults):
            if "exporters" in source or "exporter" in source:
                many = tuple(e for e in strings(source.get("exporters")) if e in EXPORTERS)
                one = choice(source.get("exporter"), EXPORTERS, DEFAULT_EXPORTER)
                return many or (one,)
        return (DEFAULT_EXPORTER,)

    def _calibration(self, base: NodePath, entry: dict[str, Any], precisions: Any,
                     dataset_names: tuple[str, ...],
                     datasets: Mapping[str, DatasetSpec]) -> str | None:
        """The dataset that calibrates static int8: the one named, else the model's first."""
        static = "int8" in strings(precisions)
        name = entry.get("calibration")
        if not isinstance(name, str):
            return dataset_names[0] if static and dataset_names else None
        place = self.place(base)
        if not static:
            self.report((*base, "calibration"), f"{place}: 'calibration' applies only to the "
                        "int8 precision (static quantization), which its precisions do not "
                        "list", at_key=True)
        elif name not in datasets:
            hint = did_you_mean(name, datasets) or f"; defined datasets: {', '.join(datasets)}"
            self.report((*base, "calibration"), f"{place}: undefined dataset {quoted(name)}"
                                                f"{hint}")
        return name

    def _named_outputs(self, base: NodePath, entry: dict[str, Any], key: str,
                       outputs: tuple[str, ...]) -> tuple[str, ...]:
        """ignore_outputs or constant_outputs: names among the model's `outputs`, where given
        (else they are checked against what the model returns, when it runs)."""
        named = strings(entry.get(key))
        for index, name in enumerate(named):
            if outputs and name not in outputs:
                self.report((*base, key, index),
                            f"{self.place(base)}: {key} names {quoted(name)}, which is "
                            f"not among its outputs ({', '.join(outputs)})"
                            f"{did_you_mean(name, outputs)}")
        return named

    def _tolerances(self, base: NodePath, entry: dict[str, Any], outputs: tuple[str, ...],
                    targets: Mapping[str, TargetSpec]) -> ToleranceRules:
        """The layers spec/tolerance.py resolves per case; names checked where they are."""
        own = mapping(entry.get("tolerance"))
        if not own:
            return self.spec_tolerances
        model_targets: dict[str, ToleranceLayer] = {}
        for name, values in entries(own.get("targets")):
            path = (*base, "tolerance", "targets", name)
            if name not in targets:
                hint = did_you_mean(name, targets) or f"; defined targets: {', '.join(targets)}"
                self.report(path, f"{self.place(base)}: tolerance for undefined target "
                                  f"{quoted(name)}{hint}", at_key=True)
            model_targets[name] = self.layer(values, path, outputs)
        return replaced(self.spec_tolerances, model=self.layer(own, (*base, "tolerance"), outputs),
                        model_targets=model_targets)

    def _check_unique_models(self) -> None:
        first: dict[str, int] = {}
        for index, entry in enumerate(items(self.raw.get("models"))):
            name = entry.get("name") if isinstance(entry, dict) else None
            if not isinstance(name, str):
                continue
            path = ("models", index, "name")
            if name in first:
                self.report(path, f"duplicate model name {quoted(name)} (first on line "
                                  f"{first[name]})")
            else:
                first[name] = self.doc.value_mark(path).line


def torch_reference(checker: Checker, base: NodePath, torch: str) -> None:
    """A file of the repository, or a module of it or of an installed package: never the
    standard library (`os:system` with `args` would run a shell), found as the worker will
    find it (the spec's folder first)."""
    if re.match(TORCH_PATTERN, torch) is None:
        return  # the schema pass said what is wrong with it
    module = torch.split(":", 1)[0]
    if module.endswith(".py"):
        checker.existing((*base, "torch"), module, folder=False,
                         what=f"{checker.place(base)}: torch file")
        return
    problem = module_problem(module, [str(checker.path.parent), *sys.path], checker.confined)
    if problem is not None:
        checker.report((*base, "torch"), f"{checker.place(base)}: torch: {problem}")


def expectations(checker: Checker, base: NodePath, value: Any, name: Any,
                 ) -> tuple[ExpectationRecord, ...]:
    """`expect`: one mapping or a list of them, each with a real date in `until`."""
    listed = isinstance(value, list)
    found = []
    for index, entry in enumerate(value if listed else [value] if value else []):
        if not isinstance(entry, dict):
            continue
        path = (*base, "expect", *((index,) if listed else ()))
        until = entry.get("until") if isinstance(entry.get("until"), str) else None
        if until is not None:
            try:
                datetime.date.fromisoformat(until)
            except ValueError:
                checker.report((*path, "until"), f"{checker.place(base)}: expect.until "
                       f"{quoted(until)} is not a date: write YYYY-MM-DD")
        if entry.get("stage") is not None and entry.get("status") != "error":
            checker.report((*path, "stage"), f"{checker.place(base)}: expect.stage is where an "
                           "error happens: it goes with `status: error`")
        found.append(ExpectationRecord(
            model=name if isinstance(name, str) else "",
            status=choice(entry.get("status"), EXPECTED_STATUSES, "failed"),
            reason=str(entry.get("reason")), cases=str(entry.get("cases", "*")),
            until=until, line=checker.doc.value_mark(path).line,
            stage=entry["stage"] if isinstance(entry.get("stage"), str) else None))
    return tuple(found)
