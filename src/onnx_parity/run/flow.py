"""One model's cases walked through load → export → check → run → compare.

Everything a case needs is computed once and shared by the cases that need it: the module,
each opset's export, each session, each dataset's samples and the PyTorch reference outputs.
A stage's exception becomes that case's result; nothing escapes to stop the other cases.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from onnx_parity.errors import CompareError, ExportError, LoadError, RunError, StageError
from onnx_parity.explain import causes
from onnx_parity.plan.cases import Case
from onnx_parity.prepare.inputs import recorded_reference
from onnx_parity.results import CaseResult, Stage
from onnx_parity.run.pool import Progress, WorkerTask
from onnx_parity.spec import DatasetSpec, InputSpec, TargetSpec
from onnx_parity.wording import criteria_text

logger = logging.getLogger(__name__)

Emit = Callable[[tuple[Any, ...]], None]


class CaseLog(Protocol):
    """Where the worker's log lines go under -v; `case` leads each line (worker.py)."""

    case: str


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


class ModelRun:
    """The cases of one model, in one worker, with what they share."""

    def __init__(self, task: WorkerTask, emit: Emit, progress: Progress | None = None,
                 log: CaseLog | None = None) -> None:
        self.task = task
        self.log = log
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
        if self.log is not None and (self.log.case, self.stage) != (case.id, stage):
            self.log.case = case.id
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
        from onnx_parity.prepare.export import check_model

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
                              f"were used ({criteria_text(case.tolerance_for())})")
        self.enter(case, "export")
        return self.memo.get(("precision", path, case.precision),  # type: ignore[no-any-return]
                             lambda: self._convert(case, path))

    def _convert(self, case: Case, source: Path) -> Path:
        from onnx_parity.prepare.precision import calibration_feeds, convert

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
        from onnx_parity.prepare.export import export_model
        from onnx_parity.prepare.inputs import EXPORT_BATCH, random_array
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
        from onnx_parity.prepare.inputs import random_samples, recorded_samples

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
        return [recorded_reference(case.dataset, s, names, self.model.ignore_outputs)
                for s in samples]

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
                from onnx_parity.prepare.export import model_opset

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
        from onnx_parity.backends.fallback import judge

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
        from onnx_parity.compare.outputs import compare_case, summarize, verdict

        unknown = sorted(set(self.model.tolerances.output_names()) - set(names))
        if unknown:
            # A misspelt output name would otherwise leave its tolerance silently unused.
            raise CompareError(f"tolerance.outputs names {', '.join(unknown)}, which the model "
                               f"does not output (its outputs: {', '.join(names)})")
        comparisons = compare_case(names, expected, actual, case.tolerance_for)
        status = verdict(comparisons)
        if status == "failed" and path is not None and causes.floating_failure(comparisons):
            from onnx_parity.explain.followups import find_cause

            self.details.update(find_cause(
                case, self.numerics, names, [s.inputs for s in samples], expected, comparisons,
                lambda variant: self.session(case, path, variant)))
            self.enter(case, "compare")
        follow_up = status == "failed" and (
            self.task.localize == "failed" or self.task.artifacts is not None)
        if path is not None and (self.task.localize == "always" or follow_up):
            from onnx_parity.explain.followups import investigate

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
        from onnx_parity.explain.bundle import bundle_folder

        path = bundle_folder(self.task.artifacts, case.id) / "export.log"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(log, encoding="utf-8")
        except OSError as exc:
            logger.debug("%s: export log not written: %s", case.id, exc)
            return
        self.details["export_log"] = str(path)


_STAGE_WORDS = {"load": "loading the model", "export": "exporting",
                "check": "checking the ONNX file", "run": "running", "compare": "comparing"}


def _dims(case: Case) -> dict[str, int]:
    return dict(case.dataset.dims)
