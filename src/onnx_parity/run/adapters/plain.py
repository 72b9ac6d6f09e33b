"""The plain model, the adapter of every model without `adapter:`: the module as the factory
returns it, exported from the spec's inputs at the dataset's sizes, checked one call per sample
or, under `rollout: {steps, feedback}`, rolled out with its state fed back (`Feedback`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import TYPE_CHECKING, Any

import numpy as np

from onnx_parity.frozen import frozen
from onnx_parity.run.adapters.base import Feed, Served, Serving

if TYPE_CHECKING:
    from onnx_parity.backends import LoadedModule
    from onnx_parity.spec import ModelSpec


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


class Plain:
    """The module as it is; a rollout where the spec gives one."""

    def wrap(self, loaded: LoadedModule, model: ModelSpec) -> LoadedModule:
        return loaded

    def served(self, serving: Serving) -> Served:
        rollout = serving.record.case.model.rollout
        stepper = None if rollout is None else Feedback(rollout.steps, dict(rollout.feedback))
        return Served(serving.samples, stepper)
