"""Rollouts: several calls per sample, where each side's next inputs are made from its own
previous inputs and outputs (PyTorch from PyTorch, ONNX Runtime from ONNX Runtime), so drift
compounds as it does in production. A `Stepper` says how one call's inputs become the next's;
`Feedback` is the spec's `rollout: {steps, feedback: {output: input}}`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

Feed = dict[str, np.ndarray]


class Stepper(Protocol):
    """How a rollout goes on: `steps` calls per sample in all (the first takes the dataset's
    inputs), and the inputs of call `step` (1 … steps-1) from one side's own previous call."""

    @property
    def steps(self) -> int: ...

    def next_feed(self, step: int, feed: Mapping[str, np.ndarray],
                  outputs: Mapping[str, Any]) -> Feed: ...


@dataclass(frozen=True)
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
