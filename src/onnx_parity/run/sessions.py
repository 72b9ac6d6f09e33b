"""What a model's cases run on, made once in a worker through its memo: each model file's
session on each target, and each dataset's samples with the values made on them (OnData)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from onnx_parity.backends.kinds import make_target
from onnx_parity.errors import LoadError, StageError
from onnx_parity.frozen import frozen
from onnx_parity.prepare.inputs import random_samples, recorded_samples
from onnx_parity.run.adapters import adapter_for
from onnx_parity.run.adapters.base import OwnExport
from onnx_parity.run.keys import Data, DataKey, Made, SessionKey
from onnx_parity.run.memo import ModelMemo

if TYPE_CHECKING:
    from onnx_parity.backends import LoadedModule, OrtTarget
    from onnx_parity.prepare.inputs import Sample
    from onnx_parity.run.record import CaseRecord
    from onnx_parity.spec import DatasetSpec, InputSpec, TargetSpec


def session(memo: ModelMemo, record: CaseRecord, path: Path,
            target: TargetSpec | None = None) -> OrtTarget:
    """The session of `path` on the case's target (or on a variant of it, for a re-run)."""
    record.enter("run")
    chosen = target or record.case.target
    return memo.get(SessionKey(path, chosen.name),
                    lambda: make_target(path, chosen, memo.task.threads,
                                        work_dir=memo.task.work_dir), record.case.id)


@frozen
class Wanted:
    """Samples a case needs: a dataset at a batch size, read as the model's inputs (and, for
    recorded data, its outputs) are; `traced` the sizes its export was traced at, for the note
    a dataset that lists several sizes gets."""

    dataset: DatasetSpec
    batch: int | None
    inputs: Sequence[InputSpec]
    outputs: Sequence[str] = ()
    output_types: Sequence[str] = ()
    traced: dict[str, int] | None = None




@dataclass
class OnData:
    """A dataset's samples at one batch size, as a model's cases share them, with the module
    that runs them (or the failure its loading met, raised once the samples' notes are said)
    and the values made on them when a case first needs them: PyTorch's outputs, each side's
    timings, a rollout's reference, float16's ranges."""

    samples: tuple[Sample, ...]
    made: Made
    module: LoadedModule | StageError | None = None

    def loaded(self, case_id: str) -> LoadedModule | None:
        if isinstance(self.module, StageError):
            raise self.made.told(self.module, case_id)
        return self.module


def samples_of(memo: ModelMemo, record: CaseRecord, wanted: Wanted,
               load: Callable[[], LoadedModule] | None = None) -> OnData:
    """The dataset's samples of one batch size, made once per dataset, batch and sizes, and
    the module `load` loads beside them (a model with a factory)."""
    dataset, batch = wanted.dataset, wanted.batch

    def make() -> tuple[Sample, ...]:
        if dataset.kind == "random":
            assert batch is not None
            return random_samples(dataset, batch, wanted.inputs, dict(dataset.dims))
        found = recorded_samples(dataset, batch, wanted.inputs, wanted.outputs,
                                 wanted.output_types, memo.task.cap)
        if not found:
            raise LoadError(f"dataset '{dataset.name}' holds no sample of batch size {batch}")
        return found

    model = memo.task.model
    if dataset.dim_lists and model.onnx is None and not isinstance(adapter_for(model),
                                                                   OwnExport):
        _note_sizes(record, dataset, wanted.traced)  # else traced at the adapter's own sizes

    def made() -> OnData:
        return OnData(make(), Made(memo.told), _module(load) if load is not None else None)

    found: OnData = memo.get(DataKey(Data.of(dataset, batch)), made, record.case.id)
    if load is not None and found.module is None:  # a calibration set's samples, fed here too
        found.module = _module(load)
    return found


def _module(load: Callable[[], LoadedModule]) -> LoadedModule | StageError:
    try:
        return load()
    except StageError as exc:
        return exc


def _note_sizes(record: CaseRecord, dataset: DatasetSpec, traced: dict[str, int] | None) -> None:
    """A case of a dataset that lists several sizes says which it feeds and which the export
    was traced at (`traced`: the sizes its export was made with; None: taken from the cache,
    keyed by this dataset's traced sizes)."""
    traced = dataset.traced_dims() if traced is None else traced
    at = _sizes(traced, {name: () for name in dataset.dim_lists if name in traced})
    record.note(f"fed at {_sizes(dataset.dims, dataset.dim_lists)} (the dataset lists several "
                f"sizes; the one export was traced at {at or 'the sizes of another dataset'})")


def _sizes(dims: Mapping[str, int], listed: Mapping[str, Any]) -> str:
    return ", ".join(f"{name} {dims[name]}" for name in listed)
