"""A case resolved before it runs: everything it needs, made or found through its model's memo
(its model file, the float32 one behind a variant, the session, the samples, the loaded module,
the stepper of a rollout, the re-runs its causes may ask for) into one value that the flow hands
to the comparison and the explanations, which never call back into the memo.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from onnx_parity.errors import LoadError
from onnx_parity.frozen import frozen
from onnx_parity.prepare.stepper import Stepper, stepper_of
from onnx_parity.run.keys import Data, ReferenceKey, RemadeKey, TargetReferenceKey
from onnx_parity.run.making import float32_path, loaded, onnx_path, traced_sizes
from onnx_parity.run.memo import Feeds, ModelMemo
from onnx_parity.run.sessions import Wanted, samples_of, session
from onnx_parity.wording import criteria_text

if TYPE_CHECKING:
    from onnx_parity.backends import LoadedModule, OrtTarget
    from onnx_parity.literals import Exporter
    from onnx_parity.plan.cases import Case
    from onnx_parity.prepare.inputs import Sample
    from onnx_parity.run.record import CaseRecord
    from onnx_parity.spec import TargetSpec

Outputs = list[list[Any]]  # per sample, per output: an array, or a sequence / map / None


@frozen
class PreparedCase:
    """What one case runs on."""

    case: Case
    opset: int | None  # the case's, or the shipped file's own
    path: Path  # the model the case runs
    float32: Path | None  # the float32 model a reduced-precision variant was made from
    target: OrtTarget
    samples: tuple[Sample, ...]
    names: tuple[str, ...]  # every output the model gives, in its order
    loaded: LoadedModule | None  # the PyTorch module, for a model with a factory
    stepper: Stepper | None  # how a rollout goes on; None for one call per sample
    calibration: Feeds  # what calibrated a static int8 variant
    reruns: Reruns

    @property
    def feeds(self) -> list[Mapping[str, Any]]:
        return [s.inputs for s in self.samples]

    @property
    def data(self) -> Data:
        return Data.of(self.case.dataset, self.case.batch_size)


def prepare_case(memo: ModelMemo, record: CaseRecord) -> PreparedCase:
    """Everything the case needs, in the order a failure is best reported in: the model
    (loaded, exported, checked, its variant), its session, then the samples."""
    case, model = record.case, memo.task.model
    if case.plan_error:
        raise LoadError(case.plan_error)
    path = onnx_path(memo, record)
    if case.precision != "fp32" and case.tolerance_for().defaults:
        record.note(f"no tolerance of its own for {case.precision}: its defaults were used"
                    f" ({criteria_text(case.tolerance_for())})")
    opset = case.opset
    if opset is None:
        from onnx_parity.prepare.export import model_opset

        opset = model_opset(path)
    record.opset = opset
    target = session(memo, record, path)
    record.notes.extend(target.facts.notes)  # the target's own thread count, say
    from onnx_parity.explain.causes import numerics

    record.numerics = numerics(target.facts, memo.task.gpus)
    _note_precision(record, target)
    if record.numerics is not None:
        record.found(numerics=record.numerics.as_record())
    inputs = model.inputs or target.input_specs()
    names = tuple(model.outputs or target.output_names())
    samples = samples_of(memo, record, Wanted(case.dataset, case.batch_size, inputs, names,
                                              target.output_types(), traced_sizes(memo, case)))
    if model.torch is not None:  # recorded outputs PyTorch's run stands in for: said
        from onnx_parity.prepare.inputs import recorded_notes

        record.notes.extend(recorded_notes(case.dataset, samples))
    module = loaded(memo, record) if model.torch is not None else None
    stepper: Stepper | None = stepper_of(model)
    if model.adapter == "causal-lm":
        from onnx_parity.run.decoder import decoder_stepper, padding_note, prefilled

        assert module is not None
        decode = decoder_stepper(module, case)
        samples = prefilled(module, target, samples, decode)
        record.note(padding_note(decode, samples))
        stepper = decode
    elif model.adapter == "seq2seq-lm":
        from onnx_parity.run.seq2seq import served

        assert module is not None
        stepper, samples = served(memo, record, module, target, samples)
    float32 = float32_path(memo, record) if case.precision != "fp32" else None
    return PreparedCase(case=case, opset=opset, path=path, float32=float32, target=target,
                        samples=tuple(samples), names=names, loaded=module, stepper=stepper,
                        calibration=memo.calibration.get(case.precision, []),
                        reruns=Reruns(memo, record, path))


def _note_precision(record: CaseRecord, target: OrtTarget) -> None:
    """What the runtime computes in, by its own settings, said on the case where its first
    provider runs it (backends/precision.py); a failure's cause ladder re-runs it switched."""
    from onnx_parity.backends.kinds import target_kind
    from onnx_parity.backends.precision import runtime_precision

    spec = record.case.target
    found = runtime_precision(spec)
    if found is None or target.facts.active[:1] != (found.provider,):
        return
    note = target_kind(spec).precision_note(found)
    if note is not None:
        record.note(note)


def reference(memo: ModelMemo, record: CaseRecord, prepared: PreparedCase) -> Outputs:
    """The reference outputs of each sample, one per name: PyTorch's, made once per dataset and
    batch size, or the recorded ones (None for an output left out of the comparison that the
    recorded data does not hold)."""
    case, model = prepared.case, memo.task.model
    module = prepared.loaded
    if model.reference is not None:
        return memo.get(TargetReferenceKey(prepared.path, prepared.data),
                        lambda: _on_reference(memo, record, prepared), case.id)
    if module is not None:
        from onnx_parity.backends import torch_outputs

        record.enter("run")
        return memo.get(ReferenceKey(prepared.data),
                        lambda: [torch_outputs(module.module, s.inputs, model.forward_args,
                                               module.binding)
                                 for s in prepared.samples], case.id)
    from onnx_parity.prepare.inputs import recorded_reference

    return [recorded_reference(case.dataset, s, prepared.names, model.ignore_outputs)
            for s in prepared.samples]


def _on_reference(memo: ModelMemo, record: CaseRecord, prepared: PreparedCase) -> Outputs:
    """The reference target's outputs (`reference: <target>`), from a session judged as a
    case's own is: one that fell back is no reference."""
    from onnx_parity.backends.fallback import judge_placement
    from onnx_parity.errors import RunError

    chosen = memo.task.model.reference
    assert chosen is not None
    target = session(memo, record, prepared.path, chosen)
    if target.facts.can_fall_back and prepared.samples:
        judgement = judge_placement(chosen, target.facts,
                                    target.placement(prepared.samples[0].inputs))
        if judgement.action == "fail":
            raise RunError(f"the reference {judgement.message}")
    return [target.run(s.inputs) for s in prepared.samples]


@frozen
class Reruns:
    """The cause ladder's second runs (explain/causes.Reruns), made through the model's memo:
    a variant the spec also checks (the other exporter's export) is made once for both."""

    memo: ModelMemo
    record: CaseRecord
    path: Path  # the model the case ran

    def on_target(self, variant: TargetSpec) -> OrtTarget:
        return session(self.memo, self.record, self.path, variant)

    def remade(self, reduce_range: bool) -> OrtTarget:
        from onnx_parity.prepare.precision import convert

        case, memo = self.record.case, self.memo
        source = float32_path(memo, self.record)
        remade = self.path.with_name(f"{self.path.stem}.reduce-range.onnx")
        made = memo.get(RemadeKey(self.path, reduce_range), lambda: convert(
            source, case.precision, remade, memo.calibration.get(case.precision, []),
            reduce_range=reduce_range))
        return session(memo, self.record, made)

    def optimized_ops(self, variant: TargetSpec) -> dict[str, int]:
        from onnx_parity.backends.session import optimized_ops

        return optimized_ops(self.path, variant, self.memo.task.work_dir, self.memo.task.threads)

    def exported_with(self, exporter: Exporter) -> OrtTarget:
        from onnx_parity.run.record import CaseRecord

        twin = CaseRecord(dataclasses.replace(self.record.case, exporter=exporter))
        return session(self.memo, twin, onnx_path(self.memo, twin))


@frozen
class EncoderReruns(Reruns):
    """The cause ladder's second runs on an encoder-decoder's encoder, where its output drifted
    (adapter: seq2seq-lm): the target again on the encoder's file (TF32 off, a runtime's full
    precision, graph optimizations off), and the encoder exported by the other exporter."""

    loaded: Any = None  # the model's LoadedModule, halves and all

    def exported_with(self, exporter: Exporter) -> OrtTarget:
        from onnx_parity.run.record import CaseRecord
        from onnx_parity.run.seq2seq import encoder_path

        twin = CaseRecord(dataclasses.replace(self.record.case, exporter=exporter))
        return session(self.memo, twin, encoder_path(self.memo, twin, self.loaded))

