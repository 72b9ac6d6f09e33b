"""`adapter: causal-lm` in a worker: the decoder wrapped once for the export and the reference
(prepare/causal_lm.py), the prefill feeds made from the dataset's prompts, and the greedy
stepper whose rollout also judges the tokens (compare/tokens.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from onnx_parity.errors import LoadError
from onnx_parity.frozen import frozen
from onnx_parity.prepare.causal_lm import (
    LOGITS,
    MASK,
    CacheLayout,
    GreedyDecode,
    cache_layout,
    export_example,
    flat_cache_module,
)
from onnx_parity.prepare.stepper import Judged
from onnx_parity.results import Tolerance
from onnx_parity.spec.adapter import PROMPT
from onnx_parity.spec.model import DEFAULT_DECODE_STEPS, DEFAULT_TOLERANCE

if TYPE_CHECKING:
    from onnx_parity.backends import LoadedModule, OrtTarget
    from onnx_parity.plan.cases import Case
    from onnx_parity.prepare.inputs import Sample
    from onnx_parity.spec import ModelSpec


def adapted(loaded: LoadedModule, model: ModelSpec) -> LoadedModule:
    """The user's decoder wrapped so that its cache is flat tensors; the wrapper takes its
    inputs by position, in the layout's order, which the feeds keep."""
    from onnx_parity.backends.pytorch import Binding

    layout = cache_layout(loaded.module, model.forward_args)
    wrapper = flat_cache_module(loaded.module, layout.layers, model.forward_args,
                                layout.keyword)
    wrapper.layout = layout
    return dataclasses.replace(loaded, module=wrapper, binding=Binding())


def layout_of(loaded: LoadedModule) -> CacheLayout:
    layout = loaded.module.layout
    assert isinstance(layout, CacheLayout)
    return layout


def export_how(loaded: LoadedModule, batch: int) -> dict[str, Any]:
    """export_model's arguments for the wrapped decoder: the layout's inputs and outputs,
    traced at a past and new tokens of 2 or more, the dimensions all dynamic."""
    layout = layout_of(loaded)
    vocab = getattr(getattr(loaded.module.lm, "config", None), "vocab_size", None) or 2
    return {"module": loaded.module, "example": export_example(layout, int(vocab), batch),
            "inputs": layout.inputs, "outputs": layout.outputs, "forward_args": {},
            "by_name": None}


def prefilled(loaded: LoadedModule, target: OrtTarget, samples: Sequence[Sample],
              stepper: GreedyDecode) -> tuple[Sample, ...]:
    """Each sample's prompt as the prefill's feed (its mask, an empty past), after the ONNX
    model's own inputs and outputs are checked against the layout's (a shipped file may name
    or order them otherwise, and the reference's outputs are matched by position)."""
    layout = layout_of(loaded)
    wanted_in = [i.name for i in layout.inputs]
    have_in = [i.name for i in target.input_specs()]
    have_out = list(target.output_names())
    if have_in != wanted_in or have_out != list(layout.outputs):
        raise LoadError(f"the ONNX model takes {', '.join(have_in)} and gives "
                        f"{', '.join(have_out)}; adapter: causal-lm runs a decoder whose inputs "
                        f"are {', '.join(wanted_in)} and outputs {', '.join(layout.outputs)}, "
                        "in that order, as its own export writes them")
    try:
        fed = tuple(dataclasses.replace(s, inputs=stepper.first_feed(s.inputs))
                    for s in samples)
    except ValueError as exc:
        raise LoadError(f"adapter: causal-lm: {exc}") from exc
    within_limits(loaded, stepper, fed)
    return fed


def within_limits(loaded: LoadedModule, stepper: GreedyDecode,
                   samples: Sequence[Sample]) -> None:
    """The prompts' token ids below the vocabulary's size and the rollout within the model's
    positions, where its config tells them: a LoadError with the limit, never the embedding's
    bare IndexError."""
    import numpy as np

    config = getattr(loaded.module.lm, "config", None)
    vocab = getattr(config, "vocab_size", None)
    key = next((k for k in ("max_position_embeddings", "n_positions")
                if isinstance(getattr(config, k, None), int)), None)
    positions = getattr(config, key) if key else None
    for sample in samples:
        ids = np.asarray(sample.inputs[PROMPT])
        if isinstance(vocab, int) and ids.size and (ids.max() >= vocab or ids.min() < 0):
            raise LoadError(
                f"adapter: causal-lm: input_ids hold token {int(ids.max())}, and the model's "
                f"vocabulary has {vocab} (config.vocab_size): give inputs.input_ids high: "
                f"{vocab} (token ids 0 to {vocab - 1})")
        needed = ids.shape[1] + stepper.steps - 1
        if isinstance(positions, int) and needed > positions:
            raise LoadError(
                f"adapter: causal-lm: a prompt of {ids.shape[1]} tokens and rollout.steps "
                f"{stepper.steps} need {needed} positions, and the model has {positions} "
                f"(config.{key}): "
                f"at most {max(positions - ids.shape[1] + 1, 0)} steps after this prompt")


@frozen
class JudgedDecode(GreedyDecode):
    """The greedy rollout, judged on its tokens too (the engine's RolloutJudge hook): the
    logits' tolerance decides whether a divergence is a near tie or drift."""

    tolerance: Tolerance = DEFAULT_TOLERANCE
    # What judge() reads of each step (prepare/stepper.RolloutJudge): the rollout keeps only
    # these of every step, not the cache that grows with each.
    judged_outputs: ClassVar[tuple[str, ...]] = (LOGITS,)

    def judge(self, expected: Sequence[Sequence[Mapping[str, Any]]],
              actual: Sequence[Sequence[Mapping[str, Any]]]) -> Judged:
        return judged_tokens(expected, actual, self.tolerance)


def judged_tokens(expected: Sequence[Sequence[Mapping[str, Any]]],
                  actual: Sequence[Sequence[Mapping[str, Any]]], tolerance: Tolerance) -> Judged:
    """A greedy rollout's tokens, judged from both sides' logits at every step (each step's
    outputs per sample): a divergence is a near tie or drift by the logits' `tolerance`."""
    from onnx_parity.compare.tokens import judge_tokens, tokens_sentence

    def logits(rollout: Sequence[Sequence[Mapping[str, Any]]]) -> list[list[Any]]:
        samples = len(rollout[0]) if rollout else 0
        return [[step[s][LOGITS] for step in rollout] for s in range(samples)]

    found = judge_tokens(logits(expected), logits(actual), tolerance)
    said = tokens_sentence(found)
    return Judged(failure=said if found.failed else "",
                  notes=() if found.failed else (said,), tokens=found)


def decoder_stepper(loaded: LoadedModule, case: Case) -> JudgedDecode:
    """The case's greedy rollout: `rollout.steps` calls (default DEFAULT_DECODE_STEPS), its
    prompts left-padded as `rollout.left_padding` says, its tokens judged with the logits'
    tolerance on the case's target."""
    rollout = case.model.rollout
    steps = rollout.steps if rollout is not None else DEFAULT_DECODE_STEPS
    padding = rollout.left_padding if rollout is not None else ()
    config = getattr(loaded.module.lm, "config", None)
    pad = getattr(config, "pad_token_id", None)
    return JudgedDecode(layout_of(loaded), steps, padding,
                        pad if isinstance(pad, int) and pad >= 0 else 0,
                        case.tolerance_for(LOGITS))


def padding_note(stepper: GreedyDecode, samples: Sequence[Sample]) -> str:
    """Whether the case checked padding: which rows were padded, or that none was."""
    rows = max((len(s.inputs[MASK]) for s in samples), default=0)
    pads = stepper.pads(rows)
    if not any(pads):
        return ("padding not checked: the batch's prompts are of equal lengths "
                "(rollout.left_padding pads them)")
    lengths = ", ".join(str(n) for n in pads)
    return f"prompts left-padded by {lengths} tokens, row by row; real positions compared"
