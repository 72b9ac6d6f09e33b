"""The spec's value types and every default, written once: the schema and the resolver read them.

A leaf module: it imports nothing of the package but results.Tolerance, so that the JSON Schema
(schema.py), the resolver (resolve.py) and the stages that read a Spec share one set of
defaults and one set of allowed values (the tuples below are the Literals' own arguments).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from onnx_parity.results import Regression, Tolerance, TopK

Exporter = Literal["dynamo", "torchscript"]
DatasetKind = Literal["random", "npz", "onnx-test-data"]
FallbackPolicy = Literal["fail", "warn", "allow"]
Distribution = Literal["normal", "uniform"]
Precision = Literal["fp32", "fp16", "int8-dynamic", "int8"]
Dtype = Literal["float32", "float16", "float64", "bfloat16", "int64", "int32", "int16", "int8",
                "uint8", "bool"]

EXPORTERS: tuple[Exporter, ...] = get_args(Exporter)
DATASET_KINDS: tuple[DatasetKind, ...] = get_args(DatasetKind)
FALLBACKS: tuple[FallbackPolicy, ...] = get_args(FallbackPolicy)
DISTRIBUTIONS: tuple[Distribution, ...] = get_args(Distribution)
DTYPES: tuple[Dtype, ...] = get_args(Dtype)
PRECISIONS: tuple[Precision, ...] = get_args(Precision)
REDUCED: tuple[Precision, ...] = PRECISIONS[1:]

DEFAULT_TOLERANCE = Tolerance(atol=1e-4, rtol=1e-3)
DEFAULT_OPSETS = (18,)
DEFAULT_EXPORTER: Exporter = "dynamo"
DEFAULT_TARGETS = ("cpu",)
DEFAULT_DATASETS = ("random",)
DEFAULT_TIMEOUT = 600.0
DEFAULT_FALLBACK: FallbackPolicy = "fail"
DEFAULT_DISTRIBUTION: Distribution = "normal"
DEFAULT_DTYPE: Dtype = "float32"
DEFAULT_SEED = 0
DEFAULT_RANDOM_SAMPLES = 2
DEFAULT_RANDOM_BATCHES = (1,)
DEFAULT_PRECISIONS: tuple[Precision, ...] = ("fp32",)
DEFAULT_REGRESSION = Regression(factor=10.0)
DEFAULT_FLOOR_ULPS = 16  # the regression floor when none is set: ulps at the output's scale


@dataclass(frozen=True)
class InputSpec:
    """One model input: its shape (named dims are dynamic in the export) and dtype."""

    name: str
    shape: tuple[int | str, ...]
    dtype: str = DEFAULT_DTYPE
    low: float | None = None  # for integers: uniform in [low, high); for floats: uniform only
    high: float | None = None


@dataclass(frozen=True)
class ToleranceLayer:
    """The tolerance keys one place of the spec sets (None: not set there), per output too,
    and per reduced precision (in a model's and in the defaults' tolerance)."""

    atol: float | None = None
    rtol: float | None = None
    cosine: float | None = None
    sqnr_db: float | None = None
    topk: TopK | None = None
    outputs: Mapping[str, ToleranceLayer] = field(default_factory=dict)
    precisions: Mapping[str, ToleranceLayer] = field(default_factory=dict)

    def output(self, name: str) -> ToleranceLayer:
        return self.outputs.get(name, _EMPTY)

    def precision(self, name: str) -> ToleranceLayer | None:
        return self.precisions.get(name)


_EMPTY = ToleranceLayer()

# What a reduced precision is held to when the spec gives it no tolerance of its own: the
# thresholds practitioners use, on the metric that does not depend on the output's scale.
PRECISION_DEFAULTS: dict[str, ToleranceLayer] = {
    "fp16": ToleranceLayer(cosine=0.999),
    "int8-dynamic": ToleranceLayer(cosine=0.99),
    "int8": ToleranceLayer(cosine=0.99),
}


@dataclass(frozen=True)
class TargetSpec:
    """An ONNX Runtime configuration: providers in order of preference."""

    name: str
    providers: tuple[str, ...]
    provider_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    fallback: FallbackPolicy = DEFAULT_FALLBACK
    line: int | None = None
    allow_cpu_ops: tuple[str, ...] = ()  # op types ONNX Runtime may put on the CPU on purpose
    disable_cpu_ep_fallback: bool = False  # ONNX Runtime refuses the session instead
    tolerance: ToleranceLayer = field(default_factory=ToleranceLayer)


@dataclass(frozen=True)
class DatasetSpec:
    """Where a case's inputs (and, for recorded data, reference outputs) come from."""

    name: str
    kind: DatasetKind
    seed: int = DEFAULT_SEED
    samples: int | None = None  # random: DEFAULT_RANDOM_SAMPLES; recorded: every sample there is
    batch_sizes: tuple[int, ...] = ()  # random: DEFAULT_RANDOM_BATCHES; recorded: as recorded
    distribution: Distribution = DEFAULT_DISTRIBUTION
    low: float | None = None
    high: float | None = None
    path: Path | None = None  # resolved against the spec's folder
    line: int | None = None
    dims: Mapping[str, int] = field(default_factory=dict)  # random: sizes of named dims, not batch


@dataclass(frozen=True)
class ToleranceRules:
    """Every tolerance that can apply to one model's cases, in the spec's layers; resolving
    them for a target and an output is tolerance.resolve's decision."""

    defaults: ToleranceLayer = field(default_factory=ToleranceLayer)  # `defaults.tolerance`
    model: ToleranceLayer = field(default_factory=ToleranceLayer)  # the model's `tolerance`
    model_targets: Mapping[str, ToleranceLayer] = field(default_factory=dict)
    targets: Mapping[str, ToleranceLayer] = field(default_factory=dict)  # `targets.<t>.tolerance`

    def output_names(self) -> tuple[str, ...]:
        """The outputs the model's own tolerances name (a target's apply to many models)."""
        layers = [self.model, *self.model_targets.values()]
        return tuple(dict.fromkeys(name for layer in layers for name in layer.outputs))


@dataclass(frozen=True)
class ModelSpec:
    """One model entry with defaults already applied."""

    name: str
    line: int
    torch: str | None = None  # "file.py:callable" (relative to the spec) or "pkg.mod:callable"
    args: Mapping[str, Any] = field(default_factory=dict)
    onnx: Path | None = None
    inputs: tuple[InputSpec, ...] = ()
    outputs: tuple[str, ...] = ()
    opsets: tuple[int, ...] = DEFAULT_OPSETS
    exporters: tuple[Exporter, ...] = (DEFAULT_EXPORTER,)  # a case per opset and exporter
    precisions: tuple[Precision, ...] = DEFAULT_PRECISIONS  # and per precision
    calibration: str | None = None  # the dataset that calibrates static int8
    forward_args: Mapping[str, Any] = field(default_factory=dict)  # keywords for forward()
    ignore_outputs: tuple[str, ...] = ()  # outputs left out of the comparison
    constant_outputs: tuple[str, ...] = ()  # outputs constant by design (compare/blind.py)
    targets: tuple[str, ...] = DEFAULT_TARGETS
    datasets: tuple[str, ...] = DEFAULT_DATASETS
    tolerances: ToleranceRules = field(default_factory=ToleranceRules)
    timeout: float = DEFAULT_TIMEOUT
    memory_limit: float | None = None  # MiB of address space for the model's worker
    regression: Regression | None = DEFAULT_REGRESSION  # None: `regression: off`


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
    "cpu": TargetSpec(name="cpu", providers=("CPUExecutionProvider",)),
    "cuda": TargetSpec(name="cuda", providers=("CUDAExecutionProvider", "CPUExecutionProvider")),
}
PREDEFINED_DATASETS: dict[str, DatasetSpec] = {
    "random": DatasetSpec(name="random", kind="random", samples=DEFAULT_RANDOM_SAMPLES,
                          batch_sizes=DEFAULT_RANDOM_BATCHES),
}
