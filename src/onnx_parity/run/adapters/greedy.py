"""The one greedy, teacher-forced driver of every language-model adapter (causal-lm's decoder,
seq2seq-lm's decoder half): each later call feeds one side's own greedy token (the argmax of its
own last-position logits) and its own cache (present → past). ONNX Runtime's side is
teacher-forced (`forced_feed`): it takes PyTorch's token with its own cache, the same as its own
token until the two first differ. The tokens are judged from both sides' logits with the
logits' tolerance (compare/tokens.py). An adapter says only how its feeds differ: which cache
goes back in, and what else a step adds (a decoder's mask, grown by one).

Also what both adapters check of a case the same way: the ONNX model's inputs and outputs
against the layout's, the prompt's token ids against the vocabulary, the steps of a rollout.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from onnx_parity.errors import LoadError
from onnx_parity.run.adapters.base import Judged
from onnx_parity.spec.model import DEFAULT_DECODE_STEPS, PROMPT

if TYPE_CHECKING:
    from onnx_parity.backends import OrtTarget
    from onnx_parity.plan.cases import Case
    from onnx_parity.results import Tolerance
    from onnx_parity.spec import InputSpec

MASK = "attention_mask"
LOGITS = "logits"


class Greedy:
    """A greedy rollout's steps after the first (a `Stepper`, `TeacherForced`); the adapter's
    stepper gives `carried` (each past input with the output it takes) and may grow the rest
    of a feed (`grown`)."""

    def carried(self) -> Iterable[tuple[str, str]]:
        raise NotImplementedError

    def grown(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """What of `feed` the next call keeps besides the token and the cache: all of it."""
        return dict(feed)

    def next_feed(self, step: int, feed: Mapping[str, np.ndarray],
                  outputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        return self.following(feed, outputs, outputs)

    def forced_feed(self, step: int, feed: Mapping[str, np.ndarray],
                    outputs: Mapping[str, Any],
                    reference: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The next call on this side's own cache and the reference's greedy token."""
        return self.following(feed, outputs, reference)

    def following(self, feed: Mapping[str, np.ndarray], outputs: Mapping[str, Any],
                  chooser: Mapping[str, Any]) -> dict[str, np.ndarray]:
        following = self.grown(feed)
        following[PROMPT] = chosen_tokens(np.asarray(chooser[LOGITS]))[:, None]
        for past, present in self.carried():
            following[past] = np.asarray(outputs[present])
        return following


class TokensJudged:
    """A greedy rollout judged on its tokens too (a `RolloutJudge`): the logits' `tolerance`
    decides whether a divergence is a near tie or drift. The rollout keeps only the logits of
    every step, not the cache that grows with each."""

    tolerance: Tolerance
    judged_outputs: ClassVar[tuple[str, ...]] = (LOGITS,)

    def judge(self, expected: Sequence[Sequence[Mapping[str, Any]]],
              actual: Sequence[Sequence[Mapping[str, Any]]]) -> Judged:
        return judged_tokens(expected, actual, self.tolerance)


def judged_tokens(expected: Sequence[Sequence[Mapping[str, Any]]],
                  actual: Sequence[Sequence[Mapping[str, Any]]], tolerance: Tolerance) -> Judged:
    """A greedy rollout's tokens, judged from both sides' logits at every step (each step's
    outputs per sample): a divergence is a near tie or drift by the logits' `tolerance`."""
    # only a language model's rollout
    from onnx_parity.compare.tokens import judge_tokens, tokens_sentence

    def logits(rollout: Sequence[Sequence[Mapping[str, Any]]]) -> list[list[Any]]:
        samples = len(rollout[0]) if rollout else 0
        return [[step[s][LOGITS] for step in rollout] for s in range(samples)]

    found = judge_tokens(logits(expected), logits(actual), tolerance)
    said = tokens_sentence(found)
    return Judged(failure=said if found.failed else "",
                  notes=() if found.failed else (said,), tokens=found)


def chosen_tokens(logits: np.ndarray) -> np.ndarray:
    """Each row's greedy token: the argmax of its last position's logits, int64."""
    chosen: np.ndarray = np.argmax(logits[:, -1, :], axis=-1).astype(np.int64)
    return chosen


def decode_steps(case: Case) -> int:
    """The rollout's calls: `rollout.steps`, else DEFAULT_DECODE_STEPS."""
    rollout = case.model.rollout
    return rollout.steps if rollout is not None else DEFAULT_DECODE_STEPS


def check_files(target: OrtTarget, inputs: Sequence[InputSpec], outputs: Sequence[str],
                adapter: str) -> None:
    """The ONNX model's own inputs and outputs against the layout's: a shipped file may name or
    order them otherwise, and the reference's outputs are matched by position."""
    wanted_in = [i.name for i in inputs]
    have_in = [i.name for i in target.input_specs()]
    have_out = list(target.output_names())
    if have_in != wanted_in or have_out != list(outputs):
        raise LoadError(f"the ONNX model takes {', '.join(have_in)} and gives "
                        f"{', '.join(have_out)}; adapter: {adapter} runs a decoder whose inputs "
                        f"are {', '.join(wanted_in)} and outputs {', '.join(outputs)}, "
                        "in that order, as its own export writes them")


def check_vocabulary(ids: np.ndarray, config: Any, adapter: str) -> None:
    """The prompt's token ids below the vocabulary's size, where the config tells it: a
    LoadError with the limit, never the embedding's bare IndexError."""
    vocab = getattr(config, "vocab_size", None)
    if isinstance(vocab, int) and ids.size and (ids.max() >= vocab or ids.min() < 0):
        raise LoadError(
            f"adapter: {adapter}: input_ids hold token {int(ids.max())}, and the model's "
            f"vocabulary has {vocab} (config.vocab_size): give inputs.input_ids high: "
            f"{vocab} (token ids 0 to {vocab - 1})")
