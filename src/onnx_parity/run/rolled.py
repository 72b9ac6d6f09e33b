"""Rollouts run: each side calls the model `steps` times per sample, feeding its own outputs
back as the stepper says (prepare/stepper.py), PyTorch from PyTorch and ONNX Runtime from ONNX
Runtime; every compared output judged at every step (compare/), the rollout judged and said
(compare/stepwise.py); and the judged step's evidence for the follow-ups, both sides on the
same inputs. The two sides roll in lockstep and each step is compared as it comes: a rollout
keeps, of every step, its comparisons and what the stepper's judge reads (a decoder's
logits, for its tokens), and the tensors of the few steps the follow-ups may need, so its
memory grows with the steps even where each step's state grows too (a decoder's cache)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from onnx_parity.compare.chain import Compared
from onnx_parity.errors import CompareError, LoadError, StageError
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


Step = tuple[tuple[Feed, ...], Outputs]  # one step of one side: its feeds and their outputs

# A reference rollout is kept for the model's next case (another target) up to this size; a
# larger one is rolled again by each case, so that no case holds every step of a long rollout.
KEPT_REFERENCE_BYTES = 64 << 20
# The steps before the judged one whose inputs are kept besides it, as the rollout goes.
KEPT_BEFORE = 2
# The steps of a rollout its latency times, spread over it: timing costs the same at any length.
TIMED_STEPS = 8


def steps_of(stepper: Stepper, first: Sequence[Mapping[str, np.ndarray]],
             call: Callable[[Feed], list[Any]], names: Sequence[str],
             leader: Iterable[Step] | None = None) -> Iterator[tuple[Step | None, Step]]:
    """`stepper.steps` calls per sample, step by step, the first on `first`, each later one on
    what the stepper makes of this side's own feed and outputs before it; with a `leader` (the
    reference's steps, consumed in lockstep) and a TeacherForced stepper, on the leader's
    choice too. Yields (the leader's step or None, this side's step); holds only the step
    before."""
    forced = getattr(stepper, "forced_feed", None) if leader is not None else None
    led_steps: Iterator[Step | None] = iter(leader) if leader is not None else iter(
        [None] * stepper.steps)
    feeds = tuple(dict(f) for f in first)
    before: Outputs = []
    before_led: Step | None = None

    def named(outputs: Sequence[Any]) -> dict[str, Any]:
        return dict(zip(names, outputs, strict=False))

    for step in range(stepper.steps):
        led = next(led_steps)
        if step and forced is not None and before_led is not None:
            feeds = tuple(forced(step, feed, named(outputs), named(chosen))
                          for feed, outputs, chosen in zip(feeds, before, before_led[1],
                                                           strict=True))
        elif step:
            feeds = tuple(stepper.next_feed(step, feed, named(outputs))
                          for feed, outputs in zip(feeds, before, strict=True))
        before = [call(feed) for feed in feeds]
        yield led, (feeds, before)
        before_led = led


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
    """Both rollouts in lockstep, every compared output judged at every step as it comes; of
    each step only its comparisons and what the stepper's judge reads are kept (a decoder's
    logits), and the inputs of the steps the follow-ups and the latency need: memory grows with
    the steps, not with their square (a decoder's cache grows at every step). Each side starts
    from the case's feeds, or from its own of `firsts` (PyTorch's, ONNX Runtime's: an
    encoder-decoder's decoder, fed its own side's encoder output)."""
    from onnx_parity.backends import torch_outputs
    from onnx_parity.compare.blind import Watch, distinct_inputs
    from onnx_parity.compare.outputs import compare_case
    from onnx_parity.compare.quick import Nearest, quick_case, quick_judged
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
    first, own_first = firsts or (prepared.feeds, prepared.feeds)
    key = RolloutReferenceKey(prepared.data)
    kept: list[Step] | None = []
    failed: list[StageError] = []  # the reference's own failure, if it meets one
    if memo.has(key):  # an earlier case's reference (or the failure it met), rolled once
        stored = memo.get(key, lambda: [], case.id)
        leader: Iterable[Step] = stored
        kept = None
    else:
        leader = _reference_steps(stepper, first, reference, names, failed)
    keep = [names.index(n) for n in compared]
    watch = Watch(distinct=distinct_inputs(first), from_model=True,
                  constant=frozenset(model.constant_outputs))
    sets = (model.detections, "PyTorch")  # a detector's sets, at every step as in one call
    judged_names = getattr(stepper, "judged_outputs", None)
    judge = getattr(stepper, "judge", None) is not None
    seen = _Seen(keep=KEPT_BEFORE)
    timed = _timed_steps(stepper.steps)
    timed_feeds: list[Feed] = []  # ONNX Runtime's inputs at the steps the latency times
    steps: list[tuple[OutputComparison, ...] | Exception] = []
    for_judge: tuple[list[list[dict[str, Any]]], list[list[dict[str, Any]]]] = ([], [])
    quick: set[int] = set()  # the steps that plainly passed, their comparisons only in part
    best = Nearest()
    size = 0
    try:
        for led, mine in steps_of(stepper, own_first, prepared.target.run, names, leader):
            assert led is not None
            if len(steps) in timed:
                timed_feeds.extend(mine[0])
            if kept is not None:
                size += _bytes(led)
                kept = kept if size <= KEPT_REFERENCE_BYTES else None
                if kept is not None:
                    kept.append(led)
            record.enter("compare")
            expected = _kept(_real_step(stepper, names, led), keep)
            actual = _kept(_real_step(stepper, names, mine), keep)
            found: tuple[OutputComparison, ...] | Exception | None = quick_case(
                compared, expected, actual, case.tolerance_for, watch, *sets[:1])
            if found is not None:
                quick.add(len(steps))
            else:
                try:
                    found = compare_case(compared, expected, actual, case.tolerance_for, watch,
                                         *sets)
                except CompareError as exc:  # raised only if the judge leaves it compared
                    found = exc
            best.add(len(steps), found, (expected, actual) if len(steps) in quick else None)
            steps.append(found)
            seen.add(len(steps) - 1, mine, found)
            if judge:
                for side, outputs in zip(for_judge, (led[1], mine[1]), strict=True):
                    side.append([_judged(names, sample, judged_names) for sample in outputs])
            record.enter("run")
    except StageError as exc:
        if failed:  # the reference failed: the model's next case is told so
            memo.put(key, exc)
        raise
    if kept is not None and len(kept) == stepper.steps:
        memo.put(key, kept)
    time_case(memo, record, prepared, timed_feeds)
    record.enter("compare")
    own = _judge(stepper, *for_judge)
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
            pair = (_kept(_real_step(stepper, names, led), keep),
                    _kept(_real_step(stepper, names, mine), keep))
        compared_steps[at] = compare_case(compared, *pair, case.tolerance_for, watch, *sets)
    judged = judge_rollout(compared_steps, getattr(stepper, "feedback", {}))
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
    real = _real_step(stepper, names, (feeds, [reference(feed) for feed in feeds]))
    local_expected = _kept(real, keep)
    local_actual = _kept(_real_step(stepper, names, mine), keep)
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


class _Seen:
    """The inputs of the steps the follow-ups may need, kept as the rollout goes: the first
    failing step's and the first erring step's (with the `keep` steps before each), and the
    step nearest its tolerance so far; every other step's are let go."""

    def __init__(self, keep: int) -> None:
        from collections import deque

        self.recent: deque[tuple[int, Step]] = deque(maxlen=keep + 1)
        self.kept: dict[int, Step] = {}
        self.failed = self.erred = False
        self.nearest: tuple[float, int] | None = None

    def add(self, step: int, mine: Step,
            found: tuple[OutputComparison, ...] | Exception) -> None:
        from onnx_parity.compare.outputs import verdict

        self.recent.append((step, mine))
        if isinstance(found, Exception):
            return
        status = verdict(found)
        if (status == "failed" and not self.failed) or (status == "error" and not self.erred):
            # The judged step from now on (compare/stepwise.py): the nearest is let go.
            if self.nearest is not None and not (self.failed or self.erred):
                self.kept.pop(self.nearest[1], None)
            self.failed = self.failed or status == "failed"
            self.erred = self.erred or status == "error"
            self.kept.update(self.recent)
        if self.failed or self.erred:
            return
        for c in found:  # as compare/stepwise.py's nearest_step chooses
            near = c.max_abs / c.atol if c.atol > 0 else c.max_abs
            if self.nearest is None or near > self.nearest[0]:
                if self.nearest is not None and self.nearest[1] != step:
                    self.kept.pop(self.nearest[1], None)
                self.nearest = (near, step)
                self.kept[step] = mine

    def step(self, step: int) -> Step | None:
        return self.kept.get(step)


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


def _timed_steps(steps: int) -> frozenset[int]:
    """The steps whose inputs the latency times: at most TIMED_STEPS, spread from the first to
    the last (a decoder's later steps carry a longer cache), so that timing costs the same
    whatever the rollout's length."""
    count = min(steps, TIMED_STEPS)
    if count <= 1:
        return frozenset(range(count))
    return frozenset(round(i * (steps - 1) / (count - 1)) for i in range(count))


def _bytes(step: Step) -> int:
    feeds, outputs = step
    return sum(getattr(v, "nbytes", 0) for feed in feeds for v in feed.values()) + sum(
        getattr(v, "nbytes", 0) for sample in outputs for v in sample)


def _judged(names: Sequence[str], sample: Sequence[Any],
            wanted: Sequence[str] | None) -> dict[str, Any]:
    """What the stepper's judge reads of one sample's outputs at one step: the outputs it
    names (`judged_outputs`), else every one."""
    named = dict(zip(names, sample, strict=False))
    return named if wanted is None else {n: named[n] for n in wanted if n in named}


def _real_step(stepper: Stepper, names: Sequence[str], step: Step) -> Outputs:
    """One step's outputs with only their real positions kept, where the stepper pads its
    feeds (prepare/stepper.Padded); as they are otherwise."""
    real = getattr(stepper, "real_positions", None)
    feeds, outputs = step
    if real is None:
        return outputs
    kept = []
    for feed, sample in zip(feeds, outputs, strict=True):
        found = real(feed, dict(zip(names, sample, strict=False)))
        kept.append([found.get(name, value) for name, value in zip(names, sample, strict=False)])
    return kept


def _kept(outputs: Sequence[Sequence[Any]], keep: Sequence[int]) -> Outputs:
    return [[sample[k] for k in keep] for sample in outputs]


def _judge(stepper: Stepper, expected: list[list[dict[str, Any]]],
           actual: list[list[dict[str, Any]]]) -> Judged:
    """The stepper's own judgement of the two rollouts, where it has one (RolloutJudge), on
    what it reads of each step's outputs."""
    judge = getattr(stepper, "judge", None)
    if judge is None:
        return Judged()
    judged = judge(expected, actual)
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
