"""A model's files made once in a worker, through its memo: the factory's module, each opset's
export (from the export cache where it holds it, --cache), its check by the ONNX checker, and
each reduced-precision variant.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from onnx_parity.errors import ExportError, RunError
from onnx_parity.prepare.export import check_model, export_model
from onnx_parity.prepare.inputs import EXPORT_BATCH, random_array, recorded_dims
from onnx_parity.run.adapters import adapter_for
from onnx_parity.run.adapters.base import OwnExport
from onnx_parity.run.keys import (
    CheckKey,
    ExportKey,
    Key,
    KeyPart,
    ModelKeyPart,
    ModuleKey,
    OutputNamesKey,
    ProgramKey,
    TracedKey,
    VariantKey,
)
from onnx_parity.run.memo import CalibrationFeeds, ModelMemo
from onnx_parity.run.protocol import WorkerTask
from onnx_parity.run.sessions import Wanted, samples_of, session
from onnx_parity.spec import PREDEFINED_DATASETS

if TYPE_CHECKING:
    from onnx_parity.backends import LoadedModule
    from onnx_parity.literals import Exporter, Precision
    from onnx_parity.plan.cases import Case
    from onnx_parity.run.record import CaseRecord

logger = logging.getLogger(__name__)


def loaded(memo: ModelMemo, record: CaseRecord) -> LoadedModule:
    """The module, and how the spec's inputs bind to its forward()."""
    module = load_module(memo, record)
    say_module(record, module)
    return module


def load_module(memo: ModelMemo, record: CaseRecord) -> LoadedModule:
    """The module, loaded once per model; the case says what it found (say_module)."""
    # the PyTorch reference's module: only a torch model
    from onnx_parity.backends import import_torch

    found = memo.files.peek(ModuleKey())
    if found is not None:  # one look for every case after the first
        return found
    if not memo.files.has(ModuleKey()):
        record.enter("load")
    import_torch(memo.task.threads)
    return memo.files.value(ModuleKey(), lambda: _load(memo), record.case.id)


def say_module(record: CaseRecord, module: LoadedModule) -> None:
    """What each case of a module says of it: a layer left in training mode, a cast, a binding."""
    if module.training_layers:
        record.note(f"the factory returned a module in training mode, with layers that behave"
                    f" differently there ({', '.join(module.training_layers)}); it was checked"
                    " in eval mode, as the exporters see it: call .eval() where you serve it too")
    if module.cast_to:
        record.note(f"the module was cast to {module.cast_to}, the dtype of its inputs")
    if module.binding.note:
        record.note(module.binding.note)


def float32_path(memo: ModelMemo, record: CaseRecord) -> tuple[Path, str]:
    """The model as shipped or exported, checked, and the checker's note on it ("": none)."""
    case = record.case
    if memo.task.model.onnx is not None:
        path = memo.task.model.onnx
    else:
        key = ExportKey(case.opset, case.exporter)
        path = memo.files.value(key, lambda: _cached_export(memo, record), record.case.id)
        said_cached(memo, record, key, "export")
    record.enter("check")

    note = memo.files.value(CheckKey(path), lambda: check_model(path), record.case.id)
    if note:
        record.note(note)
    return path, note or ""


def onnx_path(memo: ModelMemo, record: CaseRecord) -> Path:
    """The model this case runs: the float32 one, or its reduced-precision variant, made once
    per opset, exporter and precision (prepare/precision.py)."""
    path = float32_path(memo, record)[0]
    return path if record.case.precision == "fp32" else variant_of(memo, record, path)


def variant_of(memo: ModelMemo, record: CaseRecord, path: Path) -> Path:
    """The case's reduced-precision variant of the float32 file at `path`."""
    record.enter("export")
    key = VariantKey(path, record.case.precision)
    variant = memo.files.value(key, lambda: _convert(memo, record, path), record.case.id)
    said_cached(memo, record, key, f"{record.case.precision} variant")
    return variant


def _convert(memo: ModelMemo, record: CaseRecord, source: Path) -> Path:
    # only a float16 or int8 variant
    from onnx_parity.prepare.precision import calibration_feeds, convert

    case, task = record.case, memo.task
    feeds: CalibrationFeeds = []
    if case.precision == "int8" and case.calibration is not None:
        target = session(memo, record, source)
        inputs = task.model.inputs or target.input_specs()
        record.enter("export")
        batch = case.calibration.batch_sizes[0] if case.calibration.batch_sizes else None
        feeds = calibration_feeds(samples_of(memo, record, Wanted(
            case.calibration, batch, inputs, traced=traced_sizes(memo, case))).samples)
        memo.calibration[case.precision] = feeds
    variant = source.with_name(f"{source.stem}.{case.precision}.onnx")
    if variant.parent != task.work_dir:  # a shipped file: its variants go to work
        variant = task.work_dir / f"{task.model.name}.{case.precision}.onnx"
    _through_cache(memo, VariantKey(source, case.precision), variant,
                   lambda: convert(source, case.precision, variant, feeds),
                   lambda: _variant_key(source, case.precision, feeds))
    if task.artifacts is not None:
        from onnx_parity.explain.artifacts import keep_variant  # only with --artifacts

        keep_variant(task.artifacts, task.model.name, variant)
    return variant


def _export(memo: ModelMemo, record: CaseRecord) -> Path:
    """The case's opset and exporter: the dynamo exporter's from the model's one program
    (prepare/program.py), the TorchScript exporter's traced at this opset."""
    # the PyTorch reference's module: only a torch model
    from onnx_parity.backends import import_torch
    from onnx_parity.prepare.program import export_at, trace_program  # only a model exported here

    case, model = record.case, memo.task.model
    module = loaded(memo, record)
    torch = import_torch(memo.task.threads)
    record.enter("export")
    opset, exporter = case.opset, case.exporter
    example = [torch.from_numpy(random_array(i, PREDEFINED_DATASETS["random"], EXPORT_BATCH,
                                             0, _traced(memo, case)))
               for i in model.inputs]
    assert opset is not None and exporter is not None
    path = _export_file(memo.task, opset, exporter)
    adapter = adapter_for(model)
    if isinstance(adapter, OwnExport):  # its own inputs, outputs and example
        how = adapter.export_how(module, EXPORT_BATCH)
    else:
        names = model.outputs or _output_names(memo, record, module, example)
        how = {"module": module.module, "example": example, "inputs": model.inputs,
               "outputs": names, "forward_args": model.forward_args,
               "by_name": module.binding.by_name}
    key = ExportKey(opset, exporter)
    try:
        if exporter == "dynamo":
            program = memo.files.value(ProgramKey(exporter),
                               lambda: trace_program(opset=opset, path=path, **how), case.id)
            exported = export_at(program, opset, path, **how)
        else:
            exported = export_model(opset=opset, exporter=exporter, path=path, **how)
    except ExportError as exc:
        memo.export_logs[key] = exc.log
        raise
    memo.export_logs[key] = exported.log
    logger.debug("%s: exported in %.2fs", case.id, exported.seconds)
    return exported.path


def traced_sizes(memo: ModelMemo, case: Case) -> dict[str, int] | None:
    """The sizes the case's export was traced at, where this worker made it (None: taken from
    the cache, keyed by the traced sizes of the case's own dataset)."""
    return memo.files.peek(TracedKey(case.exporter, case.opset))


def _traced(memo: ModelMemo, case: Case) -> dict[str, int]:
    """The sizes an export is traced at, kept for the cases' notes: the first case's to reach
    it (the program's, for the dynamo exporter, whose other opsets are converted from it)."""
    traced = _dims_of(memo, case)
    if case.exporter == "dynamo":
        traced = memo.files.value(TracedKey(case.exporter), lambda: traced)
    memo.files.put(TracedKey(case.exporter, case.opset), traced)
    return traced


def _dims_of(memo: ModelMemo, case: Case) -> dict[str, int]:
    """The sizes the case's dataset traces an export at: its `dims`, and for recorded data
    the sizes its own arrays have (they name no `dims`)."""
    return {**recorded_dims(case.dataset, memo.task.model.inputs), **case.dataset.traced_dims()}


def _export_file(task: WorkerTask, opset: int, exporter: str) -> Path:
    """Where an export lands, made or taken from the cache."""
    return task.work_dir / f"{task.model.name}.opset{opset}.{exporter}.onnx"


def _output_names(memo: ModelMemo, record: CaseRecord, module: LoadedModule,
                  example: Sequence[Any]) -> tuple[str, ...]:
    """Outputs returned as a mapping (a Hugging Face ModelOutput) are named by their keys;
    one forward pass finds them, and finds what ONNX cannot hold before the exporter does.
    It runs without gradients, as the reference does: what forward() returns, and how it
    is nested, does not depend on them, and the export after it runs with them."""
    # the PyTorch reference's module: only a torch model
    from onnx_parity.backends import forward, output_names

    model = memo.task.model
    record.enter("run")  # PyTorch runs the module: a crash or a hang here is the run's
    args, keywords = module.binding.call(
        {i.name: tensor for i, tensor in zip(model.inputs, example, strict=True)})

    def find() -> tuple[str, ...]:
        try:
            return output_names(forward(module.module, args,
                                        {**keywords, **model.forward_args}))
        except RunError as exc:
            if "ONNX cannot hold" not in exc.message:
                raise
            raise ExportError(exc.message) from exc  # what the exporter would stumble on

    names = memo.files.value(OutputNamesKey(), find, record.case.id)
    record.enter("export")
    return names


def _load(memo: ModelMemo) -> LoadedModule:
    """The factory's module; with --cache, what its code read and imported is recorded for its
    key (prepare/reads.py); wrapped as its adapter says (run/adapters/: a decoder's cache
    made flat tensors, an encoder-decoder split into its halves)."""
    # the PyTorch reference's module: only a torch model
    from onnx_parity.backends import load_module

    task = memo.task
    if task.cache is None:
        module = load_module(task.model, task.spec_root)
    else:
        from onnx_parity.prepare.reads import Recording  # only with --cache

        memo.reads = Recording()
        with memo.reads:
            module = load_module(task.model, task.spec_root)
    return adapter_for(task.model).wrap(module, task.model)


def said_cached(memo: ModelMemo, record: CaseRecord, key: Key[Any], step: str) -> None:
    """The case says whether what it ran came from the cache (--cache), and why not where the
    cache held an entry it could not trust or could not vouch for the model's reads."""
    state = memo.cached.get(key)
    if state is None:
        return
    record.found(cache={**(record.details.cache or {}), step: state})
    why = memo.cache_why.get(key, "")
    if state == "hit":
        record.note(f"{step}: cached")
    elif state == "rebuilt":
        record.note(f"{step}: the cache's entry was {why}; made again")
    elif state == "uncached":
        record.note(f"{step}: made without the cache, which cannot vouch for it: {why}")


def _export_key(memo: ModelMemo, record: CaseRecord, module: LoadedModule, opset: int,
                exporter: Exporter) -> str | None:
    """The export's key in the cache (prepare/cachekey.py); None without --cache, for a model
    whose weights go to a side file, which an entry does not hold, or for one whose reads
    no key can vouch for."""
    from onnx_parity.prepare.cachekey import cacheable, export_key  # only with --cache

    if memo.task.cache is None or not cacheable(module.module):
        return None
    part = memo.files.value(ModelKeyPart(), lambda: _model_part(memo, record, module))
    if part.key is None:
        memo.cached[ExportKey(opset, exporter)] = "uncached"
        memo.cache_why[ExportKey(opset, exporter)] = part.unvouched
        return None
    # The sizes the export is traced at, not the ones this case feeds (_export).
    return export_key(part.key, opset, exporter, _dims_of(memo, record.case))


def _model_part(memo: ModelMemo, record: CaseRecord, module: LoadedModule) -> KeyPart:
    """The model's part of its exports' key: after its first forward(), recorded with its
    factory's call, so that what either read is in the key, on a hit as on a miss."""
    from onnx_parity.prepare.cachekey import Unvouched, model_key  # only with --cache

    model = memo.task.model
    try:
        with memo.reads:
            _first_forward(memo, record, module)
    except Exception as exc:  # not swallowed: the export runs it again and fails with it
        return KeyPart(None, f"its first forward() raised {type(exc).__name__}")
    settings = {"torch": model.torch, "args": model.args, "inputs": model.inputs,
                "forward_args": model.forward_args, "outputs": model.outputs,
                "by_name": module.binding.by_name, "cast_to": module.cast_to,
                "adapter": model.adapter}
    try:
        return KeyPart(model_key(module.module, memo.reads, settings, memo.task.spec_root))
    except Unvouched as exc:
        return KeyPart(None, str(exc))


def _first_forward(memo: ModelMemo, record: CaseRecord, module: LoadedModule) -> None:
    """One forward() on the export's example inputs, as the export's own tracing runs it."""
    # the PyTorch reference's module: only a torch model
    from onnx_parity.backends import forward, import_torch

    model = memo.task.model
    torch = import_torch(memo.task.threads)
    record.enter("run")  # PyTorch runs the module: a crash or a hang here is the run's
    try:
        adapter = adapter_for(model)
        if isinstance(adapter, OwnExport):
            how = adapter.export_how(module, EXPORT_BATCH)
            forward(how["module"], how["example"], {})
            return
        dims = _dims_of(memo, record.case)
        example = {i.name: torch.from_numpy(random_array(i, PREDEFINED_DATASETS["random"],
                                                         EXPORT_BATCH, 0, dims))
                   for i in model.inputs}
        args, keywords = module.binding.call(example)
        forward(module.module, args, {**keywords, **model.forward_args})
    finally:
        record.enter("export")


def _cached_export(memo: ModelMemo, record: CaseRecord) -> Path:
    """The case's export, from the cache where it holds it (with --cache): then there is no
    torch.export, the file is the export; else exported, and kept there."""
    from onnx_parity.prepare.cache import Entry  # only with --cache

    case, cache = record.case, memo.task.cache
    opset, exporter = case.opset, case.exporter
    assert opset is not None and exporter is not None
    key = _export_key(memo, record, loaded(memo, record), opset, exporter)
    if key is None or cache is None:
        return _export(memo, record)
    record.enter("export")
    path = _export_file(memo.task, opset, exporter)
    entry = cache.load(key, path)
    if isinstance(entry, Entry):
        memo.cached[ExportKey(opset, exporter)] = "hit"
        memo.export_logs[ExportKey(opset, exporter)] = entry.log
        return path
    _missed(memo, ExportKey(opset, exporter), entry)
    made = _export(memo, record)
    cache.store(key, made, memo.export_logs.get(ExportKey(opset, exporter), ""))
    return made


def _missed(memo: ModelMemo, key: Key[Any], found: Any) -> None:
    """A miss, or an entry rejected (prepare/cache.py's Rejected), as the case will say it."""
    from onnx_parity.prepare.cache import Rejected  # only with --cache

    if isinstance(found, Rejected):
        memo.cached[key] = "rebuilt"
        memo.cache_why[key] = found.reason
    else:
        memo.cached[key] = "miss"


def _variant_key(source: Path, precision: Precision, feeds: CalibrationFeeds) -> str:
    from onnx_parity.prepare.cachekey import variant_key  # only with --cache

    return variant_key(source, precision, feeds)


def _through_cache(memo: ModelMemo, memo_key: Key[Any], path: Path, make: Callable[[], Any],
                   key: Callable[[], str]) -> None:
    """`path` made by `make`, or taken from the cache under `key()` (with --cache)."""
    cache = memo.task.cache
    if cache is None:
        make()
        return
    from onnx_parity.prepare.cache import Entry  # only with --cache

    found = key()
    entry = cache.load(found, path)
    if isinstance(entry, Entry):
        memo.cached[memo_key] = "hit"
        return
    make()
    _missed(memo, memo_key, entry)
    cache.store(found, path)
