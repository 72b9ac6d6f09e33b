"""A rollout's steps, both sides in lockstep (run/rolled.py's loop): each side calls the model
`steps` times per sample, feeding its own outputs back as the stepper says, and every step is
compared as it comes, the ones that plainly pass by compare/quick.py, the others in full. Of
every step only its comparisons and what the stepper's judge reads are kept, and the inputs of
the few steps the follow-ups and the latency need, so memory grows with the steps even where
each step's state grows too (a decoder's cache)."""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from onnx_parity.compare.outputs import compare_case, verdict
from onnx_parity.compare.quick import Nearest, Scratch, quick_case
from onnx_parity.compare.stepwise import nearness
from onnx_parity.errors import CompareError
from onnx_parity.run.adapters.base import Padded, RolloutJudge, Stepper, TeacherForced

if TYPE_CHECKING:
    from onnx_parity.compare.blind import Watch
    from onnx_parity.literals import Stage
    from onnx_parity.results import OutputComparison, Tolerance
    from onnx_parity.spec.model import Detections

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
    forced = stepper.forced_feed if leader is not None and isinstance(
        stepper, TeacherForced) else None
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


@dataclass
class Stepped:
    """What the lockstep loop kept: every step's comparisons (or the CompareError a step
    raised), the steps compared only in part and the nearest of them with its compared
    outputs, the inputs of the steps the follow-ups need, what the judge reads of each step,
    the inputs the latency times, and the reference's steps where they are small enough to
    keep for the model's next case (else None)."""

    steps: list[tuple[OutputComparison, ...] | Exception] = field(default_factory=list)
    quick: set[int] = field(default_factory=set)
    best: Nearest = field(default_factory=Nearest)
    seen: Seen = field(default_factory=lambda: Seen(keep=KEPT_BEFORE))
    for_judge: tuple[list[list[dict[str, Any]]], list[list[dict[str, Any]]]] = field(
        default_factory=lambda: ([], []))
    timed_feeds: list[Feed] = field(default_factory=list)
    reference: list[Step] | None = None


def lockstep(stepper: Stepper, leader: Iterable[Step], first: Sequence[Mapping[str, np.ndarray]],
             call: Callable[[Feed], list[Any]], names: Sequence[str], compared: Sequence[str],
             tolerance_for: Callable[[str], Tolerance], watch: Watch,
             sets: tuple[Detections | None, str], enter: Callable[[Stage], None],
             keep_reference: bool) -> Stepped:
    """ONNX Runtime's steps from `first` (through `call`) against the `leader`'s (PyTorch's),
    each compared as it comes; `enter` is told each stage ("run", "compare") as the loop goes
    from one to the other. A CompareError a step raises is kept as that step's: it is raised
    only if the stepper's judge leaves that step compared."""
    out = Stepped(reference=[] if keep_reference else None)
    tolerance_for = functools.cache(tolerance_for)  # the same at every step: resolved once
    scratch = Scratch()  # the float32 check's buffers, reused from step to step
    keep = [names.index(n) for n in compared]
    # Each step's outputs as they come where every one is compared and none is padded.
    whole = keep == list(range(len(names))) and not isinstance(stepper, Padded)
    judge = isinstance(stepper, RolloutJudge)
    judged_names = stepper.judged_outputs if isinstance(stepper, RolloutJudge) else None
    timed = _timed_steps(stepper.steps)
    steps, size = out.steps, 0
    for led, mine in steps_of(stepper, first, call, names, leader):
        assert led is not None
        at = len(steps)
        if at in timed:
            out.timed_feeds.extend(mine[0])
        if out.reference is not None:
            size += _bytes(led)
            if size <= KEPT_REFERENCE_BYTES:
                out.reference.append(led)
            else:
                out.reference = None
        enter("compare")
        if whole:
            expected, actual = led[1], mine[1]
        else:
            expected = kept(real_step(stepper, names, led), keep)
            actual = kept(real_step(stepper, names, mine), keep)
        found: tuple[OutputComparison, ...] | Exception | None = quick_case(
            compared, expected, actual, tolerance_for, watch, sets[0], scratch)
        if found is not None:
            out.quick.add(at)
            out.best.add(at, found, (expected, actual))
        else:
            try:
                found = compare_case(compared, expected, actual, tolerance_for, watch, *sets)
            except CompareError as exc:  # raised only if the judge leaves it compared
                found = exc
            out.best.add(at, found, None)
        steps.append(found)
        out.seen.add(at, mine, found)
        if judge:
            for side, outputs in zip(out.for_judge, (led[1], mine[1]), strict=True):
                side.append([_judged(names, sample, judged_names) for sample in outputs])
        enter("run")
    return out


class Seen:
    """The inputs of the steps the follow-ups may need, kept as the rollout goes: the first
    failing step's and the first erring step's (with the `keep` steps before each), and the
    step nearest its tolerance so far; every other step's are let go."""

    def __init__(self, keep: int) -> None:
        self.recent: deque[tuple[int, Step]] = deque(maxlen=keep + 1)
        self.kept: dict[int, Step] = {}
        self.failed = self.erred = False
        self.nearest: tuple[float, int] | None = None

    def add(self, step: int, mine: Step,
            found: tuple[OutputComparison, ...] | Exception) -> None:
        self.recent.append((step, mine))
        if isinstance(found, Exception):
            return
        status = "passed" if all(c.passed and not c.powerless for c in found) else verdict(found)
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
            near = nearness(c)
            if self.nearest is None or near > self.nearest[0]:
                if self.nearest is not None and self.nearest[1] != step:
                    self.kept.pop(self.nearest[1], None)
                self.nearest = (near, step)
                self.kept[step] = mine

    def step(self, step: int) -> Step | None:
        return self.kept.get(step)


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


def real_step(stepper: Stepper, names: Sequence[str], step: Step) -> Outputs:
    """One step's outputs with only their real positions kept, where the stepper pads its
    feeds (run/adapters/base.Padded); as they are otherwise."""
    feeds, outputs = step
    if not isinstance(stepper, Padded):
        return outputs
    real = stepper.real_positions
    found_kept = []
    for feed, sample in zip(feeds, outputs, strict=True):
        found = real(feed, dict(zip(names, sample, strict=False)))
        found_kept.append([found.get(name, value)
                           for name, value in zip(names, sample, strict=False)])
    return found_kept


def kept(outputs: Sequence[Sequence[Any]], keep: Sequence[int]) -> Outputs:
    """The compared outputs (their positions `keep`) of each sample."""
    return [[sample[k] for k in keep] for sample in outputs]
