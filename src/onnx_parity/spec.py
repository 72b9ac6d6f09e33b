"""YAML → validated, frozen Spec; imports neither torch nor onnxruntime."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from onnx_parity.results import Tolerance

Exporter = Literal["dynamo", "torchscript"]
DatasetKind = Literal["random", "npz", "onnx-test-data"]
FallbackPolicy = Literal["fail", "warn", "allow"]

DTYPES = ("float32", "float16", "float64", "bfloat16", "int64", "int32", "int16", "int8",
          "uint8", "bool")
DEFAULT_TOLERANCE = Tolerance(atol=1e-4, rtol=1e-3)
DEFAULT_OPSETS = (18,)
DEFAULT_TIMEOUT = 600.0


@dataclass(frozen=True)
class InputSpec:
    """One model input: its shape (named dims are dynamic in the export) and dtype."""

    name: str
    shape: tuple[int | str, ...]
    dtype: str = "float32"
    low: float | None = None  # for integers: uniform in [low, high); for floats: uniform only
    high: float | None = None


@dataclass(frozen=True)
class TargetSpec:
    """An ONNX Runtime configuration: providers in order of preference."""

    name: str
    providers: tuple[str, ...]
    provider_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    fallback: FallbackPolicy = "fail"
    line: int | None = None


@dataclass(frozen=True)
class DatasetSpec:
    """Where a case's inputs (and, for recorded data, reference outputs) come from."""

    name: str
    kind: DatasetKind
    seed: int = 0
    samples: int | None = None  # random: default 2; recorded: every sample there is
    batch_sizes: tuple[int, ...] = ()  # random: default (1,); npz: default the whole array
    distribution: Literal["normal", "uniform"] = "normal"
    low: float | None = None
    high: float | None = None
    path: Path | None = None  # resolved against the spec's folder
    line: int | None = None


@dataclass(frozen=True)
class ModelSpec:
    """One model entry with defaults already applied."""

    name: str
    line: int
    torch: str | None = None  # "file.py:callable" (file resolved against the spec) or "pkg.mod:callable"
    args: Mapping[str, Any] = field(default_factory=dict)
    onnx: Path | None = None
    inputs: tuple[InputSpec, ...] = ()
    outputs: tuple[str, ...] = ()
    opsets: tuple[int, ...] = DEFAULT_OPSETS
    exporter: Exporter = "dynamo"
    targets: tuple[str, ...] = ("cpu",)
    datasets: tuple[str, ...] = ("random",)
    tolerance: Tolerance = DEFAULT_TOLERANCE
    output_tolerances: Mapping[str, Tolerance] = field(default_factory=dict)  # already merged
    timeout: float = DEFAULT_TIMEOUT

    def tolerance_for(self, output: str) -> Tolerance:
        return self.output_tolerances.get(output, self.tolerance)


@dataclass(frozen=True)
class Spec:
    path: Path
    version: int
    models: tuple[ModelSpec, ...]
    targets: Mapping[str, TargetSpec]
    datasets: Mapping[str, DatasetSpec]

    @property
    def root(self) -> Path:
        return self.path.parent


PREDEFINED_TARGETS: dict[str, TargetSpec] = {
    "cpu": TargetSpec(name="cpu", providers=("CPUExecutionProvider",), fallback="fail"),
    "cuda": TargetSpec(
        name="cuda", providers=("CUDAExecutionProvider", "CPUExecutionProvider"), fallback="fail"
    ),
}
PREDEFINED_DATASETS: dict[str, DatasetSpec] = {
    "random": DatasetSpec(name="random", kind="random", seed=0, samples=2, batch_sizes=(1,)),
}
