"""The spec's value types and every default, written once: the schema and the resolver read them.

A leaf module: it imports nothing of the package but the shared value types (results.Tolerance,
results.Precision and Exporter, findings.ExpectationRecord), so that the JSON Schema
(schema.py), the resolver (resolve.py) and the stages that read a Spec share one set of
defaults and one set of allowed values (the tuples below are the Literals' own arguments).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import field
from pathlib import Path
from typing import Any, Literal, get_args

from onnx_parity.findings import ExpectationRecord
from onnx_parity.frozen import frozen
from onnx_parity.literals import CPU, CUDA, PRECISIONS, TENSORRT, TENSORRT_RTX, Exporter, Precision
from onnx_parity.results import Tolerance

DatasetKind = Literal["random", "npz", "onnx-test-data"]
FallbackPolicy = Literal["fail", "warn", "allow"]
Distribution = Literal["normal", "uniform"]
GraphOptimization = Literal["disable_all", "basic", "extended", "layout", "all"]
ExecutionMode = Literal["sequential", "parallel"]
ExecutionOrder = Literal["default", "priority_based", "memory_efficient"]
Adapter = Literal["causal-lm", "seq2seq-lm"]
Dtype = Literal["float32", "float16", "float64", "bfloat16", "int64", "int32", "int16", "int8",
                "uint8", "bool"]

ADAPTERS: tuple[Adapter, ...] = get_args(Adapter)
# The inputs the spec names for an adapter; run/adapters/ feeds them by these names.
PROMPT = "input_ids"
FEATURES = "input_features"  # seq2seq-lm's speech input, in place of the prompt
DATASET_KINDS: tuple[DatasetKind, ...] = get_args(DatasetKind)
FALLBACKS: tuple[FallbackPolicy, ...] = get_args(FallbackPolicy)
DISTRIBUTIONS: tuple[Distribution, ...] = get_args(Distribution)
DTYPES: tuple[Dtype, ...] = get_args(Dtype)
REDUCED: tuple[Precision, ...] = PRECISIONS[1:]
GRAPH_OPTIMIZATIONS: tuple[GraphOptimization, ...] = get_args(GraphOptimization)
EXECUTION_MODES: tuple[ExecutionMode, ...] = get_args(ExecutionMode)
EXECUTION_ORDERS: tuple[ExecutionOrder, ...] = get_args(ExecutionOrder)

# The onnxruntime.SessionOptions attributes a target may set (`session_options`), each with the
# values it takes: a tuple of words (ONNX Runtime's enum, in lower case without its ORT_ prefix),
# int (a count, 0 and up) or bool. tests/backends/test_targets.py checks every name against
# SessionOptions.
SESSION_OPTIONS: dict[str, tuple[str, ...] | type] = {
    "graph_optimization_level": GRAPH_OPTIMIZATIONS,
    "execution_mode": EXECUTION_MODES,
    "execution_order": EXECUTION_ORDERS,
    "intra_op_num_threads": int,
    "inter_op_num_threads": int,
    "enable_mem_pattern": bool,
    "enable_mem_reuse": bool,
    "enable_cpu_mem_arena": bool,
    "use_deterministic_compute": bool,
}
# SessionOptions attributes a target may not set, and why: onnx-parity sets them itself.
RESERVED_SESSION_OPTIONS: dict[str, str] = {
    "log_severity_level": "onnx-parity sets it to collect ONNX Runtime's warnings while a session "
                          "is made",
    "log_verbosity_level": "onnx-parity collects ONNX Runtime's log itself",
    "logid": "onnx-parity collects ONNX Runtime's log itself",
    "enable_profiling": "onnx-parity profiles a GPU target's first run to see where each node ran",
    "profile_file_prefix": "onnx-parity profiles a GPU target's first run to see where each node "
                           "ran",
    "optimized_model_filepath": "it would write a file for every session onnx-parity makes; a "
                                "failed case's repro bundle holds the model",
    "use_per_session_threads": "onnx-parity's sessions each have their own threads",
}
# Session config entries a target may not set in `config_entries`, and what to do instead.
RESERVED_CONFIG_ENTRIES: dict[str, str] = {
    "session.disable_cpu_ep_fallback": "write the target's disable_cpu_ep_fallback: true, which "
                                       "the spec checks against its providers",
    "session.model_external_initializers_file_folder_path":
        "onnx-parity sets it for models whose weights lie in files beside them",
}
# Providers that leave what they do not take to CUDAExecutionProvider, where it is listed.
TENSORRT_FIRST = (TENSORRT, TENSORRT_RTX)

@frozen
class Regression:
    """When a case's error has grown too much since a baseline run (compare/baseline.py): by at
    least `factor` and past `floor`. `floor` None: a few ulps of the output's dtype at the output's
    scale, so float noise never counts. `latency` (None: off) fails a case whose ONNX Runtime time
    per call grew by that factor (compare/latency.py)."""

    factor: float = 10.0
    floor: float | None = None
    latency: float | None = None


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
DEFAULT_IOU = 0.9  # compare: detections: the IoU two boxes must reach to be matched
DEFAULT_DECODE_STEPS = 16  # adapter: causal-lm without rollout.steps: greedy tokens per sample
# Every step's outputs are kept on both sides, to be compared and judged, and a decoder's cache
# grows with each step, so a rollout's memory grows with the square of its steps: 1024 steps of
# a 1B-parameter decoder's cache (16 layers, 8 key-value heads of 64) already hold ~70 GiB on
# each side. Drift that compounds shows within far fewer steps.
MAX_ROLLOUT_STEPS = 1024
DEFAULT_FLOOR_ULPS = 16  # the regression floor when none is set: ulps at the output's scale


@frozen
class InputSpec:
    """One model input: its shape (named dims are dynamic in the export) and dtype."""

    name: str
    shape: tuple[int | str, ...]
    dtype: str = DEFAULT_DTYPE
    low: float | None = None  # for integers: uniform in [low, high); for floats: uniform only
    high: float | None = None


@frozen
class ToleranceLayer:
    """The tolerance keys one place of the spec sets (None: not set there), per output too,
    and per reduced precision (in a model's and in the defaults' tolerance)."""

    atol: float | None = None
    rtol: float | None = None
    # The metric keys it sets (onnx_parity/metrics/registry.py), key -> setting
    metrics: Mapping[str, Any] = field(default_factory=dict)
    outputs: Mapping[str, ToleranceLayer] = field(default_factory=dict)
    precisions: Mapping[str, ToleranceLayer] = field(default_factory=dict)

    def output(self, name: str) -> ToleranceLayer:
        return self.outputs.get(name, _EMPTY)

    def precision(self, name: Precision) -> ToleranceLayer | None:
        return self.precisions.get(name)


_EMPTY = ToleranceLayer()

# What a reduced precision is held to when the spec gives it no tolerance of its own: the
# thresholds practitioners use, on the metric that does not depend on the output's scale.
PRECISION_DEFAULTS: dict[Precision, ToleranceLayer] = {
    "fp16": ToleranceLayer(metrics={"cosine": 0.999}),
    "int8-dynamic": ToleranceLayer(metrics={"cosine": 0.99}),
    "int8": ToleranceLayer(metrics={"cosine": 0.99}),
}


@frozen
class TargetSpec:
    """An ONNX Runtime configuration: providers in order of preference, and the session options
    a deployment makes its sessions with."""

    name: str
    providers: tuple[str, ...]
    provider_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    fallback: FallbackPolicy = DEFAULT_FALLBACK
    line: int | None = None
    allow_cpu_ops: tuple[str, ...] = ()  # op types ONNX Runtime may put on the CPU on purpose
    allow_cuda_ops: tuple[str, ...] = ()  # op types TensorRT may leave to CUDA
    disable_cpu_ep_fallback: bool = False  # ONNX Runtime refuses the session instead
    tolerance: ToleranceLayer = field(default_factory=ToleranceLayer)
    # SessionOptions attributes (SESSION_OPTIONS' names and words), e.g.
    # {"graph_optimization_level": "disable_all", "intra_op_num_threads": 4}
    session_options: Mapping[str, Any] = field(default_factory=dict)
    config_entries: Mapping[str, str] = field(default_factory=dict)  # add_session_config_entry
    custom_op_libraries: tuple[Path, ...] = ()  # resolved against the spec's folder
    # Another interpreter whose own onnxruntime build runs this target's sessions
    # (backends/remote.py): relative to the spec's folder, its symlinks kept (a virtual
    # environment's python is a link to the interpreter it was made from).
    python: Path | None = None

    @property
    def sets_session(self) -> bool:
        """Whether the target says anything about its sessions beyond the providers."""
        return bool(self.session_options or self.config_entries or self.custom_op_libraries)

    def with_session_options(self, name: str | None = None, *,
                             config_entries: Mapping[str, str] | None = None,
                             **options: Any) -> TargetSpec:
        """This target with some session options changed, everything else the same: a re-run
        with graph optimizations off is `target.with_session_options(graph_optimization_level=
        "disable_all")`. Its name is `<name> (key=value, ...)` unless given, so that a memo of
        sessions by target name keeps the two apart. Raises ValueError for an option or a value
        SessionOptions does not take (SESSION_OPTIONS)."""
        for key, value in options.items():
            problem = session_option_problem(key, value)
            if problem:
                raise ValueError(problem)
        entries = {str(k): str(v) for k, v in (config_entries or {}).items()}
        changed = [f"{k}={v}" for k, v in [*options.items(), *entries.items()]]
        return dataclasses.replace(
            self, name=name or f"{self.name} ({', '.join(changed)})",
            session_options={**self.session_options, **options},
            config_entries={**self.config_entries, **entries})


def session_option_problem(name: str, value: Any) -> str:
    """What is wrong with setting SessionOptions' `name` to `value` in a target, or ''."""
    if name in RESERVED_SESSION_OPTIONS:
        return f"session option '{name}' is not a target's to set: {RESERVED_SESSION_OPTIONS[name]}"
    kind = SESSION_OPTIONS.get(name)
    if kind is None:
        return f"'{name}' is not a session option onnx-parity sets (SessionOptions attributes it " \
               f"takes: {', '.join(SESSION_OPTIONS)})"
    if isinstance(kind, tuple):
        ok = value in kind
        wanted = "one of " + ", ".join(kind)
    elif kind is bool:
        ok, wanted = isinstance(value, bool), "true or false"
    else:
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        wanted = "an integer, 0 or more (0: ONNX Runtime's default)"
    return "" if ok else f"session option '{name}' takes {wanted}, not {value!r}"


@frozen
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
    # random: named dims given a list of sizes, one case per combination, all from one export;
    # `dims` holds the size of each that the export is traced at (traced_size)
    dim_lists: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    def traced_dims(self) -> dict[str, int]:
        """The sizes the export is traced at: `dims`, with each listed dimension at its
        traced_size, whichever of its sizes a case of this dataset feeds."""
        return {**self.dims, **{name: traced_size(sizes) for name, sizes in self.dim_lists.items()}}


def traced_size(sizes: tuple[int, ...]) -> int:
    """The size of a listed dimension the export is traced at: the first of 2 or more (the
    dynamo exporter specializes a size of 1 into the graph), else the first."""
    return next((size for size in sizes if size >= 2), sizes[0])


@frozen
class Detections:
    """`compare: {detections: …}`: which outputs hold a detector's boxes ([N, 4], x1 y1 x2 y2),
    scores and labels, compared as sets (compare/detections.py). Each names an output, or the
    last part of dotted ones (`boxes` is `output_0.boxes`, `output_1.boxes`, … of a list of
    dicts, each image on its own)."""

    boxes: str
    scores: str
    labels: str | None = None  # without labels, boxes match whatever their class
    iou: float = DEFAULT_IOU

    @staticmethod
    def names(key: str, output: str) -> bool:
        """Whether `key` (as the spec gives it) stands for `output`: the output itself, or
        one whose last dotted part it is."""
        return output == key or output.endswith(f".{key}")


@frozen
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


@frozen
class RolloutSpec:
    """`rollout: {steps, feedback}`: `steps` calls per sample, the first on the dataset's inputs,
    each later one on the same inputs but those `feedback` names, which take the named outputs
    of the call before (output → input), each side from its own outputs; a decoder's
    `left_padding` (adapter: causal-lm)."""

    steps: int
    feedback: Mapping[str, str] = field(default_factory=dict)
    line: int | None = None
    # adapter: causal-lm: pad tokens left of the prompt in each row of a batch, cycled over the
    # rows (row i takes left_padding[i mod n]), masked out as a served batch is
    left_padding: tuple[int, ...] = ()


@frozen
class ModelSpec:
    """One model entry with defaults already applied."""

    name: str
    line: int
    torch: str | None = None  # "file.py:callable" (relative to the spec) or "pkg.mod:callable"
    tolerance_line: int | None = None  # its `tolerance:` key; None: the entry sets none
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
    # causal-lm: a decoder run with its cache (run/adapters/causal_lm.py); seq2seq-lm: an
    # encoder-decoder in two halves, its decoder run with its caches (run/adapters/seq2seq.py)
    adapter: Adapter | None = None
    rollout: RolloutSpec | None = None  # several calls per sample, outputs fed back
    expect: tuple[ExpectationRecord, ...] = ()  # known failures on record (compare/expect.py)
    detections: Detections | None = None  # `compare: {detections: …}`: outputs compared as sets
    # `reference: <target>`: the target whose outputs the model's other targets are compared
    # against, in place of PyTorch's or the recorded ones (the runtime upgrade)
    reference: TargetSpec | None = None


@frozen
class Spec:
    path: Path
    version: int
    models: tuple[ModelSpec, ...]
    targets: Mapping[str, TargetSpec]
    datasets: Mapping[str, DatasetSpec]
    sha256: str = ""  # of the spec file's bytes as read: the plan's record of which spec it was

    @property
    def root(self) -> Path:
        return self.path.parent


PREDEFINED_TARGETS: dict[str, TargetSpec] = {
    "cpu": TargetSpec(name="cpu", providers=(CPU,)),
    "cuda": TargetSpec(name="cuda", providers=(CUDA, CPU)),
    # What TensorRT does not take runs on CUDA, and what neither takes on the CPU.
    "tensorrt": TargetSpec(name="tensorrt", providers=(TENSORRT, CUDA, CPU)),
}
PREDEFINED_DATASETS: dict[str, DatasetSpec] = {
    "random": DatasetSpec(name="random", kind="random", samples=DEFAULT_RANDOM_SAMPLES,
                          batch_sizes=DEFAULT_RANDOM_BATCHES),
}


BATCH = "batch"  # the dimension name that is the batch wherever it stands


def batch_axes(shape: Sequence[Any]) -> tuple[int, ...]:
    """The axes of a shape that are the batch: every dimension named `batch`, wherever it
    stands (an RNN's state is [layers, batch, hidden]); in a shape without one, a named first
    dimension, whatever its name, as the batch has always been found."""
    named = tuple(axis for axis, size in enumerate(shape) if size == BATCH)
    if named:
        return named
    return (0,) if shape and isinstance(shape[0], str) else ()
