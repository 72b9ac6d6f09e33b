"""What an adapter is, and what each of its optional abilities is, as typed protocols: the run
stage calls these and never an adapter's name.

An `Adapter` wraps the factory's module (`wrap`) and serves each case (`served`): the samples as
the model's first feeds and the `Stepper` its rollout goes on by (None: one call per sample). An
adapter that exports with inputs and outputs of its own is `OwnExport`. A rollout's stepper says
how one call's inputs become the next's, each side from its own previous call (PyTorch from
PyTorch, ONNX Runtime from ONNX Runtime), so drift compounds as it does in production; it may
also be `TeacherForced`, `Padded`, a `RolloutJudge`, or `Encoded` (a decoder that follows an
encoder run and compared first).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

import numpy as np

from onnx_parity.frozen import frozen

if TYPE_CHECKING:
    from onnx_parity.backends import LoadedModule, OrtTarget
    from onnx_parity.findings import TokenRecord
    from onnx_parity.prepare.inputs import Sample
    from onnx_parity.results import OutputComparison
    from onnx_parity.run.keys import Key
    from onnx_parity.run.record import CaseRecord
    from onnx_parity.spec import ModelSpec

Feed = dict[str, np.ndarray]
ExportHow = dict[str, Any]  # prepare/export.export_model's arguments but the opset and path
T = TypeVar("T")


class Once(Protocol):
    """The model's memo, as an adapter sees it: `make`'s value, made once for every case of
    the model that asks by `key` (a failure raised again to each, as `record`'s case reads it)."""

    def __call__(self, key: Key[T], make: Callable[[], T], record: CaseRecord) -> T: ...


@frozen
class Serving:
    """What the run stage hands an adapter to serve a case: the case's record (its case, its
    notes, its stage), the module (None for a shipped file checked alone), the case's session,
    its samples as the dataset made them, a session of another file of the model on the
    case's target, the model's memo, and where the model's files go."""

    record: CaseRecord
    loaded: LoadedModule | None
    target: OrtTarget
    samples: tuple[Sample, ...]
    session: Callable[[CaseRecord, Path], OrtTarget]
    once: Once
    work_dir: Path


@frozen
class Served:
    """A case as its adapter serves it: the samples as the model's first feeds, the rollout's
    stepper (None: one call per sample), and for a model exported in two files, how its first
    half is exported for a case (a twin's, for a cause's re-run with the other exporter)."""

    samples: tuple[Sample, ...]
    stepper: Stepper | None = None
    first_half: Callable[[CaseRecord], Path] | None = None


class Adapter(Protocol):
    """How a model is checked: its module wrapped once, each case served."""

    def wrap(self, loaded: LoadedModule, model: ModelSpec) -> LoadedModule: ...

    def served(self, serving: Serving) -> Served: ...


@runtime_checkable
class OwnExport(Protocol):
    """An adapter whose export takes inputs and gives outputs of its own (a decoder's cache),
    traced at an example of its own, not the spec's inputs and the dataset's sizes."""

    def export_how(self, loaded: LoadedModule, batch: int) -> ExportHow: ...


@runtime_checkable
class Stepper(Protocol):
    """How a rollout goes on: `steps` calls per sample in all (the first takes the dataset's
    inputs), and the inputs of call `step` (1 … steps-1) from one side's own previous call."""

    @property
    def steps(self) -> int: ...

    def next_feed(self, step: int, feed: Mapping[str, np.ndarray],
                  outputs: Mapping[str, Any]) -> Feed: ...


@runtime_checkable
class TeacherForced(Protocol):
    """A stepper whose ONNX Runtime side takes the reference's choice at every step, each side
    keeping its own state: a decoder's greedy token from PyTorch's logits, the cache from its
    own call. Until the two sides choose differently that is the same as their own choice;
    after it (a near tie) both still decode the same text, so every later step compares like
    with like."""

    def forced_feed(self, step: int, feed: Mapping[str, np.ndarray],
                    outputs: Mapping[str, Any], reference: Mapping[str, Any]) -> Feed: ...


@runtime_checkable
class Padded(Protocol):
    """A stepper whose feeds hold positions that are not real (a decoder's left padding): only
    the real ones are compared, the others zeroed on both sides."""

    def real_positions(self, feed: Mapping[str, np.ndarray],
                       outputs: Mapping[str, Any]) -> dict[str, Any]: ...


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


@runtime_checkable
class RolloutJudge(Protocol):
    """A stepper that also judges whole rollouts. `expected[step][sample]` and
    `actual[step][sample]` map each output in `judged_outputs` (every output where None) to its
    value, PyTorch's and ONNX Runtime's, each from its own rollout: the rollout keeps no more of
    each step than the judge reads."""

    @property
    def judged_outputs(self) -> tuple[str, ...] | None: ...

    def judge(self, expected: Sequence[Sequence[Mapping[str, Any]]],
              actual: Sequence[Sequence[Mapping[str, Any]]]) -> Judged: ...


@frozen
class EncoderChecked:
    """The encoder's half of a case: its feeds, both sides' outputs, their comparison, and the
    decoder's first feeds each side makes from its own outputs."""

    names: tuple[str, ...]
    feeds: tuple[Feed, ...]
    expected: list[list[Any]]
    actual: list[list[Any]]
    comparisons: tuple[OutputComparison, ...]
    firsts: tuple[tuple[Feed, ...], tuple[Feed, ...]]  # PyTorch's, ONNX Runtime's

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.comparisons)


@runtime_checkable
class Encoded(Protocol):
    """A stepper whose rollout follows an encoder (an encoder-decoder's decoder): the encoder's
    file and module, and its check, run and compared before the rollout, whose first feeds
    each side makes from its own encoder output."""

    @property
    def encoder(self) -> Path | None: ...

    @property
    def encoder_module(self) -> Any: ...

    def check_encoder(self, record: CaseRecord) -> EncoderChecked: ...
