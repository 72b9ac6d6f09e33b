"""One model's cases walked through load → export → check → run → compare, in a worker process.

Everything a case needs is computed once and shared by the cases that need it: the module,
each opset's export, each session, each dataset's samples and the PyTorch reference outputs.
A stage's exception becomes that case's result; nothing escapes to stop the other cases.
"""

from __future__ import annotations

import contextlib
import logging
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from onnx_parity import causes
from onnx_parity.errors import CompareError, ExportError, LoadError, RunError, StageError
from onnx_parity.plan import Case
from onnx_parity.pool import Progress, WorkerTask
from onnx_parity.results import CaseResult, Stage
from onnx_parity.spec import DatasetSpec, InputSpec, TargetSpec

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)

Emit = Callable[[tuple[Any, ...]], None]


def worker_main(conn: Connection, slots: Any) -> None:
    """Entry point of a spawned worker: checks batches of models until told to stop.

    A worker serves many models in turn, so torch's import and the exporter's warm-up are
    paid once per worker, not once per model; load_module seeds every factory call, so which
    models ran before in the same worker does not matter. torch is imported by the first
    model that needs it, never by a worker that checks only ONNX files. Small ONNX-only models
    come several to a batch, so the messages per model do not outweigh the model.
    """
    _last_words_to_log()
    _die_with_parent()
    progress = Progress(slots)
    handler = _ToParent(conn)
    # Every batch needs these; importing them now overlaps the parent's reading of the spec.
    import onnx  # noqa: F401
    import onnxruntime  # noqa: F401

    try:
        while (batch := conn.recv()) is not None:
            if batch and batch[0].verbose:
                handler.attach()
            for index, task in enumerate(batch):
                progress.model(index)
                with _memory_limit(task.model.memory_limit):
                    run_model(task, conn.send, progress)
            conn.send(("done",))
    except EOFError:
        pass  # the parent went away
    finally:
        conn.close()


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
            self.conn.send(("log", record.levelno, record.name, text))


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
    import os

    global _CRASH_LOG
    try:
        _CRASH_LOG = os.fdopen(os.dup(2), "w")
    except OSError:
        return
    faulthandler.enable(file=_CRASH_LOG)


@contextlib.contextmanager
def _memory_limit(mebibytes: float | None) -> Iterator[None]:
    """A soft address-space limit for one model, lifted again for the next."""
    if mebibytes is None:
        yield
        return
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = int(mebibytes * (1 << 20))
    resource.setrlimit(resource.RLIMIT_AS, (min(limit, hard) if hard > 0 else limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@dataclass
class _Memo:
    """Per-model memo of stage results; a failure is remembered and re-raised, not retried."""

    values: dict[tuple[Any, ...], Any] = field(default_factory=dict)

    def get(self, key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
        if key not in self.values:
            try:
                self.values[key] = make()
            except StageError as exc:
                self.values[key] = exc
        value = self.values[key]
        if isinstance(value, StageError):
            raise value
        return value


class _ModelRun:
    def __init__(self, task: WorkerTask, emit: Emit, progress: Progress | None = None) -> None:
        self.task = task
        self.model = task.model
        self.emit = emit
        self.progress = progress or Progress()
        self.index = {case.id: number for number, case in enumerate(task.cases)}
        self.memo = _Memo()
        self.stage: Stage = "load"
        self.notes: list[str] = []
        self.details: dict[str, Any] = {}
        self.numerics: causes.Numerics | None = None  # a GPU case's arithmetic, in effect
        self.export_logs: dict[tuple[int | None, str | None], str] = {}
        self.calibration: dict[str, list[dict[str, np.ndarray]]] = {}  # what calibrated int8

    def enter(self, case: Case, stage: Stage) -> None:
        if _LOG is not None and (_LOG.case, self.stage) != (case.id, stage):
            _LOG.case = case.id
            logger.debug("%s: %s", case.id, _STAGE_WORDS[stage])
        self.stage = stage
        self.progress.case(self.index.get(case.id, -1), stage)

    # -- stages, each memoised ---------------------------------------------------------------

    def module(self, case: Case) -> Any:
        from onnx_parity.backends import import_torch, load_module

        if ("module",) not in self.memo.values:
            self.enter(case, "load")
        import_torch(self.task.threads)
        loaded = self.memo.get(("module",), lambda: load_module(self.model, self.task.spec_root))
        if loaded.training_layers:
            self.notes.append(
                f"the factory returned a module in training mode, with layers that behave"
                f" differently there ({', '.join(loaded.training_layers)}); it was checked in"
                " eval mode, as the exporters see it: call .eval() where you serve it too"
            )
        if loaded.cast_to:
            self.notes.append(f"the module was cast to {loaded.cast_to}, the dtype of its inputs")
        return loaded.module

    def float32_path(self, case: Case) -> Path:
        """The model as shipped or exported, checked."""
        if self.model.onnx is not None:
            path = self.model.onnx
        else:
            path = self.memo.get(("export", case.opset, case.exporter), lambda: self._export(case))
        self.enter(case, "check")
        from onnx_parity.export import check_model

        note = self.memo.get(("check", path), lambda: check_model(path))
        if note:
            self.notes.append(note)
        return path

    def onnx_path(self, case: Case) -> Path:
        """The model this case runs: the float32 one, or its reduced-precision variant, made
        once per opset, exporter and precision (precision.py)."""
        path = self.float32_path(case)
        if case.precision == "fp32":
            return path
        if case.tolerance_for().defaults:
            self.notes.append(f"no tolerance of its own for {case.precision}: its defaults "
                              f"were used ({_criteria(case.tolerance_for())})")
        self.enter(case, "export")
        return self.memo.get(("precision", path, case.precision),  # type: ignore[no-any-return]
                             lambda: self._convert(case, path))

    def _convert(self, case: Case, source: Path) -> Path:
        from onnx_parity.precision import calibration_feeds, convert

        feeds: list[dict[str, np.ndarray]] = []
        if case.precision == "int8" and case.calibration is not None:
            target = self.session(case, source)
            inputs = self.model.inputs or target.input_specs()
            self.enter(case, "export")
            batch = case.calibration.batch_sizes[0] if case.calibration.batch_sizes else None
            feeds = calibration_feeds(self.samples_of(case.calibration, batch, inputs))
            self.calibration[case.precision] = feeds
        variant = source.with_name(f"{source.stem}.{case.precision}.onnx")
        if variant.parent != self.task.work_dir:  # a shipped file: its variants go to work
            variant = self.task.work_dir / f"{self.model.name}.{case.precision}.onnx"
        convert(source, case.precision, variant, feeds)  # type: ignore[arg-type]
        if self.task.artifacts is not None:
            import shutil

            kept = self.task.artifacts / "models" / f"{self.model.name}.{variant.name}"
            kept.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(variant, kept)
        return variant

    def _export(self, case: Case) -> Path:
        from onnx_parity.backends import forward, import_torch, output_names
        from onnx_parity.export import export_model
        from onnx_parity.inputs import EXPORT_BATCH, random_array
        from onnx_parity.spec import PREDEFINED_DATASETS

        module = self.module(case)
        torch = import_torch(self.task.threads)
        self.enter(case, "export")
        example_data = PREDEFINED_DATASETS["random"]
        example = [
            torch.from_numpy(random_array(i, example_data, EXPORT_BATCH, 0, _dims(case)))
            for i in self.model.inputs
        ]
        assert case.opset is not None and case.exporter is not None
        # Outputs returned as a mapping (a Hugging Face ModelOutput) are named by their keys;
        # one forward pass finds them, and finds what ONNX cannot hold before the exporter does.
        if not self.model.outputs:
            self.enter(case, "run")
            try:
                names = self.memo.get(("output names",), lambda: output_names(
                    forward(module, example, self.model.forward_args)))
            except RunError as exc:
                if "ONNX cannot hold" not in exc.message:
                    raise
                raise ExportError(exc.message) from exc  # what the exporter would stumble on
            self.enter(case, "export")
        else:
            names = self.model.outputs
        name = f"{self.model.name}.opset{case.opset}.{case.exporter}.onnx"
        key = (case.opset, case.exporter)
        try:
            exported = export_model(module, example, self.model.inputs, names, case.opset,
                                    case.exporter, self.task.work_dir / name,
                                    self.model.forward_args)
        except ExportError as exc:
            self.export_logs[key] = exc.log
            raise
        self.export_logs[key] = exported.log
        logger.debug("%s: exported in %.2fs", case.id, exported.seconds)
        return exported.path

    def session(self, case: Case, path: Path, target: TargetSpec | None = None) -> Any:
        """The session of `path` on the case's target (or on a variant of it, for a re-run)."""
        from onnx_parity.backends import OrtTarget

        self.enter(case, "run")
        chosen = target or case.target
        return self.memo.get(("session", path, chosen.name),
                             lambda: OrtTarget(path, chosen, self.task.threads))

    def samples(self, case: Case, inputs: Sequence[InputSpec], outputs: Sequence[str],
                output_types: Sequence[str] = ()) -> Any:
        return self.samples_of(case.dataset, case.batch_size, inputs, outputs, output_types)

    def samples_of(self, dataset: DatasetSpec, batch: int | None, inputs: Sequence[InputSpec],
                   outputs: Sequence[str] = (), output_types: Sequence[str] = ()) -> Any:
        from onnx_parity.inputs import random_samples, recorded_samples

        def make() -> Any:
            if dataset.kind == "random":
                assert batch is not None
                return random_samples(dataset, batch, inputs, dict(dataset.dims))
            found = recorded_samples(dataset, batch, inputs, outputs, output_types)
            if not found:
                raise LoadError(f"dataset '{dataset.name}' holds no sample of batch size "
                                f"{batch}")
            return found

        return self.memo.get(("samples", dataset.name, batch), make)

    def reference(self, case: Case, samples: Any, names: Sequence[str]) -> list[list[Any]]:
        """The reference outputs of each sample, one per name; None for an output left out
        of the comparison that the recorded data does not hold."""
        if self.model.torch is not None:
            from onnx_parity.backends import torch_outputs

            module = self.module(case)
            self.enter(case, "run")
            outputs: list[list[np.ndarray]] = self.memo.get(
                ("reference", case.dataset.name, case.batch_size),
                lambda: [torch_outputs(module, s.inputs, self.model.forward_args)
                         for s in samples],
            )
            return outputs
        return [_recorded_reference(case, s, names, self.model.ignore_outputs) for s in samples]

    # -- one case ----------------------------------------------------------------------------

    def run_case(self, case: Case) -> CaseResult:
        started = time.perf_counter()
        self.notes = []
        self.details = {}
        self.numerics = None
        opset = case.opset
        try:
            if case.plan_error:
                self.enter(case, "load")
                raise LoadError(case.plan_error)
            if self.model.torch is None and case.dataset.kind == "random":
                self.enter(case, "load")
                raise LoadError(
                    f"model '{self.model.name}' has no `torch` factory, and dataset "
                    f"'{case.dataset.name}' is random, so there is no reference to compare with;"
                    " use a dataset with recorded outputs (npz or onnx-test-data) or add `torch`"
                )
            path = self.onnx_path(case)
            if opset is None:
                from onnx_parity.export import model_opset

                opset = model_opset(path)
            target = self.session(case, path)
            self.numerics = causes.numerics(target.facts, self.task.gpus)
            if self.numerics is not None:
                self.details["numerics"] = self.numerics.as_details()
            inputs = self.model.inputs or target.input_specs()
            names = self.model.outputs or target.output_names()
            samples = self.samples(case, inputs, names, target.output_types())
            self._judge_fallback(case, target, samples)
            expected = self.reference(case, samples, names)
            self.enter(case, "run")
            actual = [target.run(s.inputs) for s in samples]
            self.enter(case, "compare")
            names, expected, actual = self._compared(names, expected, actual)
            return self._verdict(case, opset, names, expected, actual, started, path, samples)
        except StageError as exc:
            return self._result(case, opset, "error", started, stage=exc.stage,
                                message=exc.message)
        except Exception as exc:  # a bug or an unexpected library error: still a result
            logger.debug("%s: %s", case.id, traceback.format_exc())
            return self._result(case, opset, "error", started, stage=self.stage,
                                message=f"{type(exc).__name__}: {exc}")

    def _judge_fallback(self, case: Case, target: Any, samples: Sequence[Any]) -> None:
        """What the target asked for against what ran (fallback.py): the session's providers,
        then each node's (profiled on the first sample). Under `fail` a fall-back is this
        case's error, under `warn` a note; a run error waits until the fall-back is said."""
        from onnx_parity.fallback import judge

        if not target.facts.can_fall_back:
            return
        run_error: RunError | None = None
        try:
            placement = target.placement(samples[0].inputs) if samples else None
        except RunError as exc:  # reported after the fall-back, which may well be its cause
            placement, run_error = None, exc
        judgement = judge(case.target, target.facts, placement)
        self.details["providers"] = dict(judgement.details)
        if judgement.action == "fail":
            raise RunError(judgement.message)
        if judgement.action == "warn":
            self.notes.extend(judgement.problems)
        if run_error is not None:
            raise run_error

    def _compared(self, names: Sequence[str], expected: list[list[Any]],
                  actual: list[list[Any]]) -> tuple[list[str], list[list[Any]], list[list[Any]]]:
        """The outputs to compare: all but those the spec leaves out (ignore_outputs), which the
        reports list as not compared."""
        ignored = self.model.ignore_outputs
        if not ignored:
            return list(names), expected, actual
        unknown = [n for n in ignored if n not in names]
        if unknown:
            raise CompareError(f"ignore_outputs names {', '.join(unknown)}, which the model "
                               f"does not output (its outputs: {', '.join(names)})")
        keep = [k for k, name in enumerate(names) if name not in ignored]
        self.details["not_compared"] = [n for n in names if n in ignored]
        self.notes.append(f"not compared (ignore_outputs): {', '.join(ignored)}")

        def pick(values: list[list[Any]]) -> list[list[Any]]:
            return [[sample[k] for k in keep] if len(sample) == len(names) else sample
                    for sample in values]

        return [names[k] for k in keep], pick(expected), pick(actual)

    def _verdict(self, case: Case, opset: int | None, names: Sequence[str],
                 expected: list[list[np.ndarray]], actual: list[list[np.ndarray]],
                 started: float, path: Path | None = None, samples: Sequence[Any] = (),
                 ) -> CaseResult:
        from onnx_parity.compare import compare_case, summarize, verdict

        unknown = sorted(set(self.model.tolerances.output_names()) - set(names))
        if unknown:
            # A misspelt output name would otherwise leave its tolerance silently unused.
            raise CompareError(f"tolerance.outputs names {', '.join(unknown)}, which the model "
                               f"does not output (its outputs: {', '.join(names)})")
        comparisons = compare_case(names, expected, actual, case.tolerance_for)
        status = verdict(comparisons)
        if status == "failed" and path is not None and causes.floating_failure(comparisons):
            self._find_cause(case, path, names, samples, expected, comparisons)
        follow_up = status == "failed" and (
            self.task.localize == "failed" or self.task.artifacts is not None)
        if path is not None and (self.task.localize == "always" or follow_up):
            from onnx_parity.followups import investigate

            module = self.module(case) if self.model.torch is not None else None
            self.enter(case, "compare")  # a timeout while localizing names the right stage
            float32 = self.float32_path(case) if case.precision != "fp32" else None
            self.enter(case, "compare")
            self.details.update(investigate(
                case, path, [s.inputs for s in samples], names, expected, actual, comparisons,
                module, localize=self.task.localize, artifacts=self.task.artifacts,
                threads=self.task.threads, float32_path=float32,
                calibration=self.calibration.get(case.precision, [])))
        return self._result(case, opset, status, started, stage=None if status == "passed"
                            else "compare", message=summarize(comparisons), outputs=comparisons)

    def _find_cause(self, case: Case, path: Path, names: Sequence[str], samples: Sequence[Any],
                    expected: list[list[np.ndarray]], before: Sequence[Any]) -> None:
        """Run the target again with each suspected setting off (causes.py); the first one the
        second run proves is the case's cause. The case keeps its status either way."""
        from onnx_parity.compare import compare_case

        ruled_out = []
        for suspect in causes.suspects(case.target, self.numerics):
            try:
                rerun = self.session(case, path, suspect.variant)
                after = compare_case(names, expected, [rerun.run(s.inputs) for s in samples],
                                     case.tolerance_for)
            except StageError as exc:
                ruled_out.append({"kind": suspect.kind, "proven": False,
                                  "message": f"{suspect.setting}: the re-run failed: {exc}"})
                continue
            verdict = causes.judge(suspect, before, after)
            if verdict["proven"]:
                self.details["cause"] = verdict
                break
            ruled_out.append(verdict)
        if ruled_out:
            self.details["causes_ruled_out"] = ruled_out
        self.enter(case, "compare")

    def _result(self, case: Case, opset: int | None, status: Any, started: float,
                stage: Any = None, message: str = "", outputs: Any = ()) -> CaseResult:
        self._keep_export_log(case, status)
        return CaseResult(
            id=case.id, model=self.model.name, opset=opset, exporter=case.exporter,
            target=case.target.name, dataset=case.dataset.name, batch_size=case.batch_size,
            precision=case.precision,
            status=status, stage=stage, message=message,
            seconds=round(time.perf_counter() - started, 4), outputs=tuple(outputs),
            notes=tuple(dict.fromkeys(self.notes)), line=self.model.line,
            details=dict(self.details),
        )


    def _keep_export_log(self, case: Case, status: Any) -> None:
        """What the exporter printed (progress, warnings, the TorchScript IR dump of a failed
        export), kept with --artifacts beside a case that did not pass; never on the console."""
        log = self.export_logs.get((case.opset, case.exporter))
        if status in ("passed", "skipped") or self.task.artifacts is None or not log:
            return
        from onnx_parity.bundle import bundle_folder

        path = bundle_folder(self.task.artifacts, case.id) / "export.log"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(log, encoding="utf-8")
        except OSError as exc:
            logger.debug("%s: export log not written: %s", case.id, exc)
            return
        self.details["export_log"] = str(path)


_STAGE_WORDS = {"plan": "planning", "load": "loading the model", "export": "exporting",
                "check": "checking the ONNX file", "run": "running", "compare": "comparing"}


def run_model(task: WorkerTask, emit: Emit, progress: Progress | None = None) -> None:
    run = _ModelRun(task, emit, progress)
    for case in task.cases:
        emit(("result", run.run_case(case)))


def _criteria(tolerance: Any) -> str:
    parts = [f"cosine ≥ {tolerance.cosine:g}"] if tolerance.cosine is not None else []
    if tolerance.sqnr_db is not None:
        parts.append(f"SQNR ≥ {tolerance.sqnr_db:g} dB")
    if tolerance.topk is not None:
        parts.append(f"top-{tolerance.topk.k} agreement ≥ {tolerance.topk.agreement:g}")
    return ", ".join(parts)


def _dims(case: Case) -> dict[str, int]:
    return dict(case.dataset.dims)


def _recorded_reference(case: Case, sample: Any, names: Sequence[str],
                        ignored: Sequence[str] = ()) -> list[Any]:
    """The recorded output of each name, by name (npz) or by position (output_K.pb); an
    output left out of the comparison may be missing (None). Naming exactly what is missing."""
    if sample.reference_by_name or not sample.reference_by_position:
        found = dict(sample.reference_by_name)
        missing = [n for n in names if n not in found and n not in ignored]
        if not missing:
            return [found.get(n) for n in names]
        holds = ", ".join(found) or "no array named after an output"
        raise CompareError(
            f"dataset '{case.dataset.name}' has no reference for {', '.join(missing)} (it holds "
            f"{holds}); record it, or leave it out with ignore_outputs: [{', '.join(missing)}]")
    recorded = list(sample.reference_by_position)
    if len(recorded) == len(names):
        return recorded
    if len(recorded) < len(names) and all(n in ignored for n in names[len(recorded):]):
        return recorded + [None] * (len(names) - len(recorded))  # the trailing ones left out
    missing = [f"output_{k}.pb ({name})" for k, name in enumerate(names) if k >= len(recorded)]
    extra = len(recorded) - len(names)
    raise CompareError(
        f"dataset '{case.dataset.name}' holds {len(recorded)} output_N.pb files for the model's"
        f" {len(names)} outputs ({', '.join(names)})"
        + (f": {', '.join(missing)} missing" if missing else f": {extra} more than it has"))
