"""What a case's follow-ups and checks found, typed: where the drift starts, the proven cause,
the arithmetic in effect, where the session ran, the repro bundle, float16's range (JSON and schema
in report/records.py); and the machine facts the GPU preflight judged (machine/facts.py reads them,
report/preflightjson.py writes them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any, Literal, get_args

from onnx_parity.frozen import frozen


@frozen
class PathStep:
    """One compared tensor on the way from the inputs to the outputs, in graph order: within
    its tolerance or not (`max_abs`), or, for a reduced precision, above its SQNR threshold."""

    tensor: str
    node: str | None = None
    op_type: str | None = None
    module: str | None = None
    within: bool = True
    max_abs: float | None = None
    sqnr: float | None = None  # in dB, recorded under the SQNR metric's key (metrics/sqnr.py)
    nonfinite: str = ""  # "inf", "NaN" or "NaN/Inf" where the float32 tensor is finite


@frozen
class DriftRecord:
    """Where the drift starts (explain/localize/), or why that cannot be said (`verdict`
    "unlocalized"); for a reduced precision, where quality is lost against the float32 model
    (`verdict` "quality", with `threshold_db`, the first layer's `sqnr` and the `worst`
    layers)."""

    verdict: str
    headline: str = ""
    summary: str = ""
    reference: str = ""
    sample: int | None = None
    compared: int = 0
    node: str | None = None
    op_type: str | None = None
    module: str | None = None
    module_type: str | None = None
    tensor: str | None = None
    max_abs: float | None = None
    path: tuple[PathStep, ...] = ()
    segment: tuple[str, ...] = ()  # the nodes between the origin's compared inputs and it
    other_origins: int = 0  # other tensors that drift while their own inputs are within
    threshold_db: float | None = None
    sqnr: float | None = None  # in dB, recorded under the SQNR metric's key (metrics/sqnr.py)
    worst: tuple[PathStep, ...] = ()
    seconds: float | None = None


@frozen
class CauseRecord:
    """A suspected cause and what its second run showed (explain/causes.py): `proven` names it
    the case's cause; otherwise it was ruled out. `before` and `after` are the worst output's
    figures (max_abs, required_atol; after also `passed`)."""

    kind: str
    proven: bool
    message: str
    setting: str = ""
    output: str | None = None
    before: Mapping[str, Any] = field(default_factory=dict)
    after: Mapping[str, Any] = field(default_factory=dict)
    provider_options: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


@frozen
class NumericsRecord:
    """A case's arithmetic in effect: the provider options read back from its GPU session and
    the GPU it ran on, and the session options its target sets (explain/causes.py)."""

    provider_options: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    gpu: str | None = None
    compute_capability: str | None = None
    tf32: bool | None = None
    # The target's session options as its session reports them: attributes in the spec's
    # words, `config_entries`, `custom_op_libraries`; empty where the target sets none.
    session_options: Mapping[str, Any] = field(default_factory=dict)
    tf32_override: str | None = None  # NVIDIA_TF32_OVERRIDE on a GPU session; None: unset


@frozen
class ProvidersRecord:
    """Where a case's session ran (backends/fallback.py): the providers its target asked for,
    those ONNX Runtime runs, each provider's nodes by op type (profiled on the first sample), the
    CPU's shape arithmetic among them, and what fell back. The judge records all but
    `fallback_reason` (None: nothing fell back); a report read back keeps None for what it
    lacks (older ones have no `cpu_shape_nodes`), so that it is written out as it was read."""

    requested: tuple[str, ...] | None = None
    active: tuple[str, ...] | None = None
    nodes: Mapping[str, Mapping[str, int]] | None = None  # provider -> op type -> nodes
    cpu_shape_nodes: Mapping[str, int] | None = None  # op type -> nodes, of nodes["CPU..."]
    fallback_reason: str | None = None
    # A `python:` target's runtime: its interpreter, onnxruntime's distribution, version and
    # build (backends/remote.py's Runtime.as_record); None for a session in the run's process,
    # whose onnxruntime the report's environment names.
    runtime: Mapping[str, str] | None = None


@frozen
class BundleRecord:
    """A failed case's repro bundle (explain/bundle.py): where it is and the command that
    re-runs it, or why it could not be written."""

    path: str | None = None
    command: str | None = None
    error: str | None = None


@frozen
class RangeRecord:
    """A tensor that is float16 in the variant and whose float32 values leave float16's range
    on the case's samples (run/float16.py): "overflow" (its largest |x| rounds to inf) or
    "underflow" (every nonzero value flushes to 0); `max_abs` is the float32 tensor's."""

    tensor: str
    kind: str
    max_abs: float
    node: str | None = None
    op_type: str | None = None
    module: str | None = None


@frozen
class Float16Record:
    """What a float16 case ran in float16, and float16's range (run/float16.py): the
    arithmetic nodes of its session and those that gave float16 tensors (None: not known); the
    tensors that leave float16's range in the float32 model (`leaving`, the first few in
    `ranges`) and the first whose float16 storage moves the outputs beyond the tolerance
    (`failing`); outputs whose float16 PyTorch reference overflowed where ONNX Runtime's did not."""

    nodes: int | None = None
    float16_nodes: int | None = None
    range_checked: bool = False  # the range check ran (fp16 variants of a float32 model)
    leaving: int = 0
    ranges: tuple[RangeRecord, ...] = ()
    failing: RangeRecord | None = None
    reference_overflow: tuple[str, ...] = ()


@frozen
class CaseDetails:
    """What a case's run found beside its verdict. `providers` is the fall-back judgement's
    record (what was asked, what ran, per node); `other` keeps what a newer onnx-parity wrote
    that this one does not know, so a report read back is written out whole."""

    divergence: DriftRecord | None = None
    cause: CauseRecord | None = None
    causes_ruled_out: tuple[CauseRecord, ...] = ()
    numerics: NumericsRecord | None = None
    providers: ProvidersRecord | None = None
    bundle: BundleRecord | None = None
    float16: Float16Record | None = None
    not_compared: tuple[str, ...] = ()  # outputs left out by ignore_outputs
    export_log: str | None = None  # what the exporter printed, kept under --artifacts
    worker_log: tuple[str, ...] = ()  # a dead worker's last lines
    other: Mapping[str, Any] = field(default_factory=dict)
    rollout: RolloutRecord | None = None  # a rollout's error at every step
    expectation: ExpectationRecord | None = None  # the spec's `expect` that covered the case
    latency: LatencyRecord | None = None  # time per call on both sides (run/latency.py)
    tokens: TokenRecord | None = None  # a decoder's greedy tokens (adapter: causal-lm)
    # --cache: "hit" or "miss" for the export ("export") and the variant ("int8 variant")
    cache: Mapping[str, str] | None = None


@frozen
class RolloutStep:
    """One step of a rollout (numbered from 1, as the messages say): whether every output was
    within its tolerance, and each output's largest absolute error over the samples."""

    step: int
    passed: bool
    max_abs: Mapping[str, float] = field(default_factory=dict)
    failing: tuple[str, ...] = ()  # the outputs out of tolerance at this step


@frozen
class RolloutRecord:
    """A rollout's judgement (compare/stepwise.py): its steps, what it fed back, the error at
    each step, the first step that did not pass, and how the error of the output it follows
    (`output`: the first to fail, else the nearest its tolerance) grew: ×`growth` per step,
    the geometric mean of the step-to-step ratios of its max abs from `growth_from` (the first
    of the steps above the noise `floor` that lead up to the judged step) to `judged`, the step
    whose comparisons are the case's outputs (the first that did not pass, else the one
    nearest its tolerance)."""

    steps: int
    feedback: Mapping[str, str] = field(default_factory=dict)
    per_step: tuple[RolloutStep, ...] = ()
    first_failing: int | None = None
    judged: int | None = None
    output: str | None = None
    growth: float | None = None
    growth_from: int | None = None
    floor: float = 0.0


# How a model's `expect` says its cases end.
ExpectedStatus = Literal["failed", "error"]
EXPECTED_STATUSES: tuple[ExpectedStatus, ...] = get_args(ExpectedStatus)
# How a case met its expectation, and how it had ended before it (the expectation judges only
# passed, failed and errored cases); "" on an expectation that judged no case.
ExpectationVerdict = Literal["", "met", "passes", "mismatch", "expired"]
EXPECTATION_VERDICTS: tuple[ExpectationVerdict, ...] = get_args(ExpectationVerdict)
Ended = Literal["", "passed", "failed", "error"]
ENDINGS: tuple[Ended, ...] = get_args(Ended)


@frozen
class ExpectationRecord:
    """A known failure on record (a model's `expect` in the spec) and, on a case, how the case
    met it (compare/expect.py). `verdict`: "met" (it ended as `status` says: an expected
    failure), "passes" (it passed: the record is stale), "mismatch" (it ended otherwise),
    "expired" (`until` has passed: judged as any case); "" on a run's list of expectations that
    matched no case. `ended` is the status the case ended with before the expectation."""

    model: str
    status: ExpectedStatus
    reason: str
    cases: str = "*"  # a glob on the case id, or on the part of it in brackets
    until: str | None = None  # YYYY-MM-DD, the last day it holds
    line: int | None = None  # its place in the spec
    verdict: ExpectationVerdict = ""
    ended: Ended = ""
    stage: str | None = None  # for `status: error`, the stage it must fail at (None: any)


@frozen
class CallTimes:
    """One side's time per call on a case's inputs (backends/timing.py), in milliseconds: the
    median and the quartiles (the spread is q1–q3, the middle half) of `repeats` timed calls
    after a warm-up, on `device` ("cpu" or "cuda")."""

    median_ms: float
    q1_ms: float
    q3_ms: float
    repeats: int
    device: str = "cpu"


@frozen
class NodeCost:
    """One node of ONNX Runtime's profile (--profile): its time per call and its provider."""

    node: str
    op_type: str
    provider: str
    ms: float


@frozen
class LatencyRecord:
    """A case's latency beside its accuracy (run/latency.py): ONNX Runtime's time per call on
    the target, PyTorch's on the same device (None without a PyTorch model), `ratio` ONNX
    Runtime's median over PyTorch's; for a CUDA target, ONNX Runtime on the CPU provider
    (`cpu`), to tell a fall-back; against a baseline its median (`baseline_ms`) and whether
    the latency check failed the case; under --profile the costliest nodes and the profile."""

    onnxruntime: CallTimes
    pytorch: CallTimes | None = None
    ratio: float | None = None
    cpu: CallTimes | None = None
    seconds: float = 0.0  # what the timing itself took
    baseline_ms: float | None = None
    regressed: bool = False
    costliest: tuple[NodeCost, ...] = ()
    profile: str | None = None  # the kept profile, under --artifacts
    # "step": a rollout's, each call one step of it, both sides on ONNX Runtime's own feeds
    per: Literal["call", "step"] = "call"


@frozen
class TokenRecord:
    """A decoder's greedy tokens, PyTorch's against ONNX Runtime's (compare/tokens.py): they
    agree for `agreed` of `steps` steps and differ at `diverged`; the divergence judged (the
    first drift, else the first near tie: `step`, 1-based, in sample `sample`, batch row
    `row`), each side's token and the reference's logit gap between the two, and whether that
    gap is within the tolerance of the two logits (`near_tie`: not drift). `comparable`: the
    steps whose inputs were the same on both sides (every one, ONNX Runtime being fed
    PyTorch's token)."""

    steps: int
    agreed: int
    comparable: int
    step: int | None = None
    sample: int | None = None
    row: int | None = None
    expected: int | None = None
    actual: int | None = None
    gap: float | None = None
    allowed: float | None = None  # the tolerance of the two logits together
    near_tie: bool = False
    diverged: int = 0

    @property
    def failed(self) -> bool:
        return self.step is not None and not self.near_tie


# -- the machine a run happened on (machine/facts.py reads it; machine/preflight.py judges it) --

@frozen
class Gpu:
    index: int
    name: str
    memory_mib: int | None = None
    compute: str | None = None  # compute capability, "9.0"


@frozen
class DriverFacts:
    """The NVIDIA driver and its GPUs, from NVML or else nvidia-smi; `problems` says why not."""

    source: str | None = None  # "NVML" or "nvidia-smi"
    version: str | None = None  # "580.65.06"
    cuda: str | None = None  # the newest CUDA this driver runs, "13.0"
    gpus: tuple[Gpu, ...] = ()
    problems: tuple[str, ...] = ()


@frozen
class PluginFacts:
    """The CUDA provider installed as a plugin (compat.CUDA_PLUGIN_PACKAGES), apart from
    onnxruntime."""

    package: str  # "onnxruntime-ep-cuda13"
    version: str
    cuda: str  # the CUDA major its name says: "13"
    library: str | None = None  # its libonnxruntime_providers_cuda.so; None: missing


@frozen
class RuntimeFacts:
    """Every installed distribution of an `onnxruntime` package, where each one's files are,
    which folder `import onnxruntime` resolves to, and the build in that folder."""

    distributions: Mapping[str, str] = field(default_factory=dict)  # name -> version
    package: str | None = None  # whose files are there now: "onnxruntime-gpu"
    version: str | None = None
    cuda: str | None = None  # the CUDA it was built for; None for a CPU build
    folder: str | None = None  # the package folder that `import onnxruntime` loads
    locations: Mapping[str, str] = field(default_factory=dict)  # name -> its package folder
    tensorrt: bool = False  # the build has a TensorRT provider library
    cuda_plugin: PluginFacts | None = None

    @property
    def gpu_cuda(self) -> str | None:
        """The CUDA the CUDA provider here was built for: the build's own, else its plugin's."""
        return self.cuda or (self.cuda_plugin.cuda if self.cuda_plugin is not None else None)


@frozen
class TorchFacts:
    version: str | None = None
    cuda: str | None = None  # None for a CPU build
    cudnn: str | None = None  # the nvidia-cudnn wheel it requires, if any


@frozen
class LibraryFacts:
    """Where the loader's search finds one library ONNX Runtime needs, if anywhere
    (machine/libraries.py)."""

    name: str  # "cuDNN"
    soname: str  # "libcudnn.so.9"
    pip: str  # the wheel that ships it, for the fix-it line
    required: bool
    path: str | None = None
    version: str | None = None
    origin: str | None = None  # which step of the search found it: "pip nvidia-cudnn-cu13", ...
    others: tuple[str, ...] = ()  # the same library with another major: ".../libcudnn.so.8"
    provider: str | None = None  # the provider that loads it, where not CUDA's: TensorRT's
    pin: str | None = None  # the versions of `pip` that fit, where its newest does not: "10.*"


@frozen
class MachineFacts:
    driver: DriverFacts
    runtime: RuntimeFacts
    torch: TorchFacts
    libraries: tuple[LibraryFacts, ...] = ()
    search: tuple[str, ...] = ()  # the library search, in order, as "label: folder"
