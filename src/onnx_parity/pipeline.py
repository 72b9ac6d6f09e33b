"""The orchestrator: models go to worker processes; crashes and hangs become errors, not silence.

Workers are spawned, never forked: ONNX Runtime and CUDA do not survive fork. A worker checks
one model at a time and then takes the next, so imports are paid once per worker. A worker that
dies (SIGSEGV in a custom op, SIGABRT, the OOM killer) or outlives the model's `timeout` ends
that model's remaining cases in `error` with the stage it was in, and is replaced; every other
model is still checked.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from onnx_parity.environment import Gpu
from onnx_parity.plan import Case
from onnx_parity.results import CaseResult, Stage, Status
from onnx_parity.spec import ModelSpec, Spec
from onnx_parity.worker import WorkerTask, worker_main

logger = logging.getLogger(__name__)


WORKER_BYTES = 2 << 30
# One compute thread per worker, in torch and ONNX Runtime alike: the order of a reduction's
# additions then does not depend on --jobs or on the machine's cores, so neither do the numbers.
# Parallelism comes from checking models side by side.
WORKER_THREADS = 1


@dataclass(frozen=True)
class RunOptions:
    work_dir: Path
    jobs: int = 0  # 0: one per core, bounded by memory
    localize: str = "failed"  # never | failed | always
    artifacts: Path | None = None  # repro bundles of failed cases
    gpus: tuple[Gpu, ...] = ()  # the preflight's GPUs, for each GPU case's record


@dataclass
class _Worker:
    """A live worker process, the model it is checking (None when idle) and what it said."""

    process: Any
    conn: Connection
    log: Path  # the worker's own stdout and stderr: its last words when it dies
    model: ModelSpec | None = None
    cases: tuple[Case, ...] = ()
    deadline: float = float("inf")
    done: dict[str, CaseResult] = field(default_factory=dict)
    current: str | None = None
    stage: Stage = "load"

    def assign(self, task: WorkerTask) -> None:
        self.conn.send(task)
        self.model, self.cases, self.done = task.model, task.cases, {}
        self.current, self.stage = None, "load"
        self.deadline = time.monotonic() + task.model.timeout


class Interrupted(Exception):
    """SIGTERM or SIGINT arrived: a cancelled workflow or a job timeout."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


@dataclass(frozen=True)
class Outcome:
    results: tuple[CaseResult, ...]
    interrupted: str | None = None  # the signal's name when the run was cut short


def auto_jobs(models: int) -> int:
    """One worker per core, fewer when memory is short (a worker with torch needs ~1-2 GiB)."""
    cores = os.cpu_count() or 1
    try:
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        free = cores * WORKER_BYTES
    return max(1, min(cores, models, free // WORKER_BYTES))


def run_cases(
    spec: Spec, cases: Sequence[Case], options: RunOptions,
    on_result: Callable[[CaseResult], None] = lambda _: None,
) -> Outcome:
    """Run every case; results come back in `cases` order whatever the number of jobs.

    On SIGTERM or SIGINT the workers are stopped and every unfinished case ends `skipped`
    with the reason, so the reports still say what was and was not checked.
    """
    groups = _by_model(cases)
    jobs = options.jobs or auto_jobs(len(groups))
    context = multiprocessing.get_context("spawn")
    pending = [WorkerTask(spec.root, model, group, options.work_dir / model.name,
                          options.localize, options.artifacts, WORKER_THREADS, options.gpus)
               for model, group in groups]
    logs = options.work_dir / "workers"
    logs.mkdir(parents=True, exist_ok=True)
    spawned = 0
    workers: list[_Worker] = []
    results: dict[str, CaseResult] = {}

    def finish(result: CaseResult) -> None:
        results[result.id] = result
        on_result(result)

    interrupted = None
    with _signals_raise():
        try:
            while pending or any(w.model for w in workers):
                for worker in workers:
                    if pending and worker.model is None:
                        worker.assign(pending.pop(0))
                while pending and len(workers) < jobs:
                    spawned += 1
                    workers.append(_spawn(context, logs / f"worker-{spawned}.log"))
                    workers[-1].assign(pending.pop(0))
                _step(workers, finish)
        except (Interrupted, KeyboardInterrupt) as exc:
            interrupted = exc.signal_name if isinstance(exc, Interrupted) else "SIGINT"
            for worker in workers:
                worker.process.kill()
        finally:
            for worker in workers:
                _close(worker)
    for case in cases:
        if case.id not in results:
            finish(skipped(case, f"not run: the run was interrupted by {interrupted}"))
    return Outcome(tuple(results[c.id] for c in cases), interrupted)


def _spawn(context: Any, log: Path) -> _Worker:
    """A worker whose stdout and stderr go to `log`: exporters' dumps and ONNX Runtime's
    warnings stay off the console, and a worker that dies leaves its last words there, even
    one that dies while starting (an import that fails before worker_main runs)."""
    ours, theirs = context.Pipe(duplex=True)
    process = context.Process(target=worker_main, args=(theirs,),
                              name="onnx-parity-worker", daemon=True)
    with _inherited_output(log):
        process.start()
    theirs.close()  # the worker holds the only other end: EOF means it is gone
    return _Worker(process, ours, log)


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


def _step(workers: list[_Worker], finish: Callable[[CaseResult], None]) -> None:
    """Wait for the next message, exit or deadline, and act on it."""
    busy = [w for w in workers if w.model is not None]
    nearest = min(w.deadline for w in busy)
    ready = wait([w.conn for w in busy], timeout=max(0.0, nearest - time.monotonic()))
    for worker in busy:
        if worker.conn in ready and _receive(worker, finish):
            continue
        if worker.conn in ready or time.monotonic() >= worker.deadline:
            # Gone or over time: its model's unfinished cases are errors.
            timed_out = worker.conn not in ready
            _stop(worker.process, timed_out)
            for result in _unfinished(worker, timed_out):
                finish(result)
            worker.conn.close()
            workers.remove(worker)  # the run loop starts a fresh one if work is left


def _close(worker: _Worker) -> None:
    """Ask an idle worker to leave; stop one that does not."""
    if worker.process.is_alive() and worker.model is None:
        with contextlib.suppress(OSError, ValueError):
            worker.conn.send(None)
    worker.process.join(timeout=5)
    if worker.process.is_alive():
        worker.process.kill()
        worker.process.join(timeout=5)
    worker.conn.close()


@contextlib.contextmanager
def _signals_raise() -> Iterator[None]:
    """SIGTERM raises like SIGINT does, so the run loop can stop and still report."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(number: int, _frame: Any) -> None:
        raise Interrupted(signal.Signals(number).name)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def skipped(case: Case, message: str) -> CaseResult:
    """The result of a case that was not run, and why."""
    return _result(case, "skipped", message)


def _result(case: Case, status: Status, message: str, stage: Stage | None = None,
            details: dict[str, Any] | None = None) -> CaseResult:
    return CaseResult(
        id=case.id, model=case.model.name, opset=case.opset, exporter=case.exporter,
        target=case.target.name, dataset=case.dataset.name, batch_size=case.batch_size,
        status=status, stage=stage, message=message, line=case.model.line,
        details=details or {},
    )


def _by_model(cases: Sequence[Case]) -> list[tuple[ModelSpec, tuple[Case, ...]]]:
    groups: dict[str, list[Case]] = {}
    models: dict[str, ModelSpec] = {}
    for case in cases:
        groups.setdefault(case.model.name, []).append(case)
        models[case.model.name] = case.model
    return [(models[name], tuple(group)) for name, group in groups.items()]


def _receive(worker: _Worker, finish: Callable[[CaseResult], None]) -> bool:
    """Drain one message; False when the worker has gone (EOF)."""
    try:
        message = worker.conn.recv()
    except (EOFError, OSError):
        return False
    if message[0] == "stage":
        worker.current, worker.stage = message[1], message[2]
    elif message[0] == "result":
        result: CaseResult = message[1]
        worker.done[result.id] = result
        finish(result)
    elif message[0] == "done":
        worker.model, worker.cases, worker.deadline = None, (), float("inf")
    return True


def _stop(process: Any, hung: bool) -> None:
    if not hung:
        process.join(timeout=5)  # it is exiting: let it finish, so its exit code is known
    if process.is_alive():
        process.kill()
        process.join(timeout=5)


def _unfinished(worker: _Worker, timed_out: bool) -> list[CaseResult]:
    """Error results for the cases a dead or stopped worker never finished."""
    assert worker.model is not None
    code = worker.process.exitcode
    where = f"in stage {worker.stage}" if worker.current else "before its first case"
    if timed_out:
        cause = f"timed out after {worker.model.timeout:g} s {where}"
    elif code is not None and code < 0:
        cause = f"the worker crashed with {_signal_name(-code)} {where}"
    else:
        cause = f"the worker exited with code {code} {where}"
    tail = [] if timed_out else log_tail(worker.log)
    if tail:
        cause += f": {last_words(tail)}"
    details = {"worker_log": tail} if tail else {}
    results = []
    for case in worker.cases:
        if case.id in worker.done:
            continue
        stage: Stage | None
        if case.id == worker.current:
            message, stage = cause[0].upper() + cause[1:], worker.stage
        elif worker.current is None:
            message, stage = f"not run: {cause}", "load"
        else:
            message, stage = f"not run: {cause} while checking {worker.current}", None
        results.append(_result(case, "error", message, stage, details))
    return results


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


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
