"""The fall-back policy: what a target asked for against what ran, and what its spec says to do.

A pure function of the session's facts and the first run's node placement, so that recorded
facts test it; the worker gathers them and acts on the judgement.
"""

from __future__ import annotations

from dataclasses import field
from typing import Literal

from onnx_parity.backends.placement import Placement
from onnx_parity.backends.session import SessionFacts
from onnx_parity.findings import ProvidersRecord
from onnx_parity.frozen import frozen
from onnx_parity.literals import CPU, CUDA
from onnx_parity.spec import TargetSpec
from onnx_parity.spec.model import TENSORRT_FIRST

Action = Literal["none", "fail", "warn"]


@frozen
class Judgement:
    """`problems` in words; `providers` for the case's details; `action` from the policy."""

    problems: tuple[str, ...]
    providers: ProvidersRecord = field(default_factory=ProvidersRecord)
    action: Action = "none"

    @property
    def message(self) -> str:
        suffix = " (fallback: fail)" if self.action == "fail" else ""
        return "; ".join(self.problems) + suffix


def judge_placement(target: TargetSpec, facts: SessionFacts,
                    placement: Placement | None) -> Judgement:
    """Session level first (a provider that did not load), then node level (nodes a later
    provider ran, less the CPU's shape arithmetic and the op types the target allows)."""
    wanted = facts.requested[0]
    problems, reasons = [], []
    if facts.fell_back:
        reasons.append(facts.reason or "ONNX Runtime logged no reason")
        problems.append(f"target '{target.name}' asked for {wanted}, but ONNX Runtime runs on "
                        f"{', '.join(facts.active) or 'nothing'}: {reasons[-1]}")
    stray = (placement.elsewhere(wanted, target.allow_cpu_ops, target.allow_cuda_ops)
             if placement is not None else {})
    if stray and not facts.fell_back:
        counted = sum(n for ops in stray.values() for n in ops.values())
        where = "; ".join(f"{provider}: " + ", ".join(f"{op} ×{n}" for op, n in ops.items())
                          for provider, ops in stray.items())
        hints = []
        if wanted in TENSORRT_FIRST and CUDA in stray:
            hints.append("TensorRT did not take the nodes on CUDA; list the op types CUDA may "
                         "run in the target's allow_cuda_ops")
        if CPU in stray:
            hints.append("list op types ONNX Runtime puts on the CPU on purpose in the target's "
                         "allow_cpu_ops")
        hint = f" ({'; '.join(hints)})" if hints else ""
        reasons.append(f"{counted} node{'s' * (counted != 1)} ran elsewhere: {where}")
        problems.append(f"target '{target.name}' asked for {wanted}, but {reasons[-1]}{hint}")
    providers = ProvidersRecord(
        requested=tuple(facts.requested), active=tuple(facts.active),
        nodes={p: dict(ops) for p, ops in placement.nodes.items()} if placement else {},
        cpu_shape_nodes=dict(placement.cpu_shape_nodes) if placement is not None else {},
        fallback_reason="; ".join(reasons) if reasons else None,
        runtime=dict(facts.runtime) or None,
    )
    action: Action = "none"
    if problems and target.fallback in ("fail", "warn"):
        action = "fail" if target.fallback == "fail" else "warn"
    return Judgement(tuple(problems), providers, action)
