"""Rollouts run: each side calls the model `steps` times per sample, feeding its own outputs
back as the stepper says (prepare/stepper.py), PyTorch from PyTorch and ONNX Runtime from ONNX
Runtime; every compared output judged at every step (compare/), the rollout judged and said
(compare/stepwise.py); and the judged step's evidence for the follow-ups, both sides on the
same inputs."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from onnx_parity.compare.chain import Compared
from onnx_parity.errors import CompareError, LoadError
from onnx_parity.prepare.stepper import Feedback, Judged, Stepper
from onnx_parity.run.keys import RolloutReferenceKey
from onnx_parity.wording import counted

if TYPE_CHECKING:
    from onnx_parity.findings import RolloutRecord
    from onnx_parity.results import OutputComparison
    from onnx_parity.run.memo import ModelMemo
    from onnx_parity.run.prepared import PreparedCase
    from onnx_parity.run.record import CaseRecord

logger = logging.getLogger(__name__)

Feed = dict[str, np.ndarray]
Outputs = list[list[Any]]  # per sample, per output


@dataclass(frozen=True)
class Trajectory:
    """One side's rollout: the feeds of each step and sample, and the outputs they gave."""

    feeds: tuple[tuple[Feed, ...], ...]  # [step][sample]
    outputs: tuple[Outputs, ...]  # [step][sample][output], every output the model gives


def roll(stepper: Stepper, first: Sequence[Mapping[str, np.ndarray]],
         call: Callable[[Feed], list[Any]], names: Sequence[str],
         leader: Trajectory | None = None) -> Trajectory:
    """`stepper.steps` calls per sample, the first on `first`, each later one on what the
    stepper makes of this side's own feed and outputs before it; with a `leader` (the
    reference's rollout) and a TeacherForced stepper, on the leader's choice too."""
    forced = getattr(stepper, "forced_feed", None) if leader is not None else None
    feeds = tuple(dict(f) for f in first)
    all_feeds: list[tuple[Feed, ...]] = []
    all_outputs: list[Outputs] = []

    def named(outputs: Sequence[Any]) -> dict[str, Any]:
        return dict(zip(names, outputs, strict=False))

    for step in range(stepper.steps):
        if step and forced is not None and leader is not None:
            feeds = tuple(forced(step, feed, named(outputs), named(led))
                          for feed, outputs, led in zip(feeds, all_outputs[-1],
                                                        leader.outputs[step - 1], strict=True))
        elif step:
            feeds = tuple(stepper.next_feed(step, feed, named(outputs))
                          for feed, outputs in zip(feeds, all_outputs[-1], strict=True))
        all_feeds.append(feeds)
        all_outputs.append([call(feed) for feed in feeds])
    return Trajectory(tuple(all_feeds), tuple(all_outputs))


def check_feedback(stepper: Stepper, names: Sequence[str], inputs: Sequence[str]) -> None:
    """The spec's feedback against what the model really takes and gives, where the spec did
    not name them (an ONNX file's own names)."""
    if not isinstance(stepper, Feedback):
        return
    for output, name in stepper.feedback.items():
        if output not in names:
            raise CompareError(f"rollout feedback names output {output}, which the model does "
                               f"not output (its outputs: {', '.join(names)})")
        if name not in inputs:
            raise LoadError(f"rollout feedback feeds {output} to input {name}, which the model "
                            f"does not take (its inputs: {', '.join(inputs)})")


@dataclass(frozen=True)
class Rolled:
    """A rollout case's outcome and what its follow-ups need: the judged step (the first that
    failed, else the one nearest its tolerance) with both sides on ONNX Runtime's own inputs
    of that step, so that what that one call adds is what localization and the causes see."""

    outcome: Compared  # the judged step's comparisons, as each side rolled, and their words
    record: RolloutRecord
    feeds: tuple[Feed, ...]  # ONNX Runtime's inputs at the judged step
    expected: Outputs  # PyTorch on those inputs
    actual: Outputs  # ONNX Runtime on those inputs
    local: tuple[OutputComparison, ...]  # the two compared: that call alone


def rolled_case(memo: ModelMemo, record: CaseRecord, prepared: PreparedCase,
                compared: Sequence[str],
                firsts: tuple[Sequence[Feed], Sequence[Feed]] | None = None) -> Rolled:
    """Both rollouts, every compared output at every step, the judgement; each side from the
    case's feeds, or from its own of `firsts` (PyTorch's, ONNX Runtime's: an encoder-decoder's
    decoder, fed its own side's encoder output)."""
    from onnx_parity.backends import torch_outputs
    from onnx_parity.compare.blind import Watch, distinct_inputs
    from onnx_parity.compare.outputs import compare_case
    from onnx_parity.compare.stepwise import judge_rollout, rollout_message
    from onnx_parity.run.latency import time_case

    case, model, names = prepared.case, memo.task.model, prepared.names
    stepper, loaded = prepared.stepper, prepared.loaded
    assert stepper is not None and loaded is not None
    check_feedback(stepper, names, list(prepared.samples[0].inputs) if prepared.samples else [])
    record.note(_note(stepper))

    def reference(feed: Feed) -> list[Any]:
        return torch_outputs(loaded.module, feed, model.forward_args, loaded.binding)

    record.enter("run")
    first, mine = firsts or (prepared.feeds, prepared.feeds)
    expected = memo.get(RolloutReferenceKey(prepared.data),
                        lambda: roll(stepper, first, reference, names), case.id)
    actual = roll(stepper, mine, prepared.target.run, names, leader=expected)
    time_case(memo, record, prepared, [feed for step in actual.feeds for feed in step])
    record.enter("compare")
    keep = [names.index(n) for n in compared]
    watch = Watch(distinct=distinct_inputs(first), from_model=True,
                  constant=frozenset(model.constant_outputs))
    own = _judge(stepper, names, expected, actual)
    record.notes.extend(own.notes)
    if own.tokens is not None:
        record.found(tokens=own.tokens)
    pairs = list(zip(_real(stepper, names, expected), _real(stepper, names, actual),
                     strict=True))[:own.compared]
    sets = (model.detections, "PyTorch")  # a detector's sets, at every step as in one call
    steps = [compare_case(compared, _kept(e, keep), _kept(a, keep), case.tolerance_for, watch,
                          *sets)
             for e, a in pairs]
    judged = judge_rollout(steps, getattr(stepper, "feedback", {}))
    step = (judged.judged or 1) - 1
    # The judged step is the first that failed, so its verdict is the whole rollout's.
    outcome = Compared(comparisons=steps[step], said=rollout_message(judged, steps[step]),
                       failures=(own.failure,) if own.failure else (), rollout=True)
    feeds = actual.feeds[step]
    record.enter("run")
    real = _real(stepper, names, Trajectory((feeds,), ([reference(feed) for feed in feeds],)))
    local_expected = _kept(real[0], keep)
    local_actual = _kept(_real(stepper, names, actual)[step], keep)
    record.enter("compare")
    local = compare_case(compared, local_expected, local_actual, case.tolerance_for, None,
                         *sets)
    return Rolled(outcome=outcome, record=judged, feeds=feeds, expected=local_expected,
                  actual=local_actual, local=local)


def _real(stepper: Stepper, names: Sequence[str], trajectory: Trajectory) -> tuple[Outputs, ...]:
    """Each step's outputs with only their real positions kept, where the stepper pads its
    feeds (prepare/stepper.Padded); as they are otherwise."""
    real = getattr(stepper, "real_positions", None)
    if real is None:
        return trajectory.outputs
    kept = []
    for feeds, outputs in zip(trajectory.feeds, trajectory.outputs, strict=True):
        step = []
        for feed, sample in zip(feeds, outputs, strict=True):
            found = real(feed, dict(zip(names, sample, strict=False)))
            step.append([found.get(name, value) for name, value in zip(names, sample,
                                                                          strict=False)])
        kept.append(step)
    return tuple(kept)


def _kept(outputs: Sequence[Sequence[Any]], keep: Sequence[int]) -> Outputs:
    return [[sample[k] for k in keep] for sample in outputs]


def _judge(stepper: Stepper, names: Sequence[str], expected: Trajectory,
           actual: Trajectory) -> Judged:
    """The stepper's own judgement of the two rollouts, where it has one (RolloutJudge)."""
    judge = getattr(stepper, "judge", None)
    if judge is None:
        return Judged()

    def named(trajectory: Trajectory) -> list[list[dict[str, Any]]]:
        return [[dict(zip(names, sample, strict=False)) for sample in step]
                for step in trajectory.outputs]

    judged = judge(named(expected), named(actual))
    assert isinstance(judged, Judged)
    return judged


def _note(stepper: Stepper) -> str:
    steps = f"rollout: {counted(stepper.steps, 'step')}"
    if getattr(stepper, "forced_feed", None) is not None:
        return f"{steps}, each side its own cache, both fed PyTorch's token"
    if isinstance(stepper, Feedback) and stepper.feedback:
        fed = ", ".join(f"{output} → {name}" for output, name in stepper.feedback.items())
        return f"{steps}, each side fed its own outputs back ({fed})"
    return steps
