"""A case's latency, timed once its outputs are in (so no first call that builds things is
timed): ONNX Runtime on the target and PyTorch on the same device (backends/timing.py), ONNX
Runtime on the CPU provider too for a CUDA target, and, under --profile, ONNX Runtime's
profile kept under --artifacts with its costliest nodes. A rollout is timed per step: each
call one step of ONNX Runtime's own rollout, its feeds (the state fed back, a decoder's cache)
the same on both sides. Each measurement is made once per model file, target, dataset and
batch size, and shared by the cases that would repeat it.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal

import numpy as np

from onnx_parity.backends.timing import (
    FEW_REPEATS,
    MAX_REPEATS,
    profile_nodes,
    time_calls,
    torch_calls,
)
from onnx_parity.compare.latency import notes
from onnx_parity.findings import CallTimes, LatencyRecord
from onnx_parity.machine.compat import GPU_PROVIDERS
from onnx_parity.run.keys import LatencyKey, TorchLatencyKey
from onnx_parity.run.record import CaseRecord
from onnx_parity.spec import PREDEFINED_TARGETS

if TYPE_CHECKING:
    from onnx_parity.run.prepared import PreparedCase
    from onnx_parity.spec import ModelSpec

logger = logging.getLogger(__name__)


def time_case(record: CaseRecord, prepared: PreparedCase,
              steps: Sequence[Mapping[str, np.ndarray]] = ()) -> None:
    """Record the case's latency and the notes it calls for; a timing that fails is a note,
    never the case's verdict (the same calls have just run). `steps`: a rollout's feeds, step
    after step, timed per step instead of the samples' first calls."""
    if not prepared.samples:
        return
    case, task, target, path = record.case, prepared.task, prepared.target, prepared.path
    repeats = _repeats(task.model)
    started = time.perf_counter()
    device = "cuda" if target.facts.active and target.facts.active[0] in GPU_PROVIDERS else "cpu"
    feeds, data, shared = (steps or prepared.feeds), prepared.data, prepared.on_data.made
    per: Literal["call", "step"] = "step" if steps else "call"
    try:
        # ONNX Runtime returns host arrays; the case has just run these feeds on this session
        # (its outputs, a rollout's steps), which is the warm-up
        ort = shared.value(LatencyKey(path, case.target.name, data, per), lambda: time_calls(
            [target.call(f) for f in feeds], device, warm=True, repeats=repeats))
        torch = (_torch_times(prepared, feeds, device, per, repeats)
                 if prepared.loaded is not None else None)
        cpu = _cpu_times(prepared, feeds, per, repeats) if device == "cuda" else None
    except Exception as exc:  # timing never decides a verdict
        logger.debug("%s: latency not timed: %s", case.id, exc)
        record.note(f"latency not timed: {type(exc).__name__}: {exc}")
        return
    latency = LatencyRecord(
        onnxruntime=ort, pytorch=torch, cpu=cpu,
        ratio=ort.median_ms / torch.median_ms if torch and torch.median_ms > 0 else None,
        per=per)
    if task.profile:
        latency = _profiled(record, prepared, feeds[0], latency)
    latency = dataclasses.replace(latency, seconds=round(time.perf_counter() - started, 4))
    record.found(latency=latency)
    record.notes.extend(notes(latency, case.target.name))


def _repeats(model: ModelSpec) -> int:
    """Timed calls per side, at most: more where the latency check reads the figures
    (`regression: {latency: …}`), whose spread decides a verdict, than where only a note may."""
    checked = model.regression is not None and model.regression.latency is not None
    return MAX_REPEATS if checked else FEW_REPEATS


def _torch_times(prepared: PreparedCase, feeds: Sequence[Mapping[str, np.ndarray]],
                 device: str, per: str, repeats: int) -> CallTimes:
    loaded, model = prepared.loaded, prepared.task.model
    assert loaded is not None

    def timed() -> CallTimes:
        calls, wait, where = torch_calls(loaded.module, feeds, model.forward_args,
                                         loaded.binding, device)
        return time_calls(calls, where, wait, repeats=repeats)

    return prepared.on_data.made.value(TorchLatencyKey(prepared.data, device, per), timed)


def _cpu_times(prepared: PreparedCase, feeds: Sequence[Mapping[str, np.ndarray]], per: str,
               repeats: int) -> CallTimes:
    """ONNX Runtime's CPU provider on the same file: what a fall-back would cost."""
    cpu = dataclasses.replace(PREDEFINED_TARGETS["cpu"], name="cpu (latency)")
    cpu_session = prepared.other_target(cpu)
    key = LatencyKey(prepared.path, cpu.name, prepared.data, per)
    return prepared.on_data.made.value(key, lambda: time_calls(
        [cpu_session.call(f) for f in feeds], repeats=repeats))


def _profiled(record: CaseRecord, prepared: PreparedCase, feeds: Mapping[str, np.ndarray],
              latency: LatencyRecord) -> LatencyRecord:
    """--profile: the costliest nodes, and the profile kept under --artifacts."""
    try:
        task = prepared.task
        nodes, written = profile_nodes(prepared.path, record.case.target, feeds, task.threads,
                                       task.work_dir)
    except Exception as exc:  # a profile never decides a verdict
        record.note(f"ONNX Runtime profile not made: {type(exc).__name__}: {exc}")
        return latency
    kept = None
    if task.artifacts is not None:
        from onnx_parity.explain.artifacts import keep_profile  # only with --artifacts

        kept = keep_profile(task.artifacts, record.case.id, written)
    else:
        written.unlink(missing_ok=True)
    return dataclasses.replace(latency, costliest=nodes,
                               profile=str(kept) if kept is not None else None)
