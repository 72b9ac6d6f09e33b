"""`adapter: seq2seq-lm` in a worker: the encoder-decoder wrapped once into its two halves
(prepare/seq2seq.py), the encoder exported beside the decoder (the case's own file), the
encoder run and compared once per sample, and the decoder's greedy rollout on each side's own
encoder output, which also judges the tokens (compare/tokens.py). Which half drifted is said
by compare/halves.py."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from onnx_parity.errors import LoadError
from onnx_parity.frozen import frozen
from onnx_parity.prepare.causal_lm import LOGITS
from onnx_parity.prepare.seq2seq import (
    Seq2SeqDecode,
    Seq2SeqLayout,
    decoder_example,
    decoder_module,
    encoder_example,
    encoder_feed,
    encoder_module,
    layout_of_model,
)
from onnx_parity.prepare.stepper import Judged
from onnx_parity.results import Tolerance
from onnx_parity.run.keys import Data, EncoderExportKey, EncoderReferenceKey
from onnx_parity.spec.adapter import FEATURES, PROMPT
from onnx_parity.spec.model import DEFAULT_DECODE_STEPS, DEFAULT_TOLERANCE

if TYPE_CHECKING:
    from onnx_parity.backends import LoadedModule, OrtTarget
    from onnx_parity.plan.cases import Case
    from onnx_parity.prepare.inputs import Sample
    from onnx_parity.results import OutputComparison
    from onnx_parity.run.memo import ModelMemo
    from onnx_parity.run.record import CaseRecord
    from onnx_parity.spec import ModelSpec

Feed = dict[str, Any]


def adapted(loaded: LoadedModule, model: ModelSpec) -> LoadedModule:
    """The user's encoder-decoder as its decoder's half, the case's module (what is exported
    to the case's file and localized in); its encoder's half beside it. Both take their inputs
    by position, in the layout's order, which the feeds keep."""
    from onnx_parity.backends.pytorch import Binding

    if model.forward_args:
        raise LoadError("adapter: seq2seq-lm calls the model with its own arguments: leave "
                        "forward_args out of this model")
    layout = layout_of_model(loaded.module)
    decoder = decoder_module(loaded.module, layout)
    decoder.layout = layout
    # Kept out of the module's registry (a plain attribute, not a submodule), so that the
    # decoder's export holds the decoder's weights alone.
    decoder.__dict__["encoder"] = encoder_module(loaded.module, layout)
    return dataclasses.replace(loaded, module=decoder, binding=Binding())


def layout_of(loaded: LoadedModule) -> Seq2SeqLayout:
    layout = loaded.module.layout
    assert isinstance(layout, Seq2SeqLayout)
    return layout


def _vocab(loaded: LoadedModule) -> int:
    return int(getattr(loaded.module.lm.config, "vocab_size", None) or 2)


def export_how(loaded: LoadedModule, batch: int) -> dict[str, Any]:
    """export_model's arguments for the decoder's half: the layout's inputs and outputs,
    traced at a past and new tokens of 2 or more, every dimension dynamic."""
    layout = layout_of(loaded)
    return {"module": loaded.module, "inputs": layout.inputs, "outputs": layout.outputs,
            "example": decoder_example(layout, batch, _vocab(loaded)), "forward_args": {},
            "by_name": None}


def encoder_path(memo: ModelMemo, record: CaseRecord, loaded: LoadedModule) -> Path:
    """The encoder's half exported beside the decoder, at the case's opset and exporter, and
    checked; made once per opset and exporter."""
    from onnx_parity.prepare.export import check_model, export_model
    from onnx_parity.prepare.inputs import EXPORT_BATCH

    case, task = record.case, memo.task
    layout = layout_of(loaded)
    opset, exporter = case.opset, case.exporter
    assert opset is not None and exporter is not None
    path = task.work_dir / f"{task.model.name}.opset{opset}.{exporter}.encoder.onnx"

    def make() -> Path:
        record.enter("export")
        export_model(loaded.module.encoder, encoder_example(layout, EXPORT_BATCH,
                                                            _vocab(loaded)),
                     layout.encoder_inputs, layout.encoder_outputs, opset, exporter, path)
        record.enter("check")
        note = check_model(path)
        if note:
            record.note(f"encoder: {note}")
        return path

    return memo.get(EncoderExportKey(opset, exporter), make, case.id)


@frozen
class ServedSeq2Seq(Seq2SeqDecode):
    """A seq2seq case's rollout: the decoder's greedy steps (Seq2SeqDecode), its tokens
    judged with the logits' tolerance (the RolloutJudge hook), and its encoder's half: the
    file, its session, the PyTorch module, each sample's feed and PyTorch's outputs on it."""

    tolerance: Tolerance = DEFAULT_TOLERANCE
    encoder: Path | None = None
    encoder_target: Any = None  # the encoder file's OrtTarget on the case's target
    encoder_module: Any = None
    encoder_feeds: tuple[Feed, ...] = ()
    encoded: tuple[tuple[Any, ...], ...] = ()  # PyTorch's encoder outputs, per sample
    # What judge() reads of each step: the rollout keeps only the logits of every step, not the
    # self-attention cache that grows with each.
    judged_outputs: ClassVar[tuple[str, ...]] = (LOGITS,)

    def judge(self, expected: Sequence[Sequence[Mapping[str, Any]]],
              actual: Sequence[Sequence[Mapping[str, Any]]]) -> Judged:
        from onnx_parity.run.decoder import judged_tokens

        return judged_tokens(expected, actual, self.tolerance)


def served(memo: ModelMemo, record: CaseRecord, loaded: LoadedModule, target: OrtTarget,
           samples: Sequence[Sample]) -> tuple[ServedSeq2Seq, tuple[Sample, ...]]:
    """The case's rollout and its samples as the decoder's first feeds, made from PyTorch's
    encoder outputs (ONNX Runtime's side makes its own from its encoder's, run/flow.py),
    after the decoder file's inputs and outputs are checked against the layout's."""
    from onnx_parity.backends import torch_outputs
    from onnx_parity.run.sessions import session

    case, layout = record.case, layout_of(loaded)
    wanted_in = [i.name for i in layout.inputs]
    have_in = [i.name for i in target.input_specs()]
    if have_in != wanted_in or list(target.output_names()) != list(layout.outputs):
        raise LoadError(f"the ONNX model takes {', '.join(have_in)} and gives "
                        f"{', '.join(target.output_names())}; adapter: seq2seq-lm runs a "
                        f"decoder whose inputs are {', '.join(wanted_in)} and outputs "
                        f"{', '.join(layout.outputs)}, in that order, as its own export "
                        "writes them")
    _within_limits(loaded, layout, samples)
    path = encoder_path(memo, record, loaded)
    encoder_target = session(memo, record, path)
    feeds = tuple(encoder_feed(layout, s.inputs) for s in samples)
    module = loaded.module.encoder
    record.enter("run")
    encoded = memo.get(EncoderReferenceKey(_data(case)),
                       lambda: [torch_outputs(module, f) for f in feeds], case.id)
    rollout = case.model.rollout
    steps = rollout.steps if rollout is not None else DEFAULT_DECODE_STEPS
    stepper = ServedSeq2Seq(layout, steps, case.tolerance_for(LOGITS), path, encoder_target,
                            module, feeds, tuple(tuple(e) for e in encoded))
    fed = tuple(dataclasses.replace(s, inputs=stepper.first_feed(f, _named(layout, e)))
                for s, f, e in zip(samples, feeds, encoded, strict=True))
    return stepper, fed


def _data(case: Case) -> Data:
    return Data.of(case.dataset, case.batch_size)


def _named(layout: Seq2SeqLayout, outputs: Sequence[Any]) -> dict[str, Any]:
    return dict(zip(layout.encoder_outputs, outputs, strict=True))


def _within_limits(loaded: LoadedModule, layout: Seq2SeqLayout,
                   samples: Sequence[Sample]) -> None:
    """Token ids below the vocabulary's size, features of the encoder's own shape: a
    LoadError with the limit, never the model's bare IndexError."""
    import numpy as np

    config = loaded.module.lm.config
    vocab = getattr(config, "vocab_size", None)
    for sample in samples:
        if layout.speech:
            shape = tuple(np.asarray(sample.inputs[FEATURES]).shape[1:])
            if shape != layout.features:
                raise LoadError(
                    f"adapter: seq2seq-lm: input_features of [batch, {shape[0]}, {shape[1]}], "
                    f"and the encoder takes [batch, {layout.features[0]}, "
                    f"{layout.features[1]}] (config.num_mel_bins, 2 × "
                    "config.max_source_positions): give inputs.input_features that shape")
            continue
        ids = np.asarray(sample.inputs[PROMPT])
        if isinstance(vocab, int) and ids.size and (ids.max() >= vocab or ids.min() < 0):
            raise LoadError(
                f"adapter: seq2seq-lm: input_ids hold token {int(ids.max())}, and the model's "
                f"vocabulary has {vocab} (config.vocab_size): give inputs.input_ids high: "
                f"{vocab} (token ids 0 to {vocab - 1})")


@frozen
class EncoderChecked:
    """The encoder's half of a case: its feeds, both sides' outputs, their comparison, and the
    decoder's first feeds each side makes from its own outputs."""

    names: tuple[str, ...]
    feeds: tuple[Feed, ...]
    expected: list[list[Any]]
    actual: list[list[Any]]
    comparisons: tuple[OutputComparison, ...]
    firsts: tuple[tuple[Feed, ...], tuple[Feed, ...]]  # PyTorch's, ONNX Runtime's

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.comparisons)


def check_encoder(record: CaseRecord, stepper: ServedSeq2Seq) -> EncoderChecked:
    """ONNX Runtime's encoder on each sample, compared with PyTorch's."""
    from onnx_parity.compare.outputs import compare_case

    layout = stepper.layout
    names = layout.encoder_outputs
    record.enter("run")
    actual = [list(stepper.encoder_target.run(f)) for f in stepper.encoder_feeds]
    expected = [list(e) for e in stepper.encoded]
    record.enter("compare")
    comparisons = compare_case(names, expected, actual, record.case.tolerance_for, None,
                               None, "PyTorch")
    firsts = tuple(tuple(stepper.first_feed(f, _named(layout, outputs))
                         for f, outputs in zip(stepper.encoder_feeds, side, strict=True))
                   for side in (expected, actual))
    return EncoderChecked(names, stepper.encoder_feeds, expected, actual, comparisons,
                          (firsts[0], firsts[1]))
