"""The worker process: its entry point, the link that sends its log lines and results to the
parent, and the limits it lives under (memory, the parent's life). What it does with each model
is flow.py's: each case resolved (prepared.py) through the model's cache (memo.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from onnx_parity.run.flow import run_case
from onnx_parity.run.isolation import confine_worker
from onnx_parity.run.memo import ModelMemo
from onnx_parity.run.protocol import DONE, LOG, RESULT, Progress, WorkerTask

Emit = Callable[[tuple[Any, ...]], None]


def worker_main(conn: Connection, slots: Any) -> None:
    """Entry point of a worker (forked or spawned): checks batches of models until told to stop.

    A worker serves many models in turn, so torch's import and the exporter's warm-up are
    paid once per worker, not once per model; load_module seeds every factory call, so which
    models ran before in the same worker does not matter. torch is imported by the first
    model that needs it, never by a worker that checks only ONNX files. Small ONNX-only models
    come several to a batch, so the messages per model do not outweigh the model.
    """
    _last_words_to_log()
    _die_with_parent()
    # A forked worker inherits the run's logging (under -v, DEBUG on the root logger): it
    # starts as a spawned one does, with none, its package's records sent to the parent.
    logging.root.handlers.clear()
    logging.root.setLevel(logging.WARNING)
    # The models' own code runs here: it gets no credential, and no way to read the parent's
    # (isolation.py).
    confine_worker()
    progress = Progress(slots)
    handler = _ToParent(conn)
    # Every batch needs these; importing them now overlaps the parent's reading of the spec.
    import onnx  # noqa: F401

    _build_operator_registry()
    import onnxruntime

    _ready_for_cases(onnxruntime)
    try:
        while (batch := conn.recv()) is not None:
            if batch and batch[0].verbose:
                handler.attach()
            for index, task in enumerate(batch):
                progress.model(index)
                with _memory_limit(task.model.memory_limit, task.model.torch is not None):
                    run_model(task, conn.send, progress)
            conn.send((DONE,))
    except EOFError:
        pass  # the parent went away
    finally:
        conn.close()


def _build_operator_registry() -> None:
    """onnx builds its registry of operators on the first check of a model (20 ms), in C++
    that lets go of the GIL: a thread checks a one-node model while the worker imports ONNX
    Runtime, on the core the run's process leaves idle, and the first model's check (every
    model is checked, prepare/export.py) finds the registry built."""
    import threading

    import onnx

    from onnx_parity.backends.floatenv import IDENTITY_MODEL

    threading.Thread(target=onnx.checker.check_model, args=(IDENTITY_MODEL,),
                     name="onnx-registry", daemon=True).start()


# What every ONNX Runtime case imports on its way (its session, data, comparison, timing and
# float16 check): imported while the parent reads the spec, not as the first model arrives.
# tests/run/test_speed.py checks that a case imports nothing else of the package.
CASE_MODULES = (
    "onnx_parity.backends.fallback",
    "onnx_parity.backends.precision",
    "onnx_parity.backends.kinds",
    "onnx_parity.backends.timing",
    "onnx_parity.capture",
    "onnx_parity.compare.blind",
    "onnx_parity.compare.expect",
    "onnx_parity.compare.latency",
    "onnx_parity.compare.outputs",
    "onnx_parity.explain.causes",
    "onnx_parity.prepare.dynamic",
    "onnx_parity.prepare.export",
    "onnx_parity.prepare.inputs",
    "onnx_parity.prepare.recorded",
    "onnx_parity.run.float16",
    "onnx_parity.run.latency",
)


def _ready_for_cases(ort: Any) -> None:
    """The first model's costs paid while the worker waits for it: the modules a case imports,
    and ONNX Runtime's first session (the one that learns the floating-point environment a
    session leaves, backends/floatenv.py), about 20 ms. What the worker holds by then (the
    modules of numpy, onnx, ONNX Runtime and the run, 70,000 objects) lives as long as it
    does: the cycle collector leaves it out of its full collections (gc.freeze), each of which
    walked it again (40 ms in 900 one-node models)."""
    import gc
    import importlib

    # What fails here (a module's import, a broken ONNX Runtime) fails again in the first
    # case, which reports it as its own error; the worker itself does not die of it.
    with contextlib.suppress(Exception):
        from onnx_parity.backends.floatenv import float_environment

        for name in CASE_MODULES:
            importlib.import_module(name)
        float_environment(ort)
    gc.freeze()


_CRASH_LOG: Any = None  # kept open for the worker's whole life
_LOG: _ToParent | None = None  # set once -v asked for the worker's log lines


class _ToParent(logging.Handler):
    """The worker's log records, sent to the parent (which prints them under -v), each line
    led by the id of the case the worker is on."""

    def __init__(self, conn: Connection) -> None:
        super().__init__(logging.DEBUG)
        self.conn = conn
        self.case = ""

    def attach(self) -> None:
        global _LOG
        if _LOG is None:
            package = logging.getLogger("onnx_parity")
            package.setLevel(logging.DEBUG)
            package.addHandler(self)
            package.propagate = False
            _LOG = self

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if self.case and not text.startswith(self.case):
            text = f"{self.case}: {text}"
        with contextlib.suppress(OSError, ValueError):
            self.conn.send((LOG, record.levelno, record.name, text))


def _die_with_parent() -> None:
    """On Linux, the kernel kills the worker when the run's process dies, however it dies (a
    SIGKILL gives it no chance to stop its workers): no orphan goes on checking a hung model."""
    import ctypes
    import signal
    import sys

    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG


def _last_words_to_log() -> None:
    """A crash in native code prints its traceback to the worker's log: to a copy of the
    descriptor the log is on now, since fd 2 is pointed elsewhere while a session is made."""
    import faulthandler

    global _CRASH_LOG
    try:
        _CRASH_LOG = os.fdopen(os.dup(2), "w")
    except OSError:
        return
    faulthandler.enable(file=_CRASH_LOG)


@contextlib.contextmanager
def _memory_limit(mebibytes: float | None, torch: bool = False) -> Iterator[None]:
    """A soft address-space limit for one model, lifted again for the next: `mebibytes` on
    top of what the worker has mapped when the model starts. torch is imported first for a
    model that needs it: its libraries map far more address space than they use (a CUDA
    build's, gigabytes), and an import under the limit would fail on them, not on the model."""
    if mebibytes is None:
        yield
        return
    import resource

    if torch:
        import torch as _  # noqa: F401
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = _mapped() + int(mebibytes * (1 << 20))
    resource.setrlimit(resource.RLIMIT_AS, (min(limit, hard) if hard > 0 else limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _mapped() -> int:
    """The bytes of address space this process has mapped (0 where /proc cannot tell)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return 0
    line = next((x for x in status.splitlines() if x.startswith("VmSize:")), "")
    fields = line.split()
    return int(fields[1]) * 1024 if len(fields) >= 2 and fields[1].isdigit() else 0


def run_model(task: WorkerTask, emit: Emit, progress: Progress | None = None) -> None:
    """Every case of one model, each result sent as it is known."""
    memo = ModelMemo(task)
    for index, case in enumerate(task.cases):
        emit((RESULT, run_case(memo, case, index, progress, _LOG)))
