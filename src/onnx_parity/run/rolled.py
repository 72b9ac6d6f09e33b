"""Rollouts run: each side calls the model `steps` times per sample, feeding its own outputs
back as the stepper says (run/adapters/), PyTorch from PyTorch and ONNX Runtime from ONNX
Runtime; every compared output judged at every step (compare/), the rollout judged and said
(compare/stepwise.py); and the judged step's evidence for the follow-ups, both sides on the
same inputs. The two sides roll in lockstep and each step is compared as it comes: a rollout
keeps, of every step, its comparisons and what the stepper's judge reads (a decoder's
logits, for its tokens), and the tensors of the few steps the follow-ups may need, so its
memory grows with the steps even where each step's state grows too (a decoder's cache)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from onnx_parity.compare.blind import Watch, distinct_inputs
from onnx_parity.compare.chain import Compared
from onnx_parity.compare.outputs import compare_case
from onnx_parity.compare.quick import quick_judged
from onnx_parity.compare.stepwise import judge_rollout, rollout_message
from onnx_parity.errors import CompareError, LoadError, StageError
from onnx_parity.frozen import frozen
from onnx_parity.run.adapters.base import Judged, RolloutJudge, Stepper, TeacherForced
from onnx_parity.run.adapters.plain import Feedback
from onnx_parity.run.keys import Data, RolloutReferenceKey
from onnx_parity.run.latency import time_case
from onnx_parity.run.lockstep import Feed, Outputs, Step, kept, lockstep, real_step, steps_of
from onnx_parity.wording import counted

if TYPE_CHECKING:
    from onnx_parity.findings import RolloutRecord
    from onnx_parity.results import OutputComparison
    from onnx_parity.run.prepared import PreparedCase
    from onnx_parity.run.record import CaseRecord

logger = logging.getLogger(__name__)

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


@frozen
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


def rolled_case(record: CaseRecord, prepared: PreparedCase,
                compared: Sequence[str],
                firsts: tuple[Sequence[Feed], Sequence[Feed]] | None = None) -> Rolled:
    """Both rollouts in lockstep, every compared output judged at every step as it comes; of
    each step only its comparisons and what the stepper's judge reads are kept (a decoder's
    logits), and the inputs of the steps the follow-ups and the latency need: memory grows with
    the steps, not with their square (a decoder's cache grows at every step). Each side starts
    from the case's feeds, or from its own of `firsts` (PyTorch's, ONNX Runtime's: an
    encoder-decoder's decoder, fed its own side's encoder output)."""
    # the PyTorch reference's module: only a torch model
    from onnx_parity.backends import torch_outputs

    case, model, names = prepared.case, prepared.task.model, prepared.names
    stepper, loaded = prepared.stepper, prepared.loaded
    assert stepper is not None and loaded is not None
    check_feedback(stepper, names, list(prepared.samples[0].inputs) if prepared.samples else [])
    record.note(_note(stepper))

    def reference(feed: Feed) -> list[Any]:
        return torch_outputs(loaded.module, feed, model.forward_args, loaded.binding)

    record.enter("run")
    first, own_first = firsts or (prepared.feeds, prepared.feeds)
    key = RolloutReferenceKey(prepared.data)
    # The reference's steps are kept (where small) for a later case of the model on the same
    # samples (another target, another precision); with none, they are let go as they come.
    hold = any(c.id != case.id and Data.of(c.dataset, c.batch_size) == prepared.data
               for c in prepared.task.cases)
    shared = prepared.on_data.made
    failed: list[StageError] = []  # the reference's own failure, if it meets one
    if shared.has(key):  # an earlier case's reference (or the failure it met), rolled once
        stored = shared.value(key, lambda: [], case.id)
        leader: Iterable[Step] = stored
        hold = False
    else:
        leader = _reference_steps(stepper, first, reference, names, failed)
    keep = [names.index(n) for n in compared]
    watch = Watch(distinct=distinct_inputs(first), from_model=True,
                  constant=frozenset(model.constant_outputs))
    sets = (model.detections, "PyTorch")  # a detector's sets, at every step as in one call
    try:
        stepped = lockstep(stepper, leader, own_first, prepared.target.run, names, compared,
                           case.tolerance_for, watch, sets, record.enter, keep_reference=hold)
    except StageError as exc:
        if failed:  # the reference failed: the model's next case is told so
            shared.put(key, exc)
        raise
    steps, quick, best, seen = stepped.steps, stepped.quick, stepped.best, stepped.seen
    if stepped.reference is not None and len(stepped.reference) == stepper.steps:
        shared.put(key, stepped.reference)
    time_case(record, prepared, stepped.timed_feeds)
    record.enter("compare")
    own = _judge(stepper, *stepped.for_judge)
    record.notes.extend(own.notes)
    if own.tokens is not None:
        record.found(tokens=own.tokens)
    compared_steps: list[tuple[OutputComparison, ...]] = []
    for found in steps[:own.compared]:
        if isinstance(found, Exception):
            raise found
        compared_steps.append(found)
    at = quick_judged(compared_steps, quick)
    if at is not None:  # the judged step plainly passed: its full comparison, as the loop's
        if best.step == at and best.pair is not None:
            pair = best.pair
        else:  # a judge cut the steps short before the nearest so far: rolled to again
            led, mine = _pair_at(stepper, (first, own_first), reference, prepared.target.run,
                                 names, at)
            pair = (kept(real_step(stepper, names, led), keep),
                    kept(real_step(stepper, names, mine), keep))
        compared_steps[at] = compare_case(compared, *pair, case.tolerance_for, watch, *sets)
    judged = judge_rollout(compared_steps,
                           stepper.feedback if isinstance(stepper, Feedback) else {})
    step = (judged.judged or 1) - 1
    # The judged step is the first that failed, so its verdict is the whole rollout's.
    outcome = Compared(comparisons=compared_steps[step],
                       said=rollout_message(judged, compared_steps[step]),
                       failures=(own.failure,) if own.failure else (), rollout=True)
    record.enter("run")
    # The judged step's inputs and outputs; a step none of the rules kept (a judge that cut
    # the steps short) is rolled to again.
    mine = seen.step(step) or _step_at(stepper, (first, own_first), reference,
                                       prepared.target.run, names, step)
    feeds = mine[0]
    real = real_step(stepper, names, (feeds, [reference(feed) for feed in feeds]))
    local_expected = kept(real, keep)
    local_actual = kept(real_step(stepper, names, mine), keep)
    record.enter("compare")
    local = compare_case(compared, local_expected, local_actual, case.tolerance_for, None,
                         *sets)
    return Rolled(outcome=outcome, record=judged, feeds=feeds, expected=local_expected,
                  actual=local_actual, local=local)


def _reference_steps(stepper: Stepper, first: Sequence[Mapping[str, np.ndarray]],
                     reference: Callable[[Feed], list[Any]], names: Sequence[str],
                     failed: list[StageError]) -> Iterator[Step]:
    """PyTorch's steps, one at a time; a failure of its own is noted in `failed`."""
    try:
        for _, step in steps_of(stepper, first, reference, names):
            yield step
    except StageError as exc:
        failed.append(exc)
        raise


def _step_at(stepper: Stepper,
             firsts: tuple[Sequence[Mapping[str, np.ndarray]], Sequence[Mapping[str, np.ndarray]]],
             reference: Callable[[Feed], list[Any]], call: Callable[[Feed], list[Any]],
             names: Sequence[str], step: int) -> Step:
    """ONNX Runtime's step `step`, rolled again from the start (each side from its own first
    feeds), keeping nothing else."""
    return _pair_at(stepper, firsts, reference, call, names, step)[1]


def _pair_at(stepper: Stepper,
             firsts: tuple[Sequence[Mapping[str, np.ndarray]], Sequence[Mapping[str, np.ndarray]]],
             reference: Callable[[Feed], list[Any]], call: Callable[[Feed], list[Any]],
             names: Sequence[str], step: int) -> tuple[Step, Step]:
    """Both sides' step `step` (PyTorch's, ONNX Runtime's), rolled again from the start."""
    leader = (led for _, led in steps_of(stepper, firsts[0], reference, names))
    for index, (led, mine) in enumerate(steps_of(stepper, firsts[1], call, names, leader)):
        if index == step:
            assert led is not None
            return led, mine
    raise ValueError(f"the rollout has no step {step + 1}")


def _judge(stepper: Stepper, expected: list[list[dict[str, Any]]],
           actual: list[list[dict[str, Any]]]) -> Judged:
    """The stepper's own judgement of the two rollouts, where it has one (RolloutJudge), on
    what it reads of each step's outputs."""
    return stepper.judge(expected, actual) if isinstance(stepper, RolloutJudge) else Judged()


def _note(stepper: Stepper) -> str:
    steps = f"rollout: {counted(stepper.steps, 'step')}"
    if isinstance(stepper, TeacherForced):
        return f"{steps}, each side its own cache, both fed PyTorch's token"
    if isinstance(stepper, Feedback) and stepper.feedback:
        fed = ", ".join(f"{output} → {name}" for output, name in stepper.feedback.items())
        return f"{steps}, each side fed its own outputs back ({fed})"
    return steps
