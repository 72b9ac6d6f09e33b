"""Rollouts: several calls per sample, where each side's next inputs are made from its own
previous inputs and outputs (PyTorch from PyTorch, ONNX Runtime from ONNX Runtime), so drift
compounds as it does in production. A `Stepper` says how one call's inputs become the next's;
`Feedback` is the spec's `rollout: {steps, feedback: {output: input}}`. A stepper may also judge
whole rollouts (`RolloutJudge`), beside the comparison of every output at every step."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from onnx_parity.frozen import frozen

if TYPE_CHECKING:
    from onnx_parity.findings import TokenRecord
    from onnx_parity.spec import ModelSpec

Feed = dict[str, np.ndarray]


class Stepper(Protocol):
    """How a rollout goes on: `steps` calls per sample in all (the first takes the dataset's
    inputs), and the inputs of call `step` (1 … steps-1) from one side's own previous call."""

    @property
    def steps(self) -> int: ...

    def next_feed(self, step: int, feed: Mapping[str, np.ndarray],
                  outputs: Mapping[str, Any]) -> Feed: ...


class TeacherForced(Protocol):
    """A stepper (optional: the engine asks with getattr) whose ONNX Runtime side takes the
    reference's choice at every step, each side keeping its own state: a decoder's greedy
    token from PyTorch's logits, the cache from its own call. Until the two sides choose
    differently that is the same as their own choice; after it (a near tie) both still decode
    the same text, so every later step compares like with like."""

    def forced_feed(self, step: int, feed: Mapping[str, np.ndarray],
                    outputs: Mapping[str, Any], reference: Mapping[str, Any]) -> Feed: ...


class Padded(Protocol):
    """A stepper whose feeds hold positions that are not real (a decoder's left padding):
    only the real ones are compared, the others zeroed on both sides (optional: the engine
    asks with getattr)."""

    def real_positions(self, feed: Mapping[str, np.ndarray],
                       outputs: Mapping[str, Any]) -> dict[str, Any]: ...


@frozen
class Feedback:
    """`rollout: {steps: 20, feedback: {stateN: state}}`: each later call takes the same inputs
    as the first, except those fed back, which take the named outputs of the call before."""

    steps: int
    feedback: Mapping[str, str] = field(default_factory=dict)  # output → the input it becomes

    def next_feed(self, step: int, feed: Mapping[str, np.ndarray],
                  outputs: Mapping[str, Any]) -> Feed:
        following = dict(feed)
        for output, name in self.feedback.items():
            following[name] = np.asarray(outputs[output])
        return following


@frozen
class Judged:
    """A stepper's own judgement of a rollout: `failure`, a sentence that fails the case
    whatever the comparisons say (it leads the case's message), notes and details for the
    reports, and the steps whose outputs can be compared at all (None: every step; a decoder
    teacher-forced on PyTorch's tokens compares every step, TeacherForced)."""

    failure: str = ""
    notes: tuple[str, ...] = ()
    tokens: TokenRecord | None = None  # a decoder's greedy tokens, judged (compare/tokens.py)
    compared: int | None = None  # steps comparable on both sides (None: all of them)


class RolloutJudge(Protocol):
    """A stepper that also judges whole rollouts (optional: the engine asks with getattr).
    `expected[step][sample]` and `actual[step][sample]` map every output's name to its value
    (ignored outputs included), PyTorch's and ONNX Runtime's, each from its own rollout; a
    judge that reads only some outputs names them in `judged_outputs` (a tuple, optional), and
    is given only those: the rollout then keeps no more of each step."""

    def judge(self, expected: Sequence[Sequence[Mapping[str, Any]]],
              actual: Sequence[Sequence[Mapping[str, Any]]]) -> Judged: ...


def stepper_of(model: ModelSpec) -> Stepper | None:
    """How the model's rollout goes on, or None for a model checked one call at a time."""
    if model.rollout is None:
        return None
    return Feedback(model.rollout.steps, dict(model.rollout.feedback))
