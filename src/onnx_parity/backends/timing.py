"""Time per call, bounded: a warm-up (unless the calls were just made), then timed calls until
`repeats` (MAX_REPEATS, or FEW_REPEATS where no check reads the figures) or BUDGET_SECONDS,
whichever comes first, for ONNX Runtime and PyTorch alike; and ONNX Runtime's profile of a few
calls, read for its costliest nodes (--profile).

The calls are the case's own, on its samples in turn, in the worker's one compute thread; a
GPU call waits for its device before the clock stops. Only the figures come out: judging them
is compare/latency.py's.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from onnx_parity.backends.session import create_session
from onnx_parity.findings import CallTimes, NodeCost
from onnx_parity.spec import TargetSpec

if TYPE_CHECKING:
    from onnx_parity.backends.pytorch import Binding

logger = logging.getLogger(__name__)

MAX_REPEATS = 10  # timed calls per side and case, at most, where the latency check reads them
FEW_REPEATS = 5  # at most, where no check does (a note's spread needs no more)
BUDGET_SECONDS = 0.1  # timing per side and case stops once it has taken this long
PROFILED_CALLS = 3  # calls --profile records, after its session's first
COSTLIEST = 5  # nodes --profile lists

Call = Callable[[], Any]


def time_calls(calls: Sequence[Call], device: str = "cpu",
               wait: Callable[[], None] | None = None, warm: bool = False,
               repeats: int = MAX_REPEATS) -> CallTimes:
    """One warm-up call, then `calls` in turn (one per sample) until `repeats` timed calls or
    BUDGET_SECONDS; at least one is timed, however long it takes. `wait` blocks until the
    device has finished (a GPU's queue). `warm`: every call was just made on the same session
    (the case's own outputs), which warmed it up as the warm-up call would: none is made."""
    wait = wait or (lambda: None)
    if not warm:
        calls[0]()
        wait()
    times: list[float] = []
    started = time.perf_counter()
    while len(times) < repeats and (not times or
                                    time.perf_counter() - started < BUDGET_SECONDS):
        call = calls[len(times) % len(calls)]
        begun = time.perf_counter()
        call()
        wait()
        times.append((time.perf_counter() - begun) * 1000)
    q1, _, q3 = (statistics.quantiles(times, n=4, method="inclusive") if len(times) > 1
                 else (times[0], 0.0, times[0]))
    return CallTimes(median_ms=statistics.median(times), q1_ms=q1, q3_ms=q3,
                     repeats=len(times), device=device)


def torch_calls(module: Any, samples: Sequence[Mapping[str, np.ndarray]],
                forward_args: Mapping[str, Any], binding: Binding,
                device: str) -> tuple[list[Call], Callable[[], None], str]:
    """The module's forward() on each sample, as calls to time, the wait for the device, and
    the device they run on. On "cuda" a copy of the module is moved there (the reference
    itself stays where it ran), when torch can reach a GPU; otherwise they run on the CPU."""
    import torch

    # the PyTorch reference's module: only a torch model
    from onnx_parity.backends.pytorch import forward

    wait: Callable[[], None] = lambda: None  # noqa: E731
    if device == "cuda" and torch.cuda.is_available():
        module = copy.deepcopy(module).to("cuda")
        wait = torch.cuda.synchronize
    else:
        device = "cpu"
    calls: list[Call] = []
    for sample in samples:
        tensors = {name: torch.from_numpy(np.ascontiguousarray(a)).to(device)
                   for name, a in sample.items()}
        args, keywords = binding.call(tensors)
        moved = {k: v.to(device) if isinstance(v, torch.Tensor) else v
                 for k, v in forward_args.items()}

        def call(args: list[Any] = args, keywords: dict[str, Any] = keywords | moved) -> Any:
            return forward(module, args, keywords)

        calls.append(call)
    return calls, wait, device


def profile_nodes(path: Path, target: TargetSpec, feeds: Mapping[str, np.ndarray],
                  threads: int, work_dir: Path | None) -> tuple[tuple[NodeCost, ...], Path]:
    """ONNX Runtime's profile of PROFILED_CALLS calls on `feeds` after a first one, in a
    session of its own: the COSTLIEST nodes by time per call, and the profile's file, which the
    caller keeps or deletes."""
    prefix = os.path.join(tempfile.gettempdir(), f"onnx-parity-latency-{os.getpid()}")
    session, _ = create_session(str(path), target, threads=threads, profile_to=prefix,
                                work_dir=work_dir)
    ran = False
    try:
        for _ in range(PROFILED_CALLS + 1):
            session.run(None, dict(feeds))
        ran = True
    finally:
        written = Path(session.end_profiling())
        if not ran:
            with contextlib.suppress(OSError):
                written.unlink()
    try:
        events = json.loads(written.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        with contextlib.suppress(OSError):
            written.unlink()
        raise
    return costliest_nodes(events), written


def costliest_nodes(events: Any, count: int = COSTLIEST) -> tuple[NodeCost, ...]:
    """The `count` nodes with the most kernel time per call in a profile, the first run (which
    builds things) left out."""
    events = [e for e in events if isinstance(e, Mapping)] if isinstance(events, list) else []
    runs = sorted((float(e.get("ts", 0)), float(e.get("dur", 0))) for e in events
                  if e.get("name") == "model_run")
    after = runs[0][0] + runs[0][1] if len(runs) > 1 else -1.0
    calls = max(len(runs) - 1, 1)
    total: dict[str, float] = {}
    kinds: dict[str, tuple[str, str]] = {}
    for event in events:
        name = str(event.get("name", ""))
        if (event.get("cat") != "Node" or not name.endswith("_kernel_time")
                or float(event.get("ts", 0)) < after):
            continue
        node = name[:-len("_kernel_time")]
        args = event.get("args")
        args = args if isinstance(args, Mapping) else {}
        total[node] = total.get(node, 0.0) + float(event.get("dur", 0)) / 1000
        kinds[node] = (str(args.get("op_name", "?")), str(args.get("provider", "?")))
    ranked = sorted(total, key=lambda n: -total[n])[:count]
    return tuple(NodeCost(node, *kinds[node], ms=total[node] / calls) for node in ranked)
