"""`adapter: seq2seq-lm`: an encoder-decoder wrapped once into its two halves (two_halves.py),
the encoder exported beside the decoder (the case's own file), the encoder run and compared once
per sample, and the decoder's greedy rollout (greedy.py) on each side's own encoder output, its
tokens judged too. Which half drifted is said by compare/halves.py."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from onnx_parity.compare.outputs import compare_case
from onnx_parity.errors import LoadError
from onnx_parity.frozen import frozen
from onnx_parity.prepare.export import check_model, export_model
from onnx_parity.prepare.inputs import EXPORT_BATCH
from onnx_parity.run.adapters.base import EncoderChecked, ExportHow, Feed, Served, Serving
from onnx_parity.run.adapters.greedy import (
    LOGITS,
    MASK,
    Greedy,
    TokensJudged,
    check_files,
    check_vocabulary,
    decode_steps,
)
from onnx_parity.run.adapters.two_halves import (
    ENCODER_MASK,
    Seq2SeqLayout,
    decoder_example,
    decoder_module,
    encoder_example,
    encoder_feed,
    encoder_module,
    layout_of_model,
    past_names,
    present_names,
)
from onnx_parity.run.keys import Data, EncoderExportKey, EncoderReferenceKey
from onnx_parity.spec.model import DEFAULT_TOLERANCE, FEATURES, PROMPT

if TYPE_CHECKING:
    from onnx_parity.backends import LoadedModule
    from onnx_parity.prepare.inputs import Sample
    from onnx_parity.results import Tolerance
    from onnx_parity.run.record import CaseRecord
    from onnx_parity.spec import ModelSpec

NAME = "seq2seq-lm"


@frozen
class Seq2SeqDecode(Greedy):
    """The decoder's greedy rollout (a `Stepper`, `TeacherForced`): call 1 takes the start
    token, an empty self-attention cache and the cross-attention cache of this side's own
    encoder (`first_feed`), each later call one side's greedy token and its own caches."""

    layout: Seq2SeqLayout
    steps: int

    def first_feed(self, encoder_feed: Mapping[str, np.ndarray],
                   encoded: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Step 1's feed from the encoder's feed (its mask) and outputs (its cross cache)."""
        n = self.layout.layers
        cross = [np.asarray(encoded[name]) for name in present_names(n, "encoder")]
        batch = cross[0].shape[0]
        feed: dict[str, np.ndarray] = {
            PROMPT: np.full((batch, 1), self.layout.start, dtype=np.int64)}
        if not self.layout.speech:
            feed[ENCODER_MASK] = np.asarray(encoder_feed[MASK]).astype(np.int64)
        empty = np.zeros((batch, self.layout.heads, 0, self.layout.head_dim), np.float32)
        feed.update({name: empty for name in past_names(n, "decoder")})
        feed.update(zip(past_names(n, "encoder"), cross, strict=True))
        return feed

    def carried(self) -> Iterable[tuple[str, str]]:
        n = self.layout.layers
        return zip(past_names(n, "decoder"), present_names(n, "decoder"), strict=True)


@frozen
class ServedSeq2Seq(TokensJudged, Seq2SeqDecode):
    """A seq2seq case's rollout (Seq2SeqDecode), its tokens judged (a `RolloutJudge`), after its
    encoder's half (`Encoded`): the file, its session, the PyTorch module, each sample's feed
    and PyTorch's outputs on it."""

    tolerance: Tolerance = DEFAULT_TOLERANCE
    encoder: Path | None = None
    encoder_target: Any = None  # the encoder file's OrtTarget on the case's target
    encoder_module: Any = None
    encoder_feeds: tuple[Feed, ...] = ()
    encoded: tuple[tuple[Any, ...], ...] = ()  # PyTorch's encoder outputs, per sample

    def check_encoder(self, record: CaseRecord) -> EncoderChecked:
        """ONNX Runtime's encoder on each sample, compared with PyTorch's."""
        layout = self.layout
        names = layout.encoder_outputs
        record.enter("run")
        actual = [list(self.encoder_target.run(f)) for f in self.encoder_feeds]
        expected = [list(e) for e in self.encoded]
        record.enter("compare")
        comparisons = compare_case(names, expected, actual, record.case.tolerance_for, None,
                                   None, "PyTorch")
        firsts = tuple(tuple(self.first_feed(f, _named(layout, outputs))
                             for f, outputs in zip(self.encoder_feeds, side, strict=True))
                       for side in (expected, actual))
        return EncoderChecked(names, self.encoder_feeds, expected, actual, comparisons,
                              (firsts[0], firsts[1]))


class Seq2SeqLM:
    """The `seq2seq-lm` adapter (an `Adapter` with its `OwnExport`)."""

    def wrap(self, loaded: LoadedModule, model: ModelSpec) -> LoadedModule:
        """The user's encoder-decoder as its decoder's half, the case's module (what is
        exported to the case's file and localized in); its encoder's half beside it. Both take
        their inputs by position, in the layout's order, which the feeds keep."""
        # the PyTorch reference's module: only a torch model
        from onnx_parity.backends.pytorch import Binding

        if model.forward_args:
            raise LoadError(f"adapter: {NAME} calls the model with its own arguments: leave "
                            "forward_args out of this model")
        layout = layout_of_model(loaded.module)
        decoder = decoder_module(loaded.module, layout)
        decoder.layout = layout
        # Kept out of the module's registry (a plain attribute, not a submodule), so that the
        # decoder's export holds the decoder's weights alone.
        decoder.__dict__["encoder"] = encoder_module(loaded.module, layout)
        return dataclasses.replace(loaded, module=decoder, binding=Binding())

    def export_how(self, loaded: LoadedModule, batch: int) -> ExportHow:
        """The decoder's half: the layout's inputs and outputs, traced at a past and new tokens
        of 2 or more, every dimension dynamic."""
        layout = layout_of(loaded)
        return {"module": loaded.module, "inputs": layout.inputs, "outputs": layout.outputs,
                "example": decoder_example(layout, batch, _vocab(loaded)), "forward_args": {},
                "by_name": None}

    def served(self, serving: Serving) -> Served:
        """The case's rollout and its samples as the decoder's first feeds, made from
        PyTorch's encoder outputs (ONNX Runtime's side makes its own from its encoder's,
        ServedSeq2Seq.check_encoder), after the decoder file's inputs and outputs are checked
        against the layout's."""
        # the PyTorch reference's module: only a torch model
        from onnx_parity.backends import torch_outputs

        record, loaded, samples = serving.record, serving.loaded, serving.samples
        assert loaded is not None  # the adapter needs the factory (spec/adapter.py)
        case, layout = record.case, layout_of(loaded)
        check_files(serving.target, layout.inputs, layout.outputs, NAME)
        _within_limits(loaded, layout, samples)

        def exported(twin: CaseRecord) -> Path:
            return encoder_path(serving, twin, loaded)

        path = exported(record)
        encoder_target = serving.session(record, path)
        feeds = tuple(encoder_feed(layout, s.inputs) for s in samples)
        module = loaded.module.encoder
        record.enter("run")
        encoded = serving.once(EncoderReferenceKey(Data.of(case.dataset, case.batch_size)),
                               lambda: [torch_outputs(module, f) for f in feeds], record)
        stepper = ServedSeq2Seq(layout, decode_steps(case), case.tolerance_for(LOGITS), path,
                                encoder_target, module, feeds, tuple(tuple(e) for e in encoded))
        fed = tuple(dataclasses.replace(s, inputs=stepper.first_feed(f, _named(layout, e)))
                    for s, f, e in zip(samples, feeds, encoded, strict=True))
        return Served(fed, stepper, exported)


def layout_of(loaded: LoadedModule) -> Seq2SeqLayout:
    layout = loaded.module.layout
    assert isinstance(layout, Seq2SeqLayout)
    return layout


def _vocab(loaded: LoadedModule) -> int:
    return int(getattr(loaded.module.lm.config, "vocab_size", None) or 2)


def encoder_path(serving: Serving, record: CaseRecord, loaded: LoadedModule) -> Path:
    """The encoder's half exported beside the decoder, at the case's opset and exporter, and
    checked; made once per opset and exporter."""
    case = record.case
    layout = layout_of(loaded)
    opset, exporter = case.opset, case.exporter
    assert opset is not None and exporter is not None
    path = serving.work_dir / f"{case.model.name}.opset{opset}.{exporter}.encoder.onnx"

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

    return serving.once(EncoderExportKey(opset, exporter), make, record)


def _named(layout: Seq2SeqLayout, outputs: Sequence[Any]) -> dict[str, Any]:
    return dict(zip(layout.encoder_outputs, outputs, strict=True))


def _within_limits(loaded: LoadedModule, layout: Seq2SeqLayout,
                   samples: Sequence[Sample]) -> None:
    """Token ids below the vocabulary's size, features of the encoder's own shape: a
    LoadError with the limit, never the model's bare IndexError."""
    config = loaded.module.lm.config
    for sample in samples:
        if layout.speech:
            shape = tuple(np.asarray(sample.inputs[FEATURES]).shape[1:])
            if shape != layout.features:
                raise LoadError(
                    f"adapter: {NAME}: input_features of [batch, {shape[0]}, {shape[1]}], "
                    f"and the encoder takes [batch, {layout.features[0]}, "
                    f"{layout.features[1]}] (config.num_mel_bins, 2 × "
                    "config.max_source_positions): give inputs.input_features that shape")
            continue
        check_vocabulary(np.asarray(sample.inputs[PROMPT]), config, NAME)
