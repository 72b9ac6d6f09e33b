"""One model's artifacts, each made once in a worker and shared by the cases that need it: the
module, the dynamo exporter's program, each opset's export and its check, each reduced-precision
variant, each session, each dataset's samples and the PyTorch reference outputs. A stage that
failed is remembered and raised again for the next case that needs it, not retried: the first
case that meets it says it in full, each later one points to that case.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from onnx_parity.errors import ExportError, LoadError, RunError, StageError
from onnx_parity.run.protocol import WorkerTask

if TYPE_CHECKING:
    from onnx_parity.backends import LoadedModule, OrtTarget
    from onnx_parity.plan.cases import Case
    from onnx_parity.prepare.inputs import Sample
    from onnx_parity.run.record import CaseRecord
    from onnx_parity.spec import DatasetSpec, InputSpec, TargetSpec

logger = logging.getLogger(__name__)

T = TypeVar("T")
Feeds = list[dict[str, np.ndarray]]


@dataclass
class ModelMemo:
    """The cases of one model, in one worker, with what they share."""

    task: WorkerTask
    values: dict[tuple[Any, ...], Any] = field(default_factory=dict)
    export_logs: dict[tuple[int | None, str | None], str] = field(default_factory=dict)
    calibration: dict[str, Feeds] = field(default_factory=dict)  # what calibrated int8
    said: dict[StageError, str] = field(default_factory=dict)  # each failure's first case
    brought: tuple[Any, ...] = ()  # --cache: the modules the model's import brought in
    cached: dict[tuple[Any, ...], str] = field(default_factory=dict)  # --cache: hit or miss

    def get(self, key: tuple[Any, ...], make: Callable[[], T],
            record: CaseRecord | None = None) -> T:
        """The value of `key`, made once; a StageError `make` raised is raised again to every
        case that needs the value."""
        if key not in self.values:
            try:
                self.values[key] = make()
            except StageError as exc:
                self.values[key] = exc
        value = self.values[key]
        if isinstance(value, StageError):
            raise self._told(value, record)
        return value  # type: ignore[no-any-return]

    def _told(self, error: StageError, record: CaseRecord | None) -> StageError:
        """A failure as `record`'s case reads it: in full for the first case that meets it
        (and again for that case), a pointer to that case for every later one, so a long
        message (an exporter's guard, 4,000 characters) is said once per model."""
        original = error.original
        if record is None:
            return original
        first = self.said.setdefault(original, record.case.id)
        return original if first == record.case.id else original.again(first)

    def loaded(self, record: CaseRecord) -> LoadedModule:
        """The module, and how the spec's inputs bind to its forward()."""
        from onnx_parity.backends import import_torch

        if ("module",) not in self.values:
            record.enter("load")
        import_torch(self.task.threads)
        loaded = self.get(("module",), lambda: _load(self), record)
        if loaded.training_layers:
            record.note(
                f"the factory returned a module in training mode, with layers that behave"
                f" differently there ({', '.join(loaded.training_layers)}); it was checked in"
                " eval mode, as the exporters see it: call .eval() where you serve it too"
            )
        if loaded.cast_to:
            record.note(f"the module was cast to {loaded.cast_to}, the dtype of its inputs")
        if loaded.binding.note:
            record.note(loaded.binding.note)
        return loaded

    def float32_path(self, record: CaseRecord) -> Path:
        """The model as shipped or exported, checked."""
        case = record.case
        if self.task.model.onnx is not None:
            path = self.task.model.onnx
        else:
            path = self.get(("export", case.opset, case.exporter),
                            lambda: _cached_export(self, record), record)
            _said_cached(self, record, ("export", case.opset, case.exporter), "export")
        record.enter("check")
        from onnx_parity.prepare.export import check_model

        note = self.get(("check", path), lambda: check_model(path), record)
        if note:
            record.note(note)
        return path

    def onnx_path(self, record: CaseRecord) -> Path:
        """The model this case runs: the float32 one, or its reduced-precision variant, made
        once per opset, exporter and precision (prepare/precision.py)."""
        path = self.float32_path(record)
        if record.case.precision == "fp32":
            return path
        record.enter("export")
        variant = self.get(key := ("precision", path, record.case.precision),
                           lambda: self._convert(record, path), record)
        _said_cached(self, record, key, f"{record.case.precision} variant")
        return variant

    def _convert(self, record: CaseRecord, source: Path) -> Path:
        from onnx_parity.prepare.precision import calibration_feeds, convert

        case = record.case
        feeds: Feeds = []
        if case.precision == "int8" and case.calibration is not None:
            target = self.session(record, source)
            inputs = self.task.model.inputs or target.input_specs()
            record.enter("export")
            batch = case.calibration.batch_sizes[0] if case.calibration.batch_sizes else None
            feeds = calibration_feeds(self.samples_of(case.calibration, batch, inputs,
                                                      record=record))
            self.calibration[case.precision] = feeds
        variant = source.with_name(f"{source.stem}.{case.precision}.onnx")
        if variant.parent != self.task.work_dir:  # a shipped file: its variants go to work
            variant = self.task.work_dir / f"{self.task.model.name}.{case.precision}.onnx"
        _through_cache(self, ("precision", source, case.precision), variant,
                       lambda: convert(source, case.precision, variant, feeds),
                       lambda: _variant_key(source, case.precision, feeds))
        if self.task.artifacts is not None:
            from onnx_parity.explain.artifacts import keep_variant

            keep_variant(self.task.artifacts, self.task.model.name, variant)
        return variant

    def _export(self, record: CaseRecord) -> Path:
        """The case's opset and exporter: the dynamo exporter's from the model's one program
        (prepare/program.py), the TorchScript exporter's traced at this opset."""
        from onnx_parity.backends import import_torch
        from onnx_parity.prepare.export import export_model
        from onnx_parity.prepare.inputs import EXPORT_BATCH, random_array
        from onnx_parity.prepare.program import export_at, trace_program
        from onnx_parity.spec import PREDEFINED_DATASETS

        case, model = record.case, self.task.model
        loaded = self.loaded(record)
        torch = import_torch(self.task.threads)
        record.enter("export")
        opset, exporter = case.opset, case.exporter
        example = [torch.from_numpy(random_array(i, PREDEFINED_DATASETS["random"], EXPORT_BATCH,
                                                 0, _traced(self, case)))
                   for i in model.inputs]
        assert opset is not None and exporter is not None
        path = _export_file(self.task, opset, exporter)
        if model.adapter == "causal-lm":  # its own inputs, outputs and example (run/decoder.py)
            how = _decoder_export(loaded, EXPORT_BATCH)
        else:
            names = model.outputs or _output_names(self, record, loaded, example)
            how = {"module": loaded.module, "example": example, "inputs": model.inputs,
                   "outputs": names, "forward_args": model.forward_args,
                   "by_name": loaded.binding.by_name}
        key = (opset, exporter)
        try:
            if exporter == "dynamo":
                program = self.get(("program", exporter),
                                   lambda: trace_program(opset=opset, path=path, **how), record)
                exported = export_at(program, opset, path, **how)
            else:
                exported = export_model(opset=opset, exporter=exporter, path=path, **how)
        except ExportError as exc:
            self.export_logs[key] = exc.log
            raise
        self.export_logs[key] = exported.log
        logger.debug("%s: exported in %.2fs", case.id, exported.seconds)
        return exported.path

    def session(self, record: CaseRecord, path: Path,
                target: TargetSpec | None = None) -> OrtTarget:
        """The session of `path` on the case's target (or on a variant of it, for a re-run)."""
        from onnx_parity.backends import OrtTarget

        record.enter("run")
        chosen = target or record.case.target
        return self.get(("session", path, chosen.name),
                        lambda: OrtTarget(path, chosen, self.task.threads,
                                          work_dir=self.task.work_dir), record)

    def samples_of(self, dataset: DatasetSpec, batch: int | None, inputs: Sequence[InputSpec],
                   outputs: Sequence[str] = (), output_types: Sequence[str] = (),
                   record: CaseRecord | None = None) -> tuple[Sample, ...]:
        from onnx_parity.prepare.inputs import random_samples, recorded_samples

        def make() -> tuple[Sample, ...]:
            if dataset.kind == "random":
                assert batch is not None
                return random_samples(dataset, batch, inputs, dict(dataset.dims))
            found = recorded_samples(dataset, batch, inputs, outputs, output_types, self.task.cap)
            if not found:
                raise LoadError(f"dataset '{dataset.name}' holds no sample of batch size "
                                f"{batch}")
            return found

        if (record is not None and dataset.dim_lists and self.task.model.onnx is None
                and self.task.model.adapter is None):  # the adapter traces at its own sizes
            _note_sizes(record, dataset, self.values.get(("traced", record.case.opset,
                                                          record.case.exporter)))
        return self.get(("samples", *data_key(dataset, batch)), make, record)

    def reference(self, record: CaseRecord, samples: Sequence[Sample],
                  names: Sequence[str]) -> list[list[Any]]:
        """The reference outputs of each sample, one per name; None for an output left out
        of the comparison that the recorded data does not hold."""
        case, model = record.case, self.task.model
        if model.torch is not None:
            from onnx_parity.backends import torch_outputs

            loaded = self.loaded(record)
            record.enter("run")
            return self.get(("reference", *data_key(case.dataset, case.batch_size)),
                            lambda: [torch_outputs(loaded.module, s.inputs, model.forward_args,
                                                   loaded.binding)
                                     for s in samples], record)
        from onnx_parity.prepare.inputs import recorded_reference

        return [recorded_reference(case.dataset, s, names, model.ignore_outputs)
                for s in samples]


def data_key(dataset: DatasetSpec, batch: int | None) -> tuple[Any, ...]:
    """What makes a case's samples: its dataset, batch size and, where the dataset lists
    several sizes for a dimension, the sizes the case feeds."""
    return (dataset.name, batch, tuple(sorted(dataset.dims.items())))


def _traced(memo: ModelMemo, case: Case) -> dict[str, int]:
    """The sizes an export is traced at, kept for the cases' notes: the first case's to reach
    it (the program's, for the dynamo exporter, whose other opsets are converted from it)."""
    traced = case.dataset.traced_dims()
    if case.exporter == "dynamo":
        traced = memo.get(("traced", case.exporter), lambda: traced)
    memo.values[("traced", case.opset, case.exporter)] = traced
    return traced


def _note_sizes(record: CaseRecord, dataset: DatasetSpec, traced: dict[str, int] | None) -> None:
    """A case of a dataset that lists several sizes says which it feeds and which the export
    was traced at (`traced`: the sizes its export was made with; None: taken from the cache,
    keyed by this dataset's traced sizes)."""
    traced = dataset.traced_dims() if traced is None else traced
    at = _sizes(traced, {name: () for name in dataset.dim_lists if name in traced})
    record.note(f"fed at {_sizes(dataset.dims, dataset.dim_lists)} (the dataset lists several "
                f"sizes; the one export was traced at {at or 'the sizes of another dataset'})")


def _sizes(dims: Mapping[str, int], listed: Mapping[str, Any]) -> str:
    return ", ".join(f"{name} {dims[name]}" for name in listed)


def _export_file(task: WorkerTask, opset: int, exporter: str) -> Path:
    """Where an export lands, made or taken from the cache."""
    return task.work_dir / f"{task.model.name}.opset{opset}.{exporter}.onnx"


def _decoder_export(loaded: LoadedModule, batch: int) -> dict[str, Any]:
    from onnx_parity.run.decoder import export_how

    return export_how(loaded, batch)


def _output_names(memo: ModelMemo, record: CaseRecord, loaded: LoadedModule,
                  example: Sequence[Any]) -> tuple[str, ...]:
    """Outputs returned as a mapping (a Hugging Face ModelOutput) are named by their keys;
    one forward pass finds them, and finds what ONNX cannot hold before the exporter does.
    It runs without gradients, as the reference does: what forward() returns, and how it
    is nested, does not depend on them, and the export after it runs with them."""
    from onnx_parity.backends import forward, output_names

    model = memo.task.model
    record.enter("run")  # PyTorch runs the module: a crash or a hang here is the run's
    args, keywords = loaded.binding.call(
        {i.name: tensor for i, tensor in zip(model.inputs, example, strict=True)})

    def find() -> tuple[str, ...]:
        try:
            return output_names(forward(loaded.module, args,
                                        {**keywords, **model.forward_args}))
        except RunError as exc:
            if "ONNX cannot hold" not in exc.message:
                raise
            raise ExportError(exc.message) from exc  # what the exporter would stumble on

    names = memo.get(("output names",), find, record)
    record.enter("export")
    return names


def _load(memo: ModelMemo) -> LoadedModule:
    """The factory's module; with --cache, what its import brought in is kept for its key; a
    decoder under `adapter: causal-lm` wrapped (run/decoder.py)."""
    from onnx_parity.backends import load_module

    task = memo.task
    if task.cache is None:
        loaded = load_module(task.model, task.spec_root)
    else:
        from onnx_parity.prepare.cachekey import ImportWatch

        with ImportWatch() as watch:
            loaded = load_module(task.model, task.spec_root)
        memo.brought = tuple(watch.brought)
    if task.model.adapter == "causal-lm":
        from onnx_parity.run.decoder import adapted

        return adapted(loaded, task.model)
    return loaded


def _said_cached(memo: ModelMemo, record: CaseRecord, key: tuple[Any, ...], step: str) -> None:
    """The case says whether what it ran came from the cache (--cache)."""
    state = memo.cached.get(key)
    if state is None:
        return
    record.found(cache={**(record.details.cache or {}), step: state})
    if state == "hit":
        record.note(f"{step}: cached")


def _export_key(memo: ModelMemo, record: CaseRecord, loaded: LoadedModule, opset: int,
                exporter: str) -> str | None:
    """The export's key in the cache (prepare/cachekey.py); None without --cache, or for
    a model whose weights go to a side file, which an entry does not hold."""
    from onnx_parity.prepare.cachekey import cacheable, export_key, model_key

    if memo.task.cache is None or not cacheable(loaded.module):
        return None
    model = memo.task.model
    settings = {"torch": model.torch, "args": model.args, "inputs": model.inputs,
                "forward_args": model.forward_args, "outputs": model.outputs,
                "by_name": loaded.binding.by_name, "cast_to": loaded.cast_to,
                "adapter": model.adapter}
    part = memo.get(("cache key",),
                    lambda: model_key(loaded.module, memo.brought, settings, memo.task.spec_root))
    # The sizes the export is traced at, not the ones this case feeds (run/memo.py's _export).
    return export_key(part, opset, exporter, record.case.dataset.traced_dims())


def _cached_export(memo: ModelMemo, record: CaseRecord) -> Path:
    """The case's export, from the cache where it holds it (with --cache): then there is no
    torch.export, no forward pass, the file is the export; else exported, and kept there."""
    case, cache = record.case, memo.task.cache
    opset, exporter = case.opset, case.exporter
    assert opset is not None and exporter is not None
    key = _export_key(memo, record, memo.loaded(record), opset, exporter)
    if key is None or cache is None:
        return memo._export(record)
    record.enter("export")
    path = _export_file(memo.task, opset, exporter)
    entry = cache.load(key, path)
    memo.cached[("export", opset, exporter)] = "miss" if entry is None else "hit"
    if entry is not None:
        memo.export_logs[(opset, exporter)] = entry.log
        return path
    made = memo._export(record)
    cache.store(key, made, memo.export_logs.get((opset, exporter), ""))
    return made


def _variant_key(source: Path, precision: str, feeds: Feeds) -> str:
    from onnx_parity.prepare.cachekey import variant_key

    return variant_key(source, precision, feeds)


def _through_cache(memo: ModelMemo, memo_key: tuple[Any, ...], path: Path,
                   make: Callable[[], Any], key: Callable[[], str]) -> None:
    """`path` made by `make`, or taken from the cache under `key()` (with --cache)."""
    cache = memo.task.cache
    if cache is None:
        make()
        return
    found = key()
    if cache.load(found, path) is not None:
        memo.cached[memo_key] = "hit"
        return
    make()
    memo.cached[memo_key] = "miss"
    cache.store(found, path)
