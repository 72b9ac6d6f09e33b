"""What a case's follow-ups and checks found, typed: where the drift starts, the proven cause,
the arithmetic in effect, the repro bundle, float16's range (JSON in report/records.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class PathStep:
    """One compared tensor on the way from the inputs to the outputs, in graph order: within
    its tolerance or not (`max_abs`), or, for a reduced precision, above its SQNR threshold."""

    tensor: str
    node: str | None = None
    op_type: str | None = None
    module: str | None = None
    within: bool = True
    max_abs: float | None = None
    sqnr_db: float | None = None
    nonfinite: str = ""  # "inf", "NaN" or "NaN/Inf" where the float32 tensor is finite


@dataclass(frozen=True)
class DriftRecord:
    """Where the drift starts (explain/localize/), or why that cannot be said (`verdict`
    "unlocalized"); for a reduced precision, where quality is lost against the float32 model
    (`verdict` "quality", with `threshold_db`, `sqnr_db` and the `worst` layers)."""

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
    sqnr_db: float | None = None
    worst: tuple[PathStep, ...] = ()
    seconds: float | None = None


@dataclass(frozen=True)
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


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class BundleRecord:
    """A failed case's repro bundle (explain/bundle.py): where it is and the command that
    re-runs it, or why it could not be written."""

    path: str | None = None
    command: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class RangeRecord:
    """A tensor that is float16 in the variant and whose float32 values leave float16's range
    on the case's samples (explain/fp16.py): "overflow" (its largest |x| rounds to inf) or
    "underflow" (every nonzero value flushes to 0); `max_abs` is the float32 tensor's."""

    tensor: str
    kind: str
    max_abs: float
    node: str | None = None
    op_type: str | None = None
    module: str | None = None


@dataclass(frozen=True)
class Float16Record:
    """What a float16 case ran in float16, and float16's range (explain/fp16.py): the
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


@dataclass(frozen=True)
class CaseDetails:
    """What a case's run found beside its verdict. `providers` is the fall-back judgement's
    record (what was asked, what ran, per node); `other` keeps what a newer onnx-parity wrote
    that this one does not know, so a report read back is written out whole."""

    divergence: DriftRecord | None = None
    cause: CauseRecord | None = None
    causes_ruled_out: tuple[CauseRecord, ...] = ()
    numerics: NumericsRecord | None = None
    providers: Mapping[str, Any] | None = None
    bundle: BundleRecord | None = None
    float16: Float16Record | None = None
    not_compared: tuple[str, ...] = ()  # outputs left out by ignore_outputs
    export_log: str | None = None  # what the exporter printed, kept under --artifacts
    worker_log: tuple[str, ...] = ()  # a dead worker's last lines
    other: Mapping[str, Any] = field(default_factory=dict)
    # --cache: "hit" or "miss" for the export ("export") and the variant ("int8 variant")
    cache: Mapping[str, str] | None = None
