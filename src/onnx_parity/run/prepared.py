"""A case resolved before it runs, with three looks into its model's memo: its model file
(made and checked, with the float32 one behind a variant), its session, and its samples (with
the module that runs them), into one value that the flow hands to the comparison and the
explanations. What costs a run is there to be made when first asked for, once for the cases
that share it: the reference outputs, the timings and float16's checks (under the file's and
the samples' records, keys.Made), and the re-runs a cause may ask for (CaseReruns, the
`Reruns` of explain/causes.py). Nothing after resolution is handed the memo.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from onnx_parity.backends.fallback import judge_placement
from onnx_parity.backends.kinds import target_kind
from onnx_parity.backends.precision import runtime_precision
from onnx_parity.backends.session import optimized_ops as ops
from onnx_parity.errors import LoadError, RunError, StageError
from onnx_parity.explain.causes import numerics
from onnx_parity.frozen import frozen
from onnx_parity.prepare.export import model_opset
from onnx_parity.prepare.inputs import recorded_notes, recorded_reference
from onnx_parity.run.adapters import adapter_for
from onnx_parity.run.adapters.base import Serving, Stepper
from onnx_parity.run.keys import (
    Data,
    ExportKey,
    FileKey,
    Made,
    ModuleKey,
    ReferenceKey,
    RemadeKey,
    TargetReferenceKey,
    VariantKey,
)
from onnx_parity.run.making import (
    float32_path,
    load_module,
    onnx_path,
    said_cached,
    say_module,
    traced_sizes,
    variant_of,
)
from onnx_parity.run.memo import CalibrationFeeds, ModelMemo
from onnx_parity.run.protocol import WorkerTask
from onnx_parity.run.record import CaseRecord
from onnx_parity.run.sessions import OnData, Wanted, samples_of, session
from onnx_parity.wording import criteria_text

if TYPE_CHECKING:
    from onnx_parity.backends import LoadedModule, OrtTarget
    from onnx_parity.literals import Exporter
    from onnx_parity.plan.cases import Case
    from onnx_parity.prepare.inputs import Sample
    from onnx_parity.spec import TargetSpec

Outputs = list[list[Any]]  # per sample, per output: an array, or a sequence / map / None


@frozen
class CaseReruns:
    """The cause ladder's second runs (explain/causes.Reruns), each made only when a suspect asks
    for it, through the model's memo: a variant the spec also checks (the other exporter's
    export) is made once for both."""

    on_target: Callable[[TargetSpec], OrtTarget]  # the model again on a variant of its target
    remade: Callable[[bool], OrtTarget]  # an int8 variant made again, reduce_range as given
    optimized_ops: Callable[[TargetSpec], dict[str, int]]
    exported_with: Callable[[Exporter], OrtTarget]


@frozen
class PreparedCase:
    """What one case runs on."""

    case: Case
    task: WorkerTask  # how its model is checked (the spec's model, threads, follow-ups)
    opset: int | None  # the case's, or the shipped file's own
    path: Path  # the model the case runs
    float32: Path | None  # the float32 model a reduced-precision variant was made from
    target: OrtTarget
    samples: tuple[Sample, ...]
    names: tuple[str, ...]  # every output the model gives, in its order
    loaded: LoadedModule | None  # the PyTorch module, for a model with a factory
    stepper: Stepper | None  # how a rollout goes on; None for one call per sample
    calibration: CalibrationFeeds  # what calibrated a static int8 variant
    on_file: Made  # the file's shared values: how much of it ran in float16 on a target
    on_data: OnData  # the samples' shared values: the reference, the timings, float16's ranges
    other_target: Callable[[TargetSpec], OrtTarget]  # the model's session on another target
    reruns: CaseReruns
    encoder_reruns: Callable[[Path], CaseReruns]  # the same, on an encoder-decoder's encoder

    @property
    def feeds(self) -> list[Mapping[str, Any]]:
        return [s.inputs for s in self.samples]

    @property
    def data(self) -> Data:
        return Data.of(self.case.dataset, self.case.batch_size)


@frozen
class ModelFile:
    """The model file a case runs, made and checked once per opset, exporter and precision, with
    what each case of it says: the float32 file it was made from, the checker's note on that
    file, and the sizes its export was traced at (None: taken from the export cache)."""

    path: Path
    float32: Path
    check: str
    traced: dict[str, int] | None
    shared: Made  # what is made on the file when a case first needs it (the module, say)


def model_file(memo: ModelMemo, record: CaseRecord) -> ModelFile:
    """The case's model file (onnx_path), found with one look into the memo; the case says
    what the first case of the file said (its cache states, the checker's note)."""
    case = record.case
    made_now: list[bool] = []

    def make() -> ModelFile:
        made_now.append(True)
        float32, check = float32_path(memo, record)
        path = variant_of(memo, record, float32) if case.precision != "fp32" else float32
        traced = traced_sizes(memo, case) if memo.task.model.onnx is None else None
        return ModelFile(path, float32, check, traced, Made(memo.told))

    try:
        found: ModelFile = memo.get(FileKey(case.opset, case.exporter, case.precision),
                                    make, case.id)
    except StageError:
        if not made_now:  # met again: the steps before the failure say what they said
            onnx_path(memo, record)
        raise
    if not made_now:
        if memo.task.model.onnx is None:
            said_cached(memo, record, ExportKey(case.opset, case.exporter), "export")
        record.enter("check")
        if found.check:
            record.note(found.check)
        if case.precision != "fp32":
            record.enter("export")
            said_cached(memo, record, VariantKey(found.float32, case.precision),
                         f"{case.precision} variant")
    return found


def prepare_case(memo: ModelMemo, record: CaseRecord) -> PreparedCase:
    """Everything the case needs, in the order a failure is best reported in: the model
    (loaded, exported, checked, its variant), its session, then the samples."""
    case, model = record.case, memo.task.model
    if case.plan_error:
        raise LoadError(case.plan_error)
    checked = model_file(memo, record)
    path = checked.path
    if case.precision != "fp32" and case.tolerance_for().defaults:
        record.note(f"no tolerance of its own for {case.precision}: its defaults were used"
                    f" ({criteria_text(case.tolerance_for())})")
    opset = case.opset
    if opset is None:
        opset = model_opset(path)
    record.opset = opset
    target = session(memo, record, path)
    record.notes.extend(target.facts.notes)  # the target's own thread count, say

    record.numerics = numerics(target.facts, memo.task.gpus)
    _note_precision(record, target)
    if record.numerics is not None:
        record.found(numerics=record.numerics.as_record())
    inputs = model.inputs or target.input_specs()
    names = tuple(model.outputs or target.output_names())

    def load() -> LoadedModule:  # once per file: the memo is not looked into again for it
        return checked.shared.value(ModuleKey(), lambda: load_module(memo, record), case.id)

    on_data = samples_of(memo, record, Wanted(case.dataset, case.batch_size, inputs, names,
                                              target.output_types(), checked.traced),
                         load if model.torch is not None else None)
    samples = on_data.samples
    if model.torch is not None:  # recorded outputs PyTorch's run stands in for: said

        record.notes.extend(recorded_notes(case.dataset, samples))
    module = on_data.loaded(case.id)
    if module is not None:
        say_module(record, module)
    served = adapter_for(model).served(Serving(
        record, module, target, samples, lambda twin, file: session(memo, twin, file),
        lambda key, make, asking: memo.get(key, make, asking.case.id), memo.task.work_dir))

    def other_target(chosen: TargetSpec) -> OrtTarget:
        return session(memo, record, path, chosen)

    def encoder_reruns(encoder: Path) -> CaseReruns:
        exported = served.first_half
        assert exported is not None  # only a model exported in two halves has an encoder
        return case_reruns(memo, record, encoder, exported)

    return PreparedCase(case=case, task=memo.task, opset=opset, path=path,
                        float32=checked.float32 if case.precision != "fp32" else None,
                        target=target, samples=served.samples, names=names, loaded=module,
                        stepper=served.stepper,
                        calibration=memo.calibration.get(case.precision, []),
                        on_file=checked.shared, on_data=on_data, other_target=other_target,
                        reruns=case_reruns(memo, record, path,
                                           lambda twin: onnx_path(memo, twin)),
                        encoder_reruns=encoder_reruns)


def _note_precision(record: CaseRecord, target: OrtTarget) -> None:
    """What the runtime computes in, by its own settings, said on the case where its first
    provider runs it (backends/precision.py); a failure's cause ladder re-runs it switched."""
    spec = record.case.target
    found = runtime_precision(spec)
    if found is None or target.facts.active[:1] != (found.provider,):
        return
    note = target_kind(spec).precision_note(found)
    if note is not None:
        record.note(note)


def reference(record: CaseRecord, prepared: PreparedCase) -> Outputs:
    """The reference outputs of each sample, one per name: PyTorch's, made once per dataset and
    batch size, or the recorded ones (None for an output left out of the comparison that the
    recorded data does not hold)."""
    case, model = prepared.case, prepared.task.model
    module = prepared.loaded
    if model.reference is not None:
        return prepared.on_data.made.value(TargetReferenceKey(prepared.path, prepared.data),
                                           lambda: _on_reference(prepared), case.id)
    if module is not None:
        # the PyTorch reference's module: only a torch model
        from onnx_parity.backends import torch_outputs

        record.enter("run")
        return prepared.on_data.made.value(ReferenceKey(prepared.data), lambda: [
            torch_outputs(module.module, s.inputs, model.forward_args, module.binding)
            for s in prepared.samples], case.id)

    return [recorded_reference(case.dataset, s, prepared.names, model.ignore_outputs)
            for s in prepared.samples]


def _on_reference(prepared: PreparedCase) -> Outputs:
    """The reference target's outputs (`reference: <target>`), from a session judged as a
    case's own is: one that fell back is no reference."""
    chosen = prepared.task.model.reference
    assert chosen is not None
    target = prepared.other_target(chosen)
    if target.facts.can_fall_back and prepared.samples:
        judgement = judge_placement(chosen, target.facts,
                                    target.placement(prepared.samples[0].inputs))
        if judgement.action == "fail":
            raise RunError(f"the reference {judgement.message}")
    return [target.run(s.inputs) for s in prepared.samples]


def case_reruns(memo: ModelMemo, record: CaseRecord, path: Path,
                exported: Callable[[CaseRecord], Path]) -> CaseReruns:
    """The second runs on `path` (the case's model, or an encoder-decoder's encoder), `exported`
    making the same file with another exporter for a twin of the case."""

    def on_target(variant: TargetSpec) -> OrtTarget:
        return session(memo, record, path, variant)

    def remade(reduce_range: bool) -> OrtTarget:
        from onnx_parity.prepare.precision import convert  # only an int8 variant made again

        case = record.case
        source = float32_path(memo, record)[0]
        again = path.with_name(f"{path.stem}.reduce-range.onnx")
        made = memo.get(RemadeKey(path, reduce_range), lambda: convert(
            source, case.precision, again, memo.calibration.get(case.precision, []),
            reduce_range=reduce_range))
        return session(memo, record, made)

    def optimized_ops(variant: TargetSpec) -> dict[str, int]:
        return ops(path, variant, memo.task.work_dir, memo.task.threads)

    def exported_with(exporter: Exporter) -> OrtTarget:
        twin = CaseRecord(dataclasses.replace(record.case, exporter=exporter))
        return session(memo, twin, exported(twin))

    return CaseReruns(on_target, remade, optimized_ops, exported_with)

