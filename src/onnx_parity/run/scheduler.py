"""The orchestrator: models go to worker processes; crashes and hangs become errors, not silence.

Workers are spawned (ONNX Runtime and CUDA do not survive fork), but for the first, forked where
that is safe (pool.py): before ONNX Runtime or torch is loaded here. A worker checks
one batch of models at a time and then takes the next, so imports are paid once per worker: a
model with a PyTorch source is a batch of its own, small ONNX-only models come several to a
batch. A worker that dies (SIGSEGV in a custom op, SIGABRT, the OOM killer) or outlives a
model's `timeout` ends that model's remaining cases in `error` with the stage it was in (read
from the progress it keeps in shared memory) and is replaced; the batch's later models go to
the next worker, and every other model is still checked.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import logging
import math
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import field
from multiprocessing.connection import wait
from pathlib import Path
from typing import TYPE_CHECKING, Any

from onnx_parity.findings import CaseDetails, Gpu
from onnx_parity.frozen import frozen
from onnx_parity.literals import Causes, Localize, Stage
from onnx_parity.plan.cases import Case
from onnx_parity.results import CaseResult
from onnx_parity.run.pool import Pool, Worker, last_words, log_tail, stop
from onnx_parity.run.protocol import DONE, LOG, RESULT, WorkerTask
from onnx_parity.spec import ModelSpec, Spec

if TYPE_CHECKING:
    from onnx_parity.compare.baseline import Baseline
    from onnx_parity.compare.chain import Skipped, Stopped
    from onnx_parity.prepare.cache import ExportCache

logger = logging.getLogger(__name__)


WORKER_BYTES = 2 << 30
# One compute thread per worker, in torch and ONNX Runtime alike: the order of a reduction's
# additions then does not depend on --jobs or on the machine's cores, so neither do the numbers.
# Parallelism comes from checking models side by side.
WORKER_THREADS = 1


@frozen
class RunOptions:
    work_dir: Path
    jobs: int = 0  # 0: one per core, bounded by memory
    localize: Localize = "failed"
    causes: Causes = "failed"
    artifacts: Path | None = None  # repro bundles of failed cases
    verbose: bool = False  # workers send their log lines to be printed
    gpus: tuple[Gpu, ...] = ()  # the preflight's GPUs, for each GPU case's record
    baseline: Baseline | None = None  # judged in the workers, by the verdict chain
    profile: bool = False  # ONNX Runtime's profile per case (--profile)
    cache: ExportCache | None = None  # --cache
    today: datetime.date = field(default_factory=datetime.date.today)  # for `expect: until`

    def task(self, spec: Spec, model: ModelSpec, cases: tuple[Case, ...]) -> WorkerTask:
        """One model's cases as a worker takes them."""
        return WorkerTask(spec.root, model, cases, self.work_dir / model.name,
                          localize=self.localize, causes=self.causes, artifacts=self.artifacts,
                          threads=WORKER_THREADS, gpus=self.gpus, verbose=self.verbose,
                          baseline=self.baseline.for_cases(c.id for c in cases)
                          if self.baseline is not None else None,
                          profile=self.profile, cache=self.cache, today=self.today)

    def never_ran(self, case: Case, outcome: Stopped | Skipped,
                  details: CaseDetails | None = None) -> CaseResult:
        """The result of a case that produced no outcome of its own: skipped, or lost with its
        worker (a crash, a hang), settled by the same chain as every other case."""
        # numpy: the workers', not this process's
        from onnx_parity.compare.chain import Rules, settle

        rules = Rules(baseline=self.baseline, regression=case.model.regression,
                      expectations=tuple(case.model.expect), today=self.today)
        return settle(case, outcome, rules, details)


class Interrupted(Exception):
    """SIGTERM or SIGINT arrived: a cancelled workflow or a job timeout."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name


@frozen
class Ran:
    """What a run of cases gave back: every case's result in order, and how it was cut short
    (a case's own outcome is compare/chain.py's)."""

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
    on_result: Callable[[CaseResult], None] = lambda _: None, pool: Pool | None = None,
    tick: Callable[[], float] = lambda: math.inf,
) -> Ran:
    """Run every case; results come back in `cases` order whatever the number of jobs.

    `tick` is called whenever the loop wakes and says in how many seconds it wants to be
    called again (the live reports, written also while no case finishes).

    On SIGTERM or SIGINT the workers are stopped and every unfinished case ends `skipped`
    with the reason, so the reports still say what was and was not checked.
    """
    groups = _by_model(cases)
    jobs = options.jobs or auto_jobs(len(groups))
    tasks = [options.task(spec, model, group) for model, group in groups]
    pending = batches(tasks, jobs)
    pool = pool or Pool()
    workers = pool.workers
    results: dict[str, CaseResult] = {}

    def finish(result: CaseResult) -> None:
        results[result.id] = result
        on_result(result)

    interrupted = None
    with _signals_raise(), _collector_eased():
        try:
            while pending or any(w.batch for w in workers):
                for worker in workers:
                    if pending and not worker.batch:
                        worker.assign(pending.pop(0))
                while pending and len(workers) < jobs:
                    pool.spawn().assign(pending.pop(0))
                _step(workers, finish, pending, tick, options)
        except (Interrupted, KeyboardInterrupt) as exc:
            interrupted = exc.signal_name if isinstance(exc, Interrupted) else "SIGINT"
            for worker in workers:
                worker.process.kill()
        finally:
            pool.close()
    missing = [case for case in cases if case.id not in results]
    if missing:  # the verdict chain (and numpy with it) is the workers' to import, not ours
        from onnx_parity.compare.chain import Skipped

        for case in missing:
            finish(options.never_ran(
                case, Skipped(f"not run: the run was interrupted by {interrupted}")))
    return Ran(tuple(results[c.id] for c in cases), interrupted)


# The lines of a dead worker's log that a report keeps, and those searched for its last words.
LOG_LINES, WORDS_LINES = 20, 80

# ONNX-only models per batch at most, and batches per worker at least of what is left, so that
# the last batches still spread over the workers.
BATCH_MODELS = 64
BATCHES_PER_WORKER = 4


def batches(tasks: Sequence[WorkerTask], jobs: int) -> list[tuple[WorkerTask, ...]]:
    """A model with a PyTorch source alone (exports are heavy, and it may set its own memory
    limit); consecutive ONNX-only models together, in spec order, each batch at most a
    (BATCHES_PER_WORKER x jobs)th of the ONNX-only models left: they shrink toward the end, so
    that no worker is left with a batch of 64 while the others have nothing to do."""
    left = sum(task.model.torch is None for task in tasks)
    spread = max(1, jobs * BATCHES_PER_WORKER)
    out: list[tuple[WorkerTask, ...]] = []
    run: list[WorkerTask] = []
    for task in tasks:
        if task.model.torch is None:
            if not run:
                size = max(1, min(BATCH_MODELS, left // spread))
            run.append(task)
            left -= 1
            if len(run) < size:
                continue
        if run:
            out.append(tuple(run))
            run = []
        if task.model.torch is not None:
            out.append((task,))
    if run:
        out.append(tuple(run))
    return out


def _step(workers: list[Worker], finish: Callable[[CaseResult], None],
          pending: list[tuple[WorkerTask, ...]], tick: Callable[[], float],
          options: RunOptions) -> None:
    """Wait for the next message, exit, deadline or tick, and act on it."""
    busy = [w for w in workers if w.batch]
    nearest = min(w.deadline for w in busy) - time.monotonic()
    timeout = min(nearest, tick())
    ready = wait([w.conn for w in busy], timeout=max(0.0, timeout) if timeout < math.inf else None)
    for worker in busy:
        if worker.conn in ready and _receive(worker, finish):
            continue
        if worker.conn in ready or time.monotonic() >= worker.deadline:
            # Gone or over time: its model's unfinished cases are errors; the batch's models it
            # never started go first to the next worker.
            timed_out = worker.conn not in ready
            stop(worker.process, timed_out)
            results, rest = _unfinished(worker, timed_out, options)
            for result in results:
                finish(result)
            if rest:
                pending.insert(0, rest)
            worker.conn.close()
            workers.remove(worker)  # the run loop starts a fresh one if work is left


@contextlib.contextmanager
def _collector_eased() -> Iterator[None]:
    """Python's cycle collector eased while the results come in: what the process holds as
    the run starts (its spec, its plan, its modules) is set aside for good (gc.freeze), and a
    young collection comes after 10,000 allocations rather than 700. The results and report
    parts that pile up form no cycles; walking them again and again took 0.14 s of the run's
    process for the node suite's 1,884 cases, 0.08-0.1 s so (report/texts.py keeps the
    parts)."""
    threshold = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        gc.unfreeze()


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


def _by_model(cases: Sequence[Case]) -> list[tuple[ModelSpec, tuple[Case, ...]]]:
    groups: dict[str, list[Case]] = {}
    models: dict[str, ModelSpec] = {}
    for case in cases:
        groups.setdefault(case.model.name, []).append(case)
        models[case.model.name] = case.model
    return [(models[name], tuple(group)) for name, group in groups.items()]


def _receive(worker: Worker, finish: Callable[[CaseResult], None]) -> bool:
    """Drain one message; False when the worker has gone (EOF)."""
    try:
        message = worker.conn.recv()
    except (EOFError, OSError):
        return False
    if message[0] == RESULT:
        result: CaseResult = message[1]
        worker.done.add(result.id)
        finish(result)
    elif message[0] == LOG:  # a worker's log line under -v, led by its case id
        _, level, name, text = message
        logging.getLogger(name).log(level, "%s", text)
    elif message[0] == DONE:
        worker.batch = ()
    return True


def _unfinished(worker: Worker, timed_out: bool,
                options: RunOptions) -> tuple[list[CaseResult], tuple[WorkerTask, ...]]:
    """Error results for the cases of the model a dead or stopped worker was on, and the
    batch's models it never started."""
    from onnx_parity.compare.chain import Stopped  # as above: numpy is the workers'

    at, current, stage = worker.where()
    task = worker.batch[at]
    code = worker.process.exitcode
    where = f"in stage {stage}" if current >= 0 else "before its first case"
    if timed_out:
        cause = f"timed out after {task.model.timeout:g} s {where}"
    elif code is not None and code < 0:
        cause = f"the worker crashed with {_signal_name(-code)} {where}"
    else:
        cause = f"the worker exited with code {code} {where}"
    # The cause is looked for further back than the lines the report keeps: a forked worker's
    # native crash prints a deeper stack (the run's own frames under the worker's).
    tail = [] if timed_out else log_tail(worker.log, lines=WORDS_LINES)
    if tail:
        cause += f": {last_words(tail)}"
    details = CaseDetails(worker_log=tuple(tail[-LOG_LINES:]))
    results = []
    for number, case in enumerate(task.cases):
        if case.id in worker.done:
            continue
        here: Stage | None
        if number == current:
            message, here = cause[0].upper() + cause[1:], stage
        elif current < 0:
            message, here = f"not run: {cause}", "load"
        else:
            message, here = f"not run: {cause} while checking {task.cases[current].id}", None
        results.append(options.never_ran(case, Stopped(here, message), details))
    return results, worker.batch[at + 1:]


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
