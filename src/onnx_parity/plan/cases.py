"""Spec → cases with stable, readable ids, in spec order, narrowed to a selection."""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from onnx_parity.frozen import frozen
from onnx_parity.literals import Exporter, Precision, Stage, Status
from onnx_parity.plan.select import EVERYTHING, Selection
from onnx_parity.results import CaseResult, Tolerance
from onnx_parity.spec import DatasetSpec, ModelSpec, Spec, TargetSpec
from onnx_parity.spec.model import DEFAULT_RANDOM_BATCHES
from onnx_parity.spec.tolerance import resolve
from onnx_parity.wording import criteria_text, tolerance_text

DEFAULT_INPUT_BUDGET = 2 << 30  # bytes of inputs per case, generated or recorded (--max-input-mb)


@frozen
class Case:
    """One check: a model at one opset and precision, on one target, with one dataset at one
    batch size.

    `opset` and `exporter` are None for a model given as an ONNX file: it has its own opset.
    `batch_size` is None for recorded data fed as recorded (the spec asked for no batch size).
    `precision` is fp32 for the model as exported (or shipped), else the variant made from it.
    `dataset` holds `dims` at the sizes this case feeds, where the spec's lists several.
    """

    id: str
    model: ModelSpec
    opset: int | None
    exporter: Exporter | None
    target: TargetSpec
    dataset: DatasetSpec
    batch_size: int | None
    plan_error: str | None = None
    precision: Precision = "fp32"
    calibration: DatasetSpec | None = None  # static int8's: the samples that calibrate it
    input_budget: int = DEFAULT_INPUT_BUDGET  # bytes its inputs may take, recorded ones too

    def tolerance_for(self, output: str | None = None) -> Tolerance:
        """The tolerance of one output of this case (None: of any tensor), spec/tolerance.py."""
        rules, target, precision = self.model.tolerances, self.target.name, self.precision
        return _once(("tolerance", target, output, precision), rules,
                     lambda: resolve(rules, target, output, precision))

    def result(self, status: Status, *, stage: Stage | None = None, message: str = "",
               **measured: Any) -> CaseResult:
        """This case's result: who it is from the case, what happened from the caller (the
        flow's verdict, or the scheduler's word on a case that did not run)."""
        return CaseResult(
            id=self.id, model=self.model.name, opset=self.opset, exporter=self.exporter,
            target=self.target.name, dataset=self.dataset.name, batch_size=self.batch_size,
            precision=self.precision, line=self.model.line,
            tolerance_line=self.model.tolerance_line, status=status, stage=stage,
            message=message, settings=self.settings(), **measured,
        )

    def settings(self) -> dict[str, str]:
        """The case's effective settings, each as one line of text, so that a report can say
        which of them changed since the baseline (compare/baseline.py): its tolerance (per
        output, the outputs' own figures say it), precision, target and dataset. A dataset's
        file is named by its name alone: two checkouts of one repository differ in their
        folders, not in their data."""
        target, data = self.target, self.dataset
        return {
            "tolerance": _once(("tolerance text", target.name, self.precision),
                               self.model.tolerances, self._tolerance_text),
            "precision": self.precision,
            "target": _once(("target",), target, lambda: _compact({
                "providers": list(target.providers), "provider_options": target.provider_options,
                "session_options": target.session_options,
                "config_entries": target.config_entries,
                "custom_op_libraries": [p.name for p in target.custom_op_libraries]})),
            "dataset": _once(("dataset",), data, lambda: _compact({
                "kind": data.kind, "seed": data.seed, "samples": data.samples,
                "batch_sizes": list(data.batch_sizes), "distribution": data.distribution,
                "low": data.low, "high": data.high,
                "path": data.path.name if data.path is not None else None,
                "dims": data.dims})),
        }

    def _tolerance_text(self) -> str:
        tolerance = self.tolerance_for()
        elementwise = tolerance_text(tolerance) if tolerance.elementwise else ""
        return "; ".join(t for t in (elementwise, criteria_text(tolerance)) if t)


# What many cases share, made once per value: a model's tolerances resolved for an output on a
# target at a precision (each output's comparison asks), the settings' texts of a target, a
# dataset and a tolerance (every result and every placeholder of a run says them). By the value's
# identity; each entry holds its value, so no id in a key is reused while it is there. A spec
# has few targets and tolerances (datasets, most often, too), and a worker gets new ones with
# each batch: the memo is emptied when it holds MAX_SHARED entries.
_SHARED: dict[tuple[Any, ...], tuple[object, Any]] = {}
MAX_SHARED = 256
T = TypeVar("T")


def _once(kind: tuple[Any, ...], value: object, make: Callable[[], T]) -> T:
    key = (*kind, id(value))
    found = _SHARED.get(key)
    if found is None:
        if len(_SHARED) >= MAX_SHARED:
            _SHARED.clear()
        found = _SHARED[key] = (value, make())
    made: T = found[1]
    return made


def _compact(values: Mapping[str, Any]) -> str:
    """Settings as one line of JSON, keys sorted, the empty ones left out."""
    kept = {k: v for k, v in values.items() if v not in (None, [], {}, ())}
    return json.dumps(kept, sort_keys=True, separators=(", ", ": "), default=str)


def case_id(model: str, opset: int | None, target: str, dataset: str, batch: int | None,
            exporter: Exporter | None = None, precision: Precision = "fp32",
            sizes: Mapping[str, int] | None = None) -> str:
    """`mlp[opset17-cpu-wide-b8]`; the exporter follows the opset when a model lists several
    (`mlp[opset17-torchscript-cpu-wide-b8]`), then a reduced precision
    (`mlp[opset17-int8-cpu-wide-b8]`); the batch size is left out for recorded data fed as
    recorded; the sizes of dimensions the dataset lists several sizes for follow it
    (`mlp[opset17-cpu-wide-b8-seq7-h160]`)."""
    version = f"opset{opset}" if opset is not None else "onnx"
    version += f"-{exporter}" if exporter else ""
    version += f"-{precision}" if precision != "fp32" else ""
    batch_part = f"-b{batch}" if batch is not None else ""
    batch_part += "".join(f"-{name}{size}" for name, size in (sizes or {}).items())
    return f"{model}[{version}-{target}-{dataset}{batch_part}]"



def plan(
    spec: Spec, selection: Selection = EVERYTHING, input_budget: int = DEFAULT_INPUT_BUDGET
) -> tuple[Case, ...]:
    """Every case the spec asks for, in spec order, then keep those `selection` matches.

    A case whose random inputs would exceed `input_budget` bytes ends in error before anything
    is allocated: a typo in a shape must not take the runner down.
    """
    cases: list[Case] = []
    for model in spec.models:
        versions: list[tuple[int | None, Exporter | None]] = (
            [(None, None)] if model.onnx is not None
            else [(opset, exporter) for opset in model.opsets for exporter in model.exporters]
        )
        named = len(model.exporters) > 1 and model.onnx is None
        for (opset, exporter), precision in [(v, p) for v in versions for p in model.precisions]:
            for target_name in model.targets:
                if model.reference is not None and target_name == model.reference.name:
                    continue  # the reference runs beside each other target's case
                target = spec.targets[target_name]
                for dataset_name in model.datasets:
                    for batch, sizes, dataset in _data(spec.datasets[dataset_name]):
                        cases.append(Case(
                            id=case_id(model.name, opset, target.name, dataset.name, batch,
                                       exporter if named else None, precision, sizes),
                            model=model, opset=opset, exporter=exporter, target=target,
                            dataset=dataset, batch_size=batch,
                            plan_error=_too_big(model, dataset, batch, input_budget),
                            precision=precision,
                            calibration=spec.datasets.get(model.calibration or "")
                            if precision == "int8" else None, input_budget=input_budget,
                        ))
    return tuple(c for c in cases if selection.matches(c.id, c.target.name))


def _data(dataset: DatasetSpec) -> list[tuple[int | None, dict[str, int], DatasetSpec]]:
    """Each batch size, and within it each combination of the sizes the dataset lists for
    its named dimensions (in the spec's order), with the dataset as that case feeds it: its
    `dims` at those sizes. A listed dimension's own sizes go in the case id."""
    combinations = [dict(zip(dataset.dim_lists, chosen, strict=True))
                    for chosen in itertools.product(*dataset.dim_lists.values())]
    return [(batch, sizes, dataclasses.replace(dataset, dims={**dataset.dims, **sizes})
             if sizes else dataset)
            for batch in batch_sizes(dataset) for sizes in combinations]


def batch_sizes(dataset: DatasetSpec) -> tuple[int | None, ...]:
    """The batch sizes a dataset yields, from the spec alone; None: recorded data as recorded."""
    if dataset.kind == "random":
        return dataset.batch_sizes or DEFAULT_RANDOM_BATCHES
    return dataset.batch_sizes or (None,)


def _too_big(model: ModelSpec, dataset: DatasetSpec, batch: int | None,
             budget: int) -> str | None:
    if dataset.kind != "random" or not model.inputs:
        return None  # recorded data is as big as it is; nothing is generated
    from onnx_parity.plan.shapes import oversized  # numpy, which a plan of ONNX files never needs

    return oversized(model, dataset, batch, budget)
