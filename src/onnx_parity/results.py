"""The values a run produces: per-output comparisons, case results and the whole run's report."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any, Literal, get_args

from onnx_parity.findings import CaseDetails, ExpectationRecord, MachineFacts
from onnx_parity.frozen import frozen
from onnx_parity.literals import STATUSES, Exporter, Precision, Stage, Status
from onnx_parity.metrics.base import Settings
from onnx_parity.metrics.topk import TopK as TopK  # topk's setting, beside the Tolerance


@frozen
class Tolerance:
    """What an output must meet. Element by element (`elementwise`): |actual - expected| <=
    atol + rtol * |expected|. Over the output: each metric of the registry (onnx_parity/metrics)
    that `metrics` sets, by its tolerance key (a threshold; topk's a TopK). Every criterion
    given must hold."""

    atol: float
    rtol: float
    elementwise: bool = True  # False: atol and rtol were not given, only the metrics gate
    metrics: Mapping[str, Any] = field(default_factory=Settings)
    # "int8": no tolerance of its own, the precision's defaults were used
    defaults: Precision | Literal[""] = ""

    def __post_init__(self) -> None:
        if not isinstance(self.metrics, Settings):  # a plain dict: held as a hashable value
            object.__setattr__(self, "metrics", Settings(self.metrics))


@frozen
class Histogram:
    """How many elements' |actual - expected| fell between consecutive `edges`: counts[i]
    holds edges[i] <= d < edges[i + 1], the last bucket being closed; `nonfinite` counts NaN
    and Inf differences."""

    edges: tuple[float, ...]
    counts: tuple[int, ...]
    nonfinite: int = 0


# What decided an output's verdict (compare/), so that sentences.output_sentence can say it:
#   passed       every criterion held
#   elements     elements out of atol + rtol·|e|
#   exact        booleans or strings that differ (the tolerance does not apply to them)
#   nonfinite    NaN/Inf placement differs: no atol can pass
#   metric       a metric criterion (cosine, SQNR, top-k, ...) failed while atol/rtol held
#   powerless    every element within atol of zero: the tolerance could not have failed it
#   shape        a sample's shapes differ
#   dtype        a sample's dtypes differ
#   mixed        the reference's dtype changes between samples
#   unsupported  a dtype that cannot be compared
#   structure    a sequence or map output whose structures part
#   unmatched    detections compared as sets: boxes on one side only (compare/detections.py)
#   empty        detections compared as sets: no box in any sample on either side, none compared
OutputKind = Literal["passed", "elements", "exact", "nonfinite", "metric", "powerless", "shape",
                     "dtype", "mixed", "unsupported", "structure", "zero", "constant",
                     "unmatched", "empty"]
OUTPUT_KINDS: tuple[OutputKind, ...] = get_args(OutputKind)
ELEMENTWISE = "atol/rtol"  # the criterion `criteria` names when atol and rtol gate an output


@frozen
class Matching:
    """One output of detections compared as sets (compare/detections.py): boxes matched one to
    one by label and IoU, over every sample and image. The output's error figures are over the
    matched boxes, its worst index in the reference's own order."""

    iou: float
    matched: int
    only_expected: int = 0  # boxes only in the reference
    only_actual: int = 0  # boxes only in ONNX Runtime's output
    best_expected: float | None = None  # the largest score among the reference's unmatched
    best_actual: float | None = None
    reference: str = "the reference"  # who `expected` is: "PyTorch", "the recorded outputs"


@frozen
class OutputComparison:
    """The verdict on one output of one case, with the numbers that explain it.

    Error figures are over the finite elements that both sides hold; NaN and Inf placements
    that differ count as mismatches. `required_atol` is the smallest atol that, with `rtol`
    unchanged, would have passed the finite elements (None when no atol can: NaN/Inf placement,
    shape or dtype differ). `worst_index` is (sample, *index) of the worst element.
    `kind` says what decided the verdict; the figures below it are what wording needs to say
    it. `message` is that sentence as compare wrote it (sentences.output_sentence), kept for
    readers of the JSON report.
    """

    name: str
    passed: bool
    atol: float
    rtol: float
    elements: int = 0
    mismatches: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    mean_abs: float = 0.0
    required_atol: float | None = 0.0
    worst_index: tuple[int, ...] | None = None
    worst_expected: float | None = None
    worst_actual: float | None = None
    expected_shape: tuple[int, ...] | None = None
    actual_shape: tuple[int, ...] | None = None
    expected_dtype: str | None = None
    actual_dtype: str | None = None
    message: str = ""
    # Every reference and actual element lay within atol of zero, the reference not all zero:
    # the tolerance could not have failed this output, so it did not pass (compare/outputs.py).
    powerless: bool = False
    # The metrics of a floating output (onnx_parity/metrics) by the names they are recorded
    # under, whichever ones gate it
    metrics: Mapping[str, float] = field(default_factory=dict)
    criteria: tuple[str, ...] = ()  # what gated it: "atol/rtol", "cosine >= 0.99", ...
    # Floating outputs: the largest finite |expected| (the output's scale, for the baseline's
    # noise floor) and the error histogram (kept in the reports for failed or regressed ones).
    scale: float | None = None
    histogram: Histogram | None = None
    # None: not recorded (a report from before kinds, a value built by hand): `verdict_kind`
    # reads it from the figures.
    kind: OutputKind | None = None
    samples: int = 1
    placement: int = 0  # NaN/Inf placement mismatches, included in `mismatches`
    finite: int | None = None  # elements compared by value; None: not recorded
    # The metric criteria that gated the output (metric name -> threshold) and those that failed
    thresholds: Mapping[str, float] = field(default_factory=dict)
    failed: tuple[str, ...] = ()
    # The worst element's values where a float cannot hold them (integers, booleans, strings,
    # complex numbers), or what each structure holds where the two part ("structure")
    quoted: tuple[str, str] | None = None
    sample: int | None = None  # shape, dtype, mixed, structure: the first sample that differs
    where: str = ""  # sequence / map outputs: the path of the worst leaf, or where they part
    actual_scale: float | None = None  # powerless: the largest finite |actual|
    matching: Matching | None = None  # detections compared as sets (compare/detections.py)

    @property
    def mismatch_share(self) -> float:
        return self.mismatches / self.elements if self.elements else 0.0

    @property
    def metric_only(self) -> bool:
        """Gated by metrics alone: atol and rtol were not given."""
        return bool(self.criteria) and ELEMENTWISE not in self.criteria

    @property
    def verdict_kind(self) -> OutputKind:
        """`kind`, or where it was not recorded, what the figures say decided the verdict."""
        if self.kind is not None:
            return self.kind
        if self.passed:
            return "passed"
        if self.powerless:
            return "powerless"
        if self.expected_dtype != self.actual_dtype:  # a dtype difference explains a shape one
            return "dtype"
        if self.expected_shape != self.actual_shape:
            return "shape"
        if self.required_atol is None:
            return "exact" if self.expected_dtype in ("bool", "string") else "nonfinite"
        if self.mismatches == 0 and any(c != ELEMENTWISE for c in self.criteria):
            return "metric"
        return "elements"


# -- against the baseline run (compare/baseline.py) ---------------------------------------------

Trend = Literal["up", "down", "same"]


@frozen
class OutputTrend:
    """One output against the baseline: the baseline's figures, the ratio of this run's max abs
    to the baseline's, the noise floor, and whether it regressed."""

    max_abs: float
    required_atol: float | None
    ratio: float
    floor: float
    trend: Trend
    regressed: bool
    metrics: Mapping[str, float] = field(default_factory=dict)


# Which way a changed tolerance moved: tightened (a smaller atol or rtol, a higher metric
# threshold), loosened, or changed (a criterion added or taken away, any other setting).
Direction = Literal["tightened", "loosened", "changed"]


@frozen
class SettingChange:
    """One of a case's effective settings that differs from the baseline's (compare/baseline.py):
    which (atol, rtol, a metric's name, or a CaseResult.settings key), on which output (None:
    the whole case), as written before and after, and which way it moved."""

    setting: str
    before: str
    after: str
    output: str | None = None
    direction: Direction = "changed"


@frozen
class CaseTrend:
    """One case against the baseline: "new" (the baseline lacks it), "not compared" (and
    `reason`), or "compared", where the output whose error grew most speaks for the case."""

    status: Literal["new", "compared", "not compared"]
    reason: str = ""
    check: Literal["on", "off"] | None = None  # off: `regression: off`, the trend only
    factor: float | None = None
    output: str | None = None
    max_abs: float | None = None
    required_atol: float | None = None
    ratio: float | None = None
    trend: Trend | None = None
    regressed: bool = False
    outputs: Mapping[str, OutputTrend] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    before: Status | None = None  # the case's verdict in the baseline; None: not recorded
    settings: tuple[SettingChange, ...] = ()  # the settings that changed since the baseline


@frozen
class BaselineRun:
    """The baseline a run was compared with: its file, whether the comparison took place (and
    why not), the versions that differ (what, before, after), the cases it had that this run
    would have checked but lacks."""

    path: str
    done: bool
    problem: str = ""
    spec: str | None = None
    environment: tuple[tuple[str, str | None, str | None], ...] = ()
    gone: tuple[str, ...] = ()


# -- the GPU preflight (machine/preflight.py judges; report/preflight.py shows it) -------------

Level = Literal["ok", "warn", "fail"]
LEVELS: tuple[Level, ...] = get_args(Level)


@frozen
class Finding:
    """One check of the GPU preflight: what was checked, how it stands, what was found and, for
    a warning or a failure, what to do about it."""

    check: str  # what was checked: "driver", "cuDNN", "torch", ...
    status: Level
    found: str  # what was found, one line
    fix: str = ""


@frozen
class Probe:
    """Whether ONNX Runtime, in a fresh process, ran a session on CUDA; if not, why."""

    ran: bool
    usable: bool
    reason: str = ""


@frozen
class PreflightRecord:
    """The GPU preflight as a run records it: whether CUDA is usable here and why not, every
    finding, the probe, the compatibility table it judged against, the facts it read, and
    what it meant for the run's cases on GPU targets: how many there were and how many it
    skipped (--skip-unavailable); both None where no run used it (`doctor`)."""

    usable: bool
    reason: str
    findings: tuple[Finding, ...]
    facts: MachineFacts
    table: str  # where the compatibility table lives
    probe: Probe | None = None
    seconds: float = 0.0
    gpu_cases: int | None = None
    skipped_cases: int | None = None


@frozen
class CaseResult:
    """The verdict on one case: model × opset × target × dataset × batch size."""

    id: str
    model: str
    opset: int | None
    exporter: Exporter | None
    target: str
    dataset: str
    batch_size: int | None
    status: Status
    stage: Stage | None = None
    message: str = ""
    seconds: float = 0.0
    outputs: tuple[OutputComparison, ...] = ()
    notes: tuple[str, ...] = ()
    line: int | None = None  # the model's entry in the spec, for annotations
    tolerance_line: int | None = None  # the entry's `tolerance:` key (None: it has none)
    details: CaseDetails = field(default_factory=CaseDetails)
    precision: Precision = "fp32"  # or the reduced-precision variant the case ran
    baseline: CaseTrend | None = None  # against the baseline run, when there was one
    # The case's effective settings as the spec resolved them (plan/cases.py's `settings`):
    # "tolerance", "precision", "target", "dataset", each as text; empty in a report from
    # before they were recorded.
    settings: Mapping[str, str] = field(default_factory=dict)


# How a run's cases were split across shards: by number of cases, or by an earlier report's
# seconds (`--durations`).
Split = Literal["count", "durations"]


@frozen
class PlanRecord:
    """The plan a run's report belongs to, so that `merge` can vouch for the shards it joins:
    the spec's content, every case the selection planned (before sharding, in plan order), how
    they were split and which shard this is, and the onnx-parity that planned them."""

    spec_sha256: str  # of the spec file's bytes
    cases: tuple[str, ...]  # the ids of the whole selection, every shard's cases together
    version: str  # onnx-parity's
    split: Split = "count"
    durations_sha256: str | None = None  # with split "durations": the report's bytes
    shard: tuple[int, int] | None = None  # (K, N) of a `--shard K/N` run


@frozen
class RunReport:
    """Everything the reports need: they read this and nothing else."""

    spec_path: str
    environment: Mapping[str, Any]  # versions of what decides the numbers, as read
    cases: tuple[CaseResult, ...]
    seconds: float = 0.0
    baseline: BaselineRun | None = None
    preflight: PreflightRecord | None = None  # the GPU preflight, with a GPU target
    shard: str | None = None  # "K/N" for one shard of a run
    complete: bool = True  # False mid-run and for a run stopped early (cli/run.py's NOT_RUN)
    unmatched: tuple[ExpectationRecord, ...] = ()  # the spec's `expect` entries no case matched
    plan: PlanRecord | None = None  # what `merge` checks the shards against; None: an older file

    @property
    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = dict.fromkeys(STATUSES, 0)
        for case in self.cases:
            counts[case.status] += 1
        return counts
