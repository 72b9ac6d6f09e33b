"""Why a case failed, named only when a second run proves it: the suspected setting turned off,
everything else the same, and the case compared again with the same tolerance.

A suspect comes from what is in effect (read back from ONNX Runtime, never what the spec asked
for); the worker makes the second run through the one session builder and hands both
comparisons to `prove`. TF32 is the first cause: ONNX Runtime's CUDA provider computes float32
MatMul, Gemm and Conv in TF32 by default (`use_tf32`, default 1 since 1.18) on GPUs of compute
capability 8.0 and newer, for errors of 1e-4..1e-3 against a float32 reference. Others (graph
optimizations, say) join as further suspects with their own variant target.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from onnx_parity.backends.session import SessionFacts
from onnx_parity.machine.compat import GPU_PROVIDERS
from onnx_parity.results import CauseRecord, NumericsRecord, OutputComparison
from onnx_parity.spec import TargetSpec
from onnx_parity.wording import fmt_measured, fmt_needed

if TYPE_CHECKING:
    from onnx_parity.machine.facts import Gpu

# A second run whose required atol is this many times smaller explains most of the error.
PROVEN_RATIO = 10.0
CUDA = "CUDAExecutionProvider"
TF32_COMPUTE = (8, 0)  # Ampere and newer have TF32 tensor cores


@dataclass(frozen=True)
class Numerics:
    """What decides a GPU case's arithmetic: the provider options in effect and the GPU."""

    provider_options: Mapping[str, Mapping[str, str]]
    gpu: Gpu | None = None
    session_options: Mapping[str, Any] = field(default_factory=dict)  # SessionFacts.session
    tf32_override: str | None = None  # NVIDIA_TF32_OVERRIDE: TensorRT's only TF32 switch

    @property
    def tf32(self) -> bool | None:
        """TF32 in effect: True, False, or None where ONNX Runtime does not say."""
        value = self.provider_options.get(CUDA, {}).get("use_tf32")
        if value is None:
            return None
        if self.tf32_override == "0":
            return False  # the process turned TF32 off for every library
        compute = _compute(self.gpu.compute) if self.gpu is not None else None
        if compute is not None and compute < TF32_COMPUTE:
            return False  # the option is on, but this GPU has no TF32
        return value not in ("0", "false", "False")

    def as_record(self) -> NumericsRecord:
        """The case's record of it (results.py), which the reports read."""
        return NumericsRecord(
            provider_options={p: dict(o) for p, o in self.provider_options.items()},
            gpu=self.gpu.name if self.gpu is not None else None,
            compute_capability=self.gpu.compute if self.gpu is not None else None,
            tf32=self.tf32, session_options=dict(self.session_options),
            tf32_override=self.tf32_override)


def numerics(facts: SessionFacts, gpus: Sequence[Gpu]) -> Numerics | None:
    """The numerics of a session that runs on a GPU provider, or whose target sets session
    options; None for any other."""
    active = [p for p in facts.active if p in GPU_PROVIDERS]
    if not active:
        return Numerics({}, session_options=dict(facts.session)) if facts.session else None
    device = facts.options.get(active[0], {}).get("device_id", "0")
    gpu = next((g for g in gpus if str(g.index) == device), None)
    return Numerics(dict(facts.options), gpu, dict(facts.session), facts.tf32_override)


@dataclass(frozen=True)
class Suspect:
    """A setting that may explain a failure, and the target with it turned off."""

    kind: str  # "tf32": the key of details["cause"]
    setting: str  # "use_tf32=0", as the sentence says it
    variant: TargetSpec
    fix: str  # what to write in the spec instead, given the atol the case needs
    spec_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


def suspects(target: TargetSpec, found: Numerics | None) -> tuple[Suspect, ...]:
    """The settings in effect that may explain a failed case on floating outputs."""
    if found is None or not found.tf32:
        return ()
    options = {p: dict(o) for p, o in target.provider_options.items()}
    options[CUDA] = {**options.get(CUDA, {}), "use_tf32": 0}
    variant = dataclasses.replace(target, name=f"{target.name} (use_tf32=0)",
                                  provider_options=options)
    return (Suspect("tf32", "use_tf32=0", variant,
                    f"check strict float32 with provider_options {{{CUDA}: {{use_tf32: 0}}}} on "
                    f"target '{target.name}', or give it a tolerance of its own "
                    f"(targets.{target.name}.tolerance)", {CUDA: {"use_tf32": 0}}),)


@dataclass(frozen=True)
class Rerun:
    """A second run against the first, on the first run's worst failing output: it proves its
    suspect when it passes, or when that output's required atol falls by PROVEN_RATIO or more."""

    worst: OutputComparison | None  # the first run's worst failing output
    again: OutputComparison | None  # the same output in the second run
    passes: bool

    @property
    def needed_before(self) -> float | None:
        return self.worst.required_atol if self.worst is not None else None

    @property
    def proven(self) -> bool:
        before = self.needed_before
        after = self.again.required_atol if self.again is not None else None
        falls = (before is not None and after is not None and math.isfinite(before)
                 and before >= PROVEN_RATIO * after)
        return self.passes or falls

    def record(self, kind: str, setting: str) -> CauseRecord:
        """The cause's record with both runs' figures; its message is the caller's."""
        return CauseRecord(kind=kind, proven=self.proven, message="", setting=setting,
                           output=self.worst.name if self.worst is not None else None,
                           before=_figures(self.worst),
                           after={**_figures(self.again), "passed": self.passes})

    def still_fails(self) -> str:
        """"max abs 1.0e-2", or what the second run left of the output when no figure can say."""
        again = self.again
        return (f"max abs {fmt_measured(again.max_abs)}" if again is not None
                and again.required_atol is not None else "it still fails as it did")

    def what_changed(self) -> str:
        """"it passes (max abs 2.1e-6)" or "the error falls from max abs 5.0e-2 to 4.0e-3"."""
        worst, again = self.worst, self.again
        if self.passes and again is not None:
            return f"it passes (max abs {fmt_measured(again.max_abs)})"
        if worst is not None and again is not None:
            return (f"the error falls from max abs {fmt_measured(worst.max_abs)} to"
                    f" {fmt_measured(again.max_abs)}")
        return "it passes"


def rerun(before: Sequence[OutputComparison], after: Sequence[OutputComparison]) -> Rerun:
    worst = _worst(before)
    again = next((c for c in after if worst is not None and c.name == worst.name), None)
    return Rerun(worst, again, bool(after) and all(c.passed for c in after))


def prove(suspect: Suspect, before: Sequence[OutputComparison],
          after: Sequence[OutputComparison]) -> CauseRecord:
    """The case's cause when the second run proves the suspect (it passes, or the worst
    output's required atol falls by PROVEN_RATIO or more); `proven` False when it does not."""
    second = rerun(before, after)
    record = second.record(suspect.kind, suspect.setting)
    name = suspect.kind.upper()
    if not second.proven:
        return dataclasses.replace(record, message=f"{name} ruled out: with {suspect.setting}"
                                                   f" the case still fails"
                                                   f" ({second.still_fails()})")
    needed_before = second.needed_before
    needed = (f"; with {name} on it needs atol ≥ {fmt_needed(needed_before)}"
              if needed_before is not None and math.isfinite(needed_before) else "")
    return dataclasses.replace(
        record, message=f"{name}: with {suspect.setting} {second.what_changed()}{needed};"
                        f" {suspect.fix}",
        provider_options={p: dict(o) for p, o in suspect.spec_options.items()})


def _worst(comparisons: Sequence[OutputComparison]) -> OutputComparison | None:
    failing = [c for c in comparisons if not c.passed]
    return max(failing, key=lambda c: math.inf if c.required_atol is None else c.required_atol,
               default=None)


def _figures(comparison: OutputComparison | None) -> dict[str, Any]:
    if comparison is None:
        return {}
    return {"max_abs": comparison.max_abs, "required_atol": comparison.required_atol}


def floating_failure(comparisons: Sequence[OutputComparison]) -> bool:
    """Whether a floating output failed: the only failures an arithmetic setting can cause."""
    return any(not c.passed and (c.expected_dtype or "").startswith(("float", "bfloat"))
               for c in comparisons)


def _compute(text: str | None) -> tuple[int, int] | None:
    try:
        major, minor = (text or "").split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return None
