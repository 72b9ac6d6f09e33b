"""What a case's time per call says: ONNX Runtime clearly slower than PyTorch, a CUDA target
that runs as fast as the CPU (a fall-back, maybe), and the latency check against a baseline
(`regression: {latency: 1.5}`): grown by the factor beyond the measured spread and the floor.
"""

from __future__ import annotations

import dataclasses

from onnx_parity.findings import CallTimes, LatencyRecord
from onnx_parity.wording import fmt_ms

SLOWER = 1.5  # ONNX Runtime this many times PyTorch's median, spreads apart: a note
LIKE_CPU = 1.25  # a CUDA time within this factor of the CPU provider's reads as the CPU's
FLOOR_MS = 1.0  # growth (and a CUDA time like the CPU's) below this never counts


def apart(low: CallTimes, high: CallTimes) -> bool:
    """Whether `high`'s middle half lies wholly above `low`'s: the difference is not noise."""
    return high.q1_ms > low.q3_ms


def notes(latency: LatencyRecord, target: str) -> list[str]:
    """The notes a case's latency calls for, in the target's name."""
    said = []
    ort, torch = latency.onnxruntime, latency.pytorch
    if (torch is not None and latency.ratio is not None and latency.ratio >= SLOWER
            and apart(torch, ort)):
        # PyTorch without a GPU times a CUDA target's module on the CPU: say so, not "on cuda".
        where = (f"than PyTorch on {target}" if torch.device == ort.device else
                 f"on {target} than PyTorch on the {torch.device}")
        said.append(f"ONNX Runtime is {latency.ratio:.1f}× slower {where} "
                    f"({fmt_ms(ort.median_ms)} against {fmt_ms(torch.median_ms)} per call)")
    cpu = latency.cpu
    if (cpu is not None and cpu.median_ms >= FLOOR_MS
            and cpu.median_ms / LIKE_CPU <= ort.median_ms):
        said.append(f"ONNX Runtime on {target} takes {fmt_ms(ort.median_ms)} per call, "
                    f"about what its CPU provider takes ({fmt_ms(cpu.median_ms)}): it may have"
                    " fallen back to the CPU")
    return said


def judge(latency: LatencyRecord, factor: float | None,
          before: LatencyRecord | None) -> tuple[LatencyRecord, str]:
    """The latency with the baseline's median, and the failure it calls for ("" for none):
    ONNX Runtime's median grew by at least `factor` (None: the check is off), this run's
    lower quartile is `factor` times the baseline's upper one or more (beyond the spread of
    both), and by FLOOR_MS or more. A baseline timed otherwise (per call where this run times
    per step, a model that became a rollout) is not compared."""
    if before is None or before.per != latency.per:
        return latency, ""
    old, new = before.onnxruntime, latency.onnxruntime
    regressed = (factor is not None and new.median_ms >= factor * old.median_ms
                 and new.q1_ms >= factor * old.q3_ms
                 and new.median_ms - old.median_ms >= FLOOR_MS)
    judged = dataclasses.replace(latency, baseline_ms=old.median_ms, regressed=regressed)
    if not regressed:
        return judged, ""
    return judged, (f"regression: ONNX Runtime takes {fmt_ms(new.median_ms)} per "
                    f"{latency.per}, "
                    f"{new.median_ms / old.median_ms:.1f}× the baseline's "
                    f"{fmt_ms(old.median_ms)} (the latency check fails at ×{factor:g})")
