"""`adapter: causal-lm`: a decoder with a key-value cache, wrapped once for the export and the
reference (flat_cache.py), its prompts prefilled from the dataset's (left-padded where
`rollout.left_padding` says), and rolled out greedily (greedy.py), its tokens judged too."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from onnx_parity.errors import LoadError
from onnx_parity.frozen import frozen
from onnx_parity.run.adapters.base import ExportHow, Served, Serving
from onnx_parity.run.adapters.flat_cache import (
    CacheLayout,
    cache_layout,
    export_example,
    flat_cache_module,
    past_names,
    present_names,
)
from onnx_parity.run.adapters.greedy import (
    LOGITS,
    MASK,
    Greedy,
    TokensJudged,
    check_files,
    check_vocabulary,
    decode_steps,
)
from onnx_parity.spec.model import DEFAULT_TOLERANCE, PROMPT

if TYPE_CHECKING:
    from onnx_parity.backends import LoadedModule
    from onnx_parity.prepare.inputs import Sample
    from onnx_parity.results import Tolerance
    from onnx_parity.spec import ModelSpec

NAME = "causal-lm"


@frozen
class GreedyDecode(Greedy):
    """The rollout of a decoder (a `Stepper`, `TeacherForced`, `Padded`): call 1 is the prefill
    of the dataset's prompt (`first_feed`), each later call one side's greedy token, its own
    cache and its mask grown by one. `steps` calls in all, so `steps` tokens are chosen, one
    from each call's logits."""

    layout: CacheLayout
    steps: int
    left_padding: tuple[int, ...] = ()  # pad tokens per row, cycled over a batch's rows
    pad_token: int = 0

    def pads(self, rows: int) -> tuple[int, ...]:
        """Each row's pad tokens: `left_padding` cycled over the rows, none without it."""
        cycle = self.left_padding or (0,)
        return tuple(cycle[row % len(cycle)] for row in range(rows))

    def first_feed(self, prompt: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The prefill: the prompt's tokens (int64), a past of length 0 and a mask of ones, but
        over each row's left padding, whose tokens are `pad_token`, as a served batch of
        prompts of unequal lengths is padded."""
        ids = np.asarray(prompt[PROMPT]).astype(np.int64)
        if ids.ndim != 2:
            raise ValueError(f"input_ids must be [batch, seq], not of shape {ids.shape}")
        mask = np.ones(ids.shape, dtype=np.int64)
        for row, pads in enumerate(self.pads(ids.shape[0])):
            if pads >= ids.shape[1]:
                raise ValueError(
                    f"rollout.left_padding gives row {row} of the prompt {pads} pad tokens, "
                    f"and its input_ids are {ids.shape[1]} tokens long: at most "
                    f"{ids.shape[1] - 1}, so that every row keeps a token of its own")
            ids[row, :pads], mask[row, :pads] = self.pad_token, 0
        return {PROMPT: ids, MASK: mask, **self.layout.empty_past(ids.shape[0])}

    @property
    def padded(self) -> bool:
        return any(self.left_padding)

    def real_positions(self, feed: Mapping[str, np.ndarray],
                       outputs: Mapping[str, Any]) -> dict[str, Any]:
        """`outputs` with the padded positions zeroed: the logits of pad tokens and the cache
        entries they made, which a served batch never reads, and which the two sides need not
        agree on (a pad's query sees no key at all)."""
        found = dict(outputs)
        pads = np.asarray(feed[MASK]) == 0
        if not pads.any():
            return found
        logits = np.array(found[LOGITS])
        logits[pads[:, pads.shape[1] - logits.shape[1]:]] = 0
        found[LOGITS] = logits
        for name in present_names(self.layout.layers):
            cache = np.array(found[name])
            cache.transpose(0, 2, 1, 3)[pads] = 0
            found[name] = cache
        return found

    def carried(self) -> Iterable[tuple[str, str]]:
        return zip(past_names(self.layout.layers), present_names(self.layout.layers),
                   strict=True)

    def grown(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The mask, one longer: the new token is real."""
        mask = np.asarray(feed[MASK])
        return {**feed, MASK: np.concatenate([mask, np.ones((mask.shape[0], 1), mask.dtype)], 1)}


@frozen
class JudgedDecode(TokensJudged, GreedyDecode):
    """The greedy rollout, judged on its tokens too (a `RolloutJudge`)."""

    tolerance: Tolerance = DEFAULT_TOLERANCE


class CausalLM:
    """The `causal-lm` adapter (an `Adapter` with its `OwnExport`)."""

    def wrap(self, loaded: LoadedModule, model: ModelSpec) -> LoadedModule:
        """The user's decoder wrapped so that its cache is flat tensors; the wrapper takes its
        inputs by position, in the layout's order, which the feeds keep."""
        # the PyTorch reference's module: only a torch model
        from onnx_parity.backends.pytorch import Binding

        layout = cache_layout(loaded.module, model.forward_args)
        wrapper = flat_cache_module(loaded.module, layout.layers, model.forward_args,
                                    layout.keyword)
        wrapper.layout = layout
        return dataclasses.replace(loaded, module=wrapper, binding=Binding())

    def export_how(self, loaded: LoadedModule, batch: int) -> ExportHow:
        """The layout's inputs and outputs, traced at a past and new tokens of 2 or more, the
        dimensions all dynamic."""
        layout = layout_of(loaded)
        vocab = getattr(getattr(loaded.module.lm, "config", None), "vocab_size", None) or 2
        return {"module": loaded.module, "example": export_example(layout, int(vocab), batch),
                "inputs": layout.inputs, "outputs": layout.outputs, "forward_args": {},
                "by_name": None}

    def served(self, serving: Serving) -> Served:
        """The case's greedy rollout, its prompts as the prefill's feeds (their mask, an empty
        past), and whether it checked padding, said."""
        loaded, record = serving.loaded, serving.record
        assert loaded is not None  # the adapter needs the factory (spec/adapter.py)
        decode = decoder_stepper(loaded, record.case.model, decode_steps(record.case),
                                 record.case.tolerance_for(LOGITS))
        samples = prefilled(loaded, serving, decode)
        record.note(padding_note(decode, samples))
        return Served(samples, decode)


def layout_of(loaded: LoadedModule) -> CacheLayout:
    layout = loaded.module.layout
    assert isinstance(layout, CacheLayout)
    return layout


def decoder_stepper(loaded: LoadedModule, model: ModelSpec, steps: int,
                    tolerance: Tolerance) -> JudgedDecode:
    """`steps` calls, the prompts left-padded as `rollout.left_padding` says with the model's
    pad token, the tokens judged with `tolerance` (the logits' on the case's target)."""
    padding = model.rollout.left_padding if model.rollout is not None else ()
    config = getattr(loaded.module.lm, "config", None)
    pad = getattr(config, "pad_token_id", None)
    return JudgedDecode(layout_of(loaded), steps, padding,
                        pad if isinstance(pad, int) and pad >= 0 else 0, tolerance)


def prefilled(loaded: LoadedModule, serving: Serving,
              stepper: GreedyDecode) -> tuple[Sample, ...]:
    """Each sample's prompt as the prefill's feed, after the ONNX model's own inputs and
    outputs are checked against the layout's."""
    layout = layout_of(loaded)
    check_files(serving.target, layout.inputs, layout.outputs, NAME)
    try:
        fed = tuple(dataclasses.replace(s, inputs=stepper.first_feed(s.inputs))
                    for s in serving.samples)
    except ValueError as exc:
        raise LoadError(f"adapter: {NAME}: {exc}") from exc
    within_limits(loaded, stepper, fed)
    return fed


def within_limits(loaded: LoadedModule, stepper: GreedyDecode,
                  samples: Sequence[Sample]) -> None:
    """The prompts' token ids below the vocabulary's size and the rollout within the model's
    positions, where its config tells them: a LoadError with the limit, never the embedding's
    bare IndexError."""
    config = getattr(loaded.module.lm, "config", None)
    key = next((k for k in ("max_position_embeddings", "n_positions")
                if isinstance(getattr(config, k, None), int)), None)
    positions = getattr(config, key) if key else None
    for sample in samples:
        ids = np.asarray(sample.inputs[PROMPT])
        check_vocabulary(ids, config, NAME)
        needed = ids.shape[1] + stepper.steps - 1
        if isinstance(positions, int) and needed > positions:
            raise LoadError(
                f"adapter: {NAME}: a prompt of {ids.shape[1]} tokens and rollout.steps "
                f"{stepper.steps} need {needed} positions, and the model has {positions} "
                f"(config.{key}): "
                f"at most {max(positions - ids.shape[1] + 1, 0)} steps after this prompt")


def padding_note(stepper: GreedyDecode, samples: Sequence[Sample]) -> str:
    """Whether the case checked padding: which rows were padded, or that none was."""
    rows = max((len(s.inputs[MASK]) for s in samples), default=0)
    pads = stepper.pads(rows)
    if not any(pads):
        return ("padding not checked: the batch's prompts are of equal lengths "
                "(rollout.left_padding pads them)")
    lengths = ", ".join(str(n) for n in pads)
    return f"prompts left-padded by {lengths} tokens, row by row; real positions compared"
