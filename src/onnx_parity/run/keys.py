"""What a model's cases share in a worker, named: one typed key per kind of value its memo
(memo.py) holds, or a model file's or a dataset's record holds below it (Made), each saying what
makes two cases' values the same, and the type of the value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from onnx_parity.errors import StageError
from onnx_parity.frozen import frozen

if TYPE_CHECKING:  # named in the keys' bases as strings, which ruff does not read as uses
    from onnx_parity.backends import LoadedModule, OrtTarget  # noqa: F401
    from onnx_parity.findings import (
        CallTimes,  # noqa: F401
        Float16Record,
    )
    from onnx_parity.spec import DatasetSpec

T = TypeVar("T")


@frozen
class Key(Generic[T]):
    """A memo entry's key; `T` is the value it holds."""


def made_once(values: dict[Key[Any], Any], key: Key[T], make: Callable[[], T],
              told: Callable[[StageError], StageError]) -> T:
    """The value of `key` in `values`, made once: a StageError `make` raised is kept in its
    place and raised again, as `told` words it for the case asking, to every case that needs
    the value, so a failed making is never retried."""
    if key not in values:
        try:
            values[key] = make()
        except StageError as exc:
            values[key] = exc
    value = values[key]
    if isinstance(value, StageError):
        raise told(value)
    return value  # type: ignore[no-any-return]


@dataclass
class Made:
    """Values a model's cases share below one of its memo's entries (a model file's, a dataset's),
    each made when a case first needs it, so a case that never gets there costs nothing. A
    failure its making raised is remembered and told as the memo's are (`told`)."""

    told: Callable[[StageError, str | None], StageError]
    values: dict[Key[Any], Any] = field(default_factory=dict)

    def value(self, key: Key[T], make: Callable[[], T], case_id: str | None = None) -> T:
        """The value of `key`, made once (ModelMemo.get's rule)."""
        return made_once(self.values, key, make, lambda exc: self.told(exc, case_id))

    def has(self, key: Key[Any]) -> bool:
        return key in self.values

    def peek(self, key: Key[T]) -> T | None:
        """The value of `key` if it was made, without making it."""
        value = self.values.get(key)
        return None if isinstance(value, StageError) else value

    def put(self, key: Key[T], value: T | StageError) -> None:
        self.values[key] = value


@frozen
class Data:
    """What makes a case's samples: its dataset, batch size and, where the dataset lists several
    sizes for a dimension, the sizes the case feeds."""

    dataset: str
    batch: int | None
    dims: tuple[tuple[str, int], ...]

    @staticmethod
    def of(dataset: DatasetSpec, batch: int | None) -> Data:
        return Data(dataset.name, batch, tuple(sorted(dataset.dims.items())))


@frozen
class ModuleKey(Key["LoadedModule"]):
    """The factory's module, loaded once per model."""


@frozen
class OutputNamesKey(Key[tuple[str, ...]]):
    """The module's output names, found by one forward pass before its first export."""


@frozen
class ProgramKey(Key[Any]):
    """The dynamo exporter's program: torch.export traced once, converted for each opset."""

    exporter: str


@frozen
class TracedKey(Key[dict[str, int]]):
    """The sizes an export was traced at (`opset` None: the dynamo program's, for every opset)."""

    exporter: str | None
    opset: int | None = None


@frozen
class ExportKey(Key[Path]):
    """One opset's export with one exporter."""

    opset: int | None
    exporter: str | None


@frozen
class FileKey(Key[Any]):
    """The model file a case runs, checked: its opset's export with its exporter (or the
    shipped file), and its precision's variant of it (prepared.ModelFile, which imports this
    module)."""

    opset: int | None
    exporter: str | None
    precision: str


@frozen
class CheckKey(Key["str | None"]):
    """The ONNX checker's word on a model file (a note, or "")."""

    path: Path


@frozen
class VariantKey(Key[Path]):
    """A reduced-precision variant of a float32 model file."""

    source: Path
    precision: str


@frozen
class RemadeKey(Key[Path]):
    """An int8 variant made again with or without reduce_range, for the cause ladder."""

    path: Path
    reduce_range: bool


@frozen
class KeyPart:
    """The export cache's key of a module and its settings, or why it has none."""

    key: str | None
    unvouched: str = ""


@frozen
class ModelKeyPart(Key[KeyPart]):
    """The export cache's key of the module and its settings, shared by its opsets."""


@frozen
class SessionKey(Key["OrtTarget"]):
    """A model file's session on a target (or a variant of it, for a re-run)."""

    path: Path
    target: str


@frozen
class DataKey(Key[Any]):
    """A dataset's samples at a batch size, with what is made on them (sessions.OnData, which
    imports this module)."""

    data: Data


@frozen
class ReferenceKey(Key[list[list[Any]]]):
    """PyTorch's outputs on a case's samples, one call each."""

    data: Data


@frozen
class TargetReferenceKey(Key[list[list[Any]]]):
    """The reference target's outputs (`reference: <target>`) on a model file's samples."""

    path: Path
    data: Data


@frozen
class EncoderExportKey(Key[Path]):
    """An encoder-decoder's encoder, exported at an opset with an exporter (adapter:
    seq2seq-lm; the model's own ExportKey holds its decoder)."""

    opset: int | None
    exporter: str | None


@frozen
class EncoderReferenceKey(Key[list[list[Any]]]):
    """PyTorch's encoder outputs on a case's samples (adapter: seq2seq-lm)."""

    data: Data


@frozen
class RolloutReferenceKey(Key[Any]):
    """PyTorch's rollout from a case's samples."""

    data: Data


@frozen
class Float16NodesKey(Key[tuple["Float16Record", str]]):
    """How much of a float16 graph ran in float16 on a target, and its note (a model file's)."""

    path: Path
    target: str


@frozen
class Float16RangeKey(Key[Any]):
    """float16's range checked on a variant: targets with the same tolerances share it."""

    float32: Path
    variant: Path
    data: Data
    tolerances: tuple[Any, ...]


@frozen
class Float32RangesKey(Key[Any]):
    """The float32 model's largest magnitudes per tensor on a case's samples."""

    float32: Path
    data: Data


@frozen
class LatencyKey(Key["CallTimes"]):
    """ONNX Runtime's time per call of a model file on a target."""

    path: Path
    target: str
    data: Data
    per: str = "call"  # "step": a rollout's steps, timed on its own feeds


@frozen
class TorchLatencyKey(Key["CallTimes"]):
    """PyTorch's time per call on a device."""

    data: Data
    device: str
    per: str = "call"

