"""Worker processes: started with their output in a log, watched through shared memory.

A light module on purpose: `onnx-parity run` starts its first worker before it reads the
spec, and the worker imports numpy, onnx and ONNX Runtime meanwhile, so a small check costs
little more than a bare script. Nothing here imports more than the standard library and the
run's protocol (run/protocol.py).

The workers started before the spec is read are forked where that is safe (`can_fork`), every
later one (a replacement, or one the plan adds) spawned. A spawned worker pays a second
interpreter, the re-import of the command line's modules as its main module and
multiprocessing's resource tracker (a third interpreter), about a third of a small check's
time; a fork pays none of them and isolates the models as well: its own process, its
own limits, killed on a crash or a hang like any other worker. A process may only be forked
before ONNX Runtime, torch or a second thread lives in it (neither survives a fork), and only
if it holds no credential: a forked child has its parent's memory and first environment.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from onnx_parity.run.protocol import Progress

if TYPE_CHECKING:
    from onnx_parity.literals import Stage
    from onnx_parity.run.protocol import WorkerTask


@dataclass
class Worker:
    """A live worker process, the batch it is checking (empty when idle) and what it said."""

    process: Any
    conn: Connection
    log: Path  # the worker's own stdout and stderr: its last words when it dies
    slots: Any  # its Progress, in shared memory
    batch: tuple[WorkerTask, ...] = ()
    done: set[str] = field(default_factory=set)
    assigned: float = 0.0

    def assign(self, batch: tuple[WorkerTask, ...]) -> None:
        self.batch, self.done, self.assigned = batch, set(), time.monotonic()
        with contextlib.suppress(OSError):  # it died already: the run loop reports its EOF
            self.conn.send(batch)

    def where(self) -> tuple[int, int, Stage]:
        """(model in the batch, case in the model or -1, stage), from the shared progress."""
        model, case, stage, _ = Progress.read(self.slots)
        return max(model, 0), case if model >= 0 else -1, stage

    @property
    def deadline(self) -> float:
        """When the model it is on runs out of time (the first one's, before it starts)."""
        if not self.batch:
            return float("inf")
        model, _, _, started = Progress.read(self.slots)
        if 0 <= model < len(self.batch) and started >= self.assigned:
            return started + self.batch[model].model.timeout
        return self.assigned + self.batch[0].model.timeout


class Pool:
    """The worker processes and the folder of their logs. Made before the spec is read, its
    first workers (`prestart`: one, or as many as --jobs asks for, cli/main.py) import numpy,
    onnx and ONNX Runtime while the parent reads the spec and plans the cases: a small
    ONNX-only check then costs little more than a bare script, and a large suite's workers are
    ready when its first batches are."""

    def __init__(self, prestart: int = 0, fork: bool = False) -> None:
        self.context = multiprocessing.get_context("spawn")
        self.logs = Path(tempfile.mkdtemp(prefix="onnx-parity-workers-"))
        self.workers: list[Worker] = []
        self.spawned = 0
        for _ in range(prestart):
            self.spawn(fork=fork and can_fork())

    def spawn(self, fork: bool = False) -> Worker:
        """A new worker: forked when asked (the caller checked `can_fork`), else spawned."""
        self.spawned += 1
        context = multiprocessing.get_context("fork") if fork else self.context
        self.workers.append(_spawn(context, self.logs / f"worker-{self.spawned}.log",
                                   [worker.conn for worker in self.workers]))
        return self.workers[-1]


    def close(self) -> None:
        for worker in self.workers:
            _close(worker)
        self.workers.clear()
        shutil.rmtree(self.logs, ignore_errors=True)


# Modules that do not survive a fork: their threads and device state stay in the parent.
_FORK_UNSAFE = ("onnxruntime", "torch", "tensorflow", "jax")


def can_fork() -> bool:
    """Whether this process may fork a worker: Linux (elsewhere fork is unsafe or missing),
    one thread, and nothing loaded that keeps threads or a device (a test that calls `run` in
    its own process has ONNX Runtime loaded: it spawns). Whether it holds credentials is the
    caller's to know (run/isolation.py withholds them)."""
    import threading

    return (sys.platform.startswith("linux") and threading.active_count() == 1
            and not any(name in sys.modules for name in _FORK_UNSAFE))


def _spawn(context: Any, log: Path, others: Sequence[Connection] = ()) -> Worker:
    """A worker whose stdout and stderr go to `log`: exporters' dumps and ONNX Runtime's
    warnings stay off the console, and a worker that dies leaves its last words there, even
    one that dies while starting (an import that fails before worker_main runs)."""
    ours, theirs = context.Pipe(duplex=True)
    slots = context.RawArray("d", [-1.0, -1.0, 0.0, 0.0])
    # A forked worker has our end of its pipe too, and of every earlier worker's: it closes
    # them first (_worker_entry), so that its end reads EOF when this process is gone, as a
    # spawned one's does, and holds no other worker's line.
    ours_too = (ours, *others) if context.get_start_method() == "fork" else ()
    process = context.Process(target=_worker_entry, args=(theirs, slots, ours_too),
                              name="onnx-parity-worker", daemon=True)
    with _inherited_output(log):
        process.start()
    theirs.close()  # the worker holds the only other end: EOF means it is gone
    return Worker(process, ours, log, slots)


@contextlib.contextmanager
def _inherited_output(log: Path) -> Iterator[None]:
    """File descriptors 1 and 2 point at `log` while a child is started, which inherits them."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    try:
        saved = [os.dup(1), os.dup(2)]
    except OSError:  # no descriptors to borrow: the child shares ours
        yield
        return
    with log.open("ab") as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            for fd, copy in zip((1, 2), saved, strict=True):
                os.dup2(copy, fd)
                os.close(copy)


def _close(worker: Worker) -> None:
    """Stop a worker. It holds nothing worth a graceful exit (its results are in, its log is
    only read on a crash), and tearing down numpy, onnx and ONNX Runtime would cost a tenth
    of a second. Killed, not waited for: the kernel freeing a killed worker's memory takes
    7 to 10 ms with ONNX Runtime loaded, which nothing of the run needs to wait for (the
    reports follow); multiprocessing reaps it when this process next starts one, or at exit."""
    if worker.process.is_alive():
        worker.process.kill()
    worker.conn.close()


def stop(process: Any, hung: bool) -> None:
    if not hung:
        process.join(timeout=5)  # it is exiting: let it finish, so its exit code is known
    if process.is_alive():
        process.kill()
        process.join(timeout=5)


_LAST_WORDS = re.compile(r"^(?:[\w.]+(?:Error|Exception|Exit|Interrupt)\b|Fatal Python error|"
                         r"Segmentation fault|terminate called|Aborted|Killed)")


def log_tail(log: Path, lines: int = 20, limit: int = 16384) -> list[str]:
    """The last non-empty lines a worker wrote, from at most the last `limit` bytes."""
    try:
        with log.open("rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - limit))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [line.rstrip() for line in text.splitlines() if line.strip()][-lines:]


def last_words(tail: Sequence[str]) -> str:
    """The line that says why: the last exception or fatal error, else the last line."""
    return next((line.strip() for line in reversed(tail) if _LAST_WORDS.match(line.strip())),
                tail[-1].strip())


def _worker_entry(conn: Connection, slots: Any, parents: Sequence[Connection] = ()) -> None:
    """What a worker runs: the worker module is imported there, not here."""
    for line in parents:
        line.close()
    # numpy's BLAS computes with one thread in a worker, as torch and ONNX Runtime do
    # (protocol.py): the pool of a thread a core that numpy's import starts, before the worker
    # module's first line runs, cost each worker 0.06-0.1 s of CPU for threads no check uses.
    # One the user set is kept.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from onnx_parity.run.worker import worker_main

    worker_main(conn, slots)
