"""Why a case failed, named only when a second run proves it: the suspected setting turned off,
everything else the same, and the case compared again with the same tolerance.

A suspect comes from what is in effect (read back from ONNX Runtime, never what the spec asked
for); the worker makes the second run through the one session builder (`Reruns`) and hands both
comparisons to `prove`. The suspects, a rung each, in the order they are tried (ladder.py lists
them for a case):
    TF32          ONNX Runtime's CUDA provider computes float32 MatMul, Gemm and Conv in TF32
                  by default (`use_tf32`, default 1 since 1.18) on GPUs of compute capability
                  8.0 and newer, for errors of 1e-4..1e-3 against a float32 reference;
    int8          the variant remade with reduce_range=True: x86 CPUs without VNNI run int8 in
                  U8S8 kernels that saturate with signed 8-bit weights;
    exporter      the same case with the model's other exporter, when the spec checks both.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import field
from typing import TYPE_CHECKING, Any, Protocol

from onnx_parity.backends.session import SessionFacts
from onnx_parity.findings import CauseRecord, NumericsRecord
from onnx_parity.frozen import frozen
from onnx_parity.literals import CUDA, Exporter
from onnx_parity.machine.compat import GPU_PROVIDERS
from onnx_parity.results import OutputComparison
from onnx_parity.spec import TargetSpec
from onnx_parity.wording import fmt_measured, fmt_metric, fmt_needed, metric_words

if TYPE_CHECKING:
    from onnx_parity.findings import Gpu

# A second run whose required atol is this many times smaller explains most of the error.
PROVEN_RATIO = 10.0
TF32_COMPUTE = (8, 0)  # Ampere and newer have TF32 tensor cores


@frozen
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


class Reruns(Protocol):
    """The second runs a suspect can ask for, each a session of the case's model through the one
    session builder, made by the worker when asked for (run/prepared.py's CaseReruns) and
    memoized with the case's own; explain is handed these, never the worker's cache."""

    def on_target(self, variant: TargetSpec) -> Any:
        """The case's model on a variant of its target."""

    def remade(self, reduce_range: bool) -> Any:
        """The case's reduced-precision variant made again from its float32 model."""

    def exported_with(self, exporter: Exporter) -> Any:
        """The same model, opset and precision exported with another exporter."""

    def optimized_ops(self, variant: TargetSpec) -> Mapping[str, int]:
        """The node types (and counts) of the graph ONNX Runtime makes of the case's model on a
        variant of its target."""


@frozen
class Suspect:
    """Something that may explain a failure, and how to run the case without it."""

    kind: str  # "tf32": the key of details["cause"]
    setting: str  # "use_tf32=0", as the sentence says it: what the second run changes
    rerun: Callable[[Reruns], Any]  # the second run's session
    fix: str  # what to do instead, given the atol the case needs
    spec_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    title: str = ""  # how the cause is named ("TF32"); the kind in capitals when empty
    floating_only: bool = True  # only a floating output's failure can have this cause
    must_pass: bool = False  # proven only when the second run passes, not when it just shrinks
    with_it: str = ""  # "with TF32 on", as "… it needs atol ≥ 1e-3" says the first run

    @property
    def name(self) -> str:
        return self.title or self.kind.upper()


def tf32_suspect(target: TargetSpec, found: Numerics | None) -> Suspect | None:
    """TF32 when the case's session computes in it: the target again with use_tf32=0."""
    if found is None or not found.tf32:
        return None
    options = {p: dict(o) for p, o in target.provider_options.items()}
    options[CUDA] = {**options.get(CUDA, {}), "use_tf32": 0}
    variant = dataclasses.replace(target, name=f"{target.name} (use_tf32=0)",
                                  provider_options=options)
    return Suspect("tf32", "use_tf32=0", lambda reruns: reruns.on_target(variant),
                   f"check strict float32 with provider_options {{{CUDA}: {{use_tf32: 0}}}} on "
                   f"target '{target.name}', or give it a tolerance of its own "
                   f"(targets.{target.name}.tolerance)", {CUDA: {"use_tf32": 0}}, title="TF32")


@frozen
class Rerun:
    """A second run against the first, on the first run's worst failing output: it proves its
    suspect when it passes, or when that output's required atol falls by PROVEN_RATIO or more."""

    worst: OutputComparison | None  # the first run's worst failing output
    again: OutputComparison | None  # the same output in the second run
    passes: bool
    must_pass: bool = False  # a smaller error is not enough: only a pass proves it

    @property
    def needed_before(self) -> float | None:
        return self.worst.required_atol if self.worst is not None else None

    @property
    def proven(self) -> bool:
        before = self.needed_before
        after = self.again.required_atol if self.again is not None else None
        # An output that failed on a metric alone can need no atol at all (every element
        # within rtol): 0 is not ten times 0, and only a pass proves a suspect there.
        falls = (before is not None and after is not None and math.isfinite(before)
                 and before > 0 and before >= PROVEN_RATIO * after)
        return self.passes or (falls and not self.must_pass)

    def record(self, kind: str, setting: str) -> CauseRecord:
        """The cause's record with both runs' figures; its message is the caller's."""
        return CauseRecord(kind=kind, proven=self.proven, message="", setting=setting,
                           output=self.worst.name if self.worst is not None else None,
                           before=_figures(self.worst),
                           after={**_figures(self.again), "passed": self.passes})

    def still_fails(self) -> str:
        """"max abs 1.0e-2", or what the second run left of the output when no figure can say."""
        again = self.again
        return (_figure(again) if again is not None
                and (again.required_atol is not None or again.thresholds)
                else "it still fails as it did")

    def what_changed(self) -> str:
        """"it passes (max abs 2.1e-6)" or "the error falls from max abs 5.0e-2 to 4.0e-3"."""
        worst, again = self.worst, self.again
        if self.passes and again is not None:
            return f"it passes ({_figure(again)})"
        if worst is not None and again is not None:
            return (f"the error falls from max abs {fmt_measured(worst.max_abs)} to"
                    f" {fmt_measured(again.max_abs)}")
        return "it passes"


def rerun(before: Sequence[OutputComparison], after: Sequence[OutputComparison],
          must_pass: bool = False) -> Rerun:
    worst = _worst(before)
    again = next((c for c in after if worst is not None and c.name == worst.name), None)
    return Rerun(worst, again, bool(after) and all(c.passed for c in after), must_pass)


def prove(suspect: Suspect, before: Sequence[OutputComparison],
          after: Sequence[OutputComparison]) -> CauseRecord:
    """The case's cause when the second run proves the suspect (it passes, or the worst
    output's required atol falls by PROVEN_RATIO or more); `proven` False when it does not."""
    second = rerun(before, after, suspect.must_pass)
    record = second.record(suspect.kind, suspect.setting)
    name = suspect.name
    if not second.proven:
        return dataclasses.replace(record, message=f"{name} ruled out: with {suspect.setting}"
                                                   f" the case still fails"
                                                   f" ({second.still_fails()})")
    needed_before = second.needed_before
    atol_gated = second.worst is not None and not second.worst.metric_only
    with_it = suspect.with_it or f"with {name} on"
    needed = (f"; {with_it} it needs atol ≥ {fmt_needed(needed_before)}"
              if atol_gated and needed_before is not None and math.isfinite(needed_before)
              else "")
    return dataclasses.replace(
        record, message=f"{name}: with {suspect.setting} {second.what_changed()}{needed};"
                        f" {suspect.fix}",
        provider_options={p: dict(o) for p, o in suspect.spec_options.items()})


def _worst(comparisons: Sequence[OutputComparison]) -> OutputComparison | None:
    failing = [c for c in comparisons if not c.passed]
    return max(failing, key=lambda c: math.inf if c.required_atol is None else c.required_atol,
               default=None)


def _figure(o: OutputComparison) -> str:
    """What gates an output, measured: "cosine 0.9999" for a metric-gated one, else its max abs."""
    gate = next((name for name in o.thresholds if name in o.metrics), None)
    if gate is not None and o.metric_only:
        return f"{metric_words(gate)} {fmt_metric(gate, o.metrics[gate])}"
    return f"max abs {fmt_measured(o.max_abs)}"


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
