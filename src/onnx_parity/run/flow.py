"""One case's flow through load → export → check → run → compare → follow-ups: a function over
the model's memo (memo.py) and a record of its own (record.py), returning a `CaseResult`. A
stage's exception becomes the case's result; nothing escapes to stop the other cases.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from onnx_parity.errors import CompareError, LoadError, RunError, StageError
from onnx_parity.explain.evidence import Evidence
from onnx_parity.explain.followups import FollowUps, follow_ups
from onnx_parity.plan.cases import Case
from onnx_parity.prepare.rollout import Stepper, stepper_of
from onnx_parity.results import CaseResult
from onnx_parity.run.memo import ModelMemo, data_key
from onnx_parity.run.protocol import Progress
from onnx_parity.run.record import CaseLog, CaseRecord
from onnx_parity.wording import criteria_text

if TYPE_CHECKING:
    from onnx_parity.backends import OrtTarget
    from onnx_parity.prepare.inputs import Sample
    from onnx_parity.results import OutputComparison
    from onnx_parity.spec import TargetSpec

logger = logging.getLogger(__name__)

Outputs = list[list[Any]]  # per sample, per output: an array, or a sequence / map / None


def run_case(memo: ModelMemo, case: Case, index: int = -1, progress: Progress | None = None,
             log: CaseLog | None = None) -> CaseResult:
    """The verdict on one case, with its follow-ups; never raises."""
    record = CaseRecord(case, index, progress or Progress(), log)
    started = time.perf_counter()
    opset = case.opset
    try:
        if case.plan_error:
            raise LoadError(case.plan_error)
        path = memo.onnx_path(record)
        if case.precision != "fp32" and case.tolerance_for().defaults:
            record.note(f"no tolerance of its own for {case.precision}: its defaults were used"
                        f" ({criteria_text(case.tolerance_for())})")
        if opset is None:
            from onnx_parity.prepare.export import model_opset

            opset = model_opset(path)
        target = memo.session(record, path)
        record.notes.extend(target.facts.notes)  # the target's own thread count, say
        from onnx_parity.explain.causes import numerics

        record.numerics = numerics(target.facts, memo.task.gpus)
        if record.numerics is not None:
            record.found(numerics=record.numerics.as_record())
        inputs = memo.task.model.inputs or target.input_specs()
        names = memo.task.model.outputs or target.output_names()
        samples = memo.samples_of(case.dataset, case.batch_size, inputs, names,
                                  target.output_types(), record=record)
        if memo.task.model.torch:  # recorded outputs PyTorch's run stands in for: said
            from onnx_parity.prepare.inputs import recorded_notes

            record.notes.extend(recorded_notes(case.dataset, samples))
        if memo.task.model.adapter == "causal-lm":
            from onnx_parity.run.decoder import decoder_stepper, prefilled

            samples = prefilled(memo.loaded(record), target, samples)
        judge_fallback(record, target, samples)
        stepper = (decoder_stepper(memo.loaded(record), case)
                   if memo.task.model.adapter == "causal-lm"
                   else stepper_of(memo.task.model))
        if stepper is not None:
            return _rolled(memo, record, stepper, opset, path, target, samples, names, started)
        expected = memo.reference(record, samples, names)
        record.enter("run")
        actual = [target.run(s.inputs) for s in samples]
        from onnx_parity.run.latency import time_case

        time_case(memo, record, path, target, samples)
        record.enter("compare")
        kept, expected, actual = compared_outputs(record, memo.task.model.ignore_outputs,
                                                  names, expected, actual)
        failure = float16_checks(memo, record, path, target, samples, kept, expected, actual)
        return _verdict(memo, record, opset, path, samples, kept, expected, actual, started,
                        failure)
    except StageError as exc:
        return _result(memo, record, opset, started,
                       case.result("error", stage=exc.stage, message=exc.message))
    except Exception as exc:  # a bug or an unexpected library error: still a result
        logger.debug("%s: %s", case.id, traceback.format_exc())
        return _result(memo, record, opset, started, case.result(
            "error", stage=record.stage, message=f"{type(exc).__name__}: {exc}"))


def judge_fallback(record: CaseRecord, target: OrtTarget, samples: Sequence[Sample]) -> None:
    """What the target asked for against what ran (backends/fallback.py): the session's
    providers, then each node's (profiled on the first sample). Under `fail` a fall-back is
    this case's error, under `warn` a note; a run error waits until the fall-back is said."""
    from onnx_parity.backends.fallback import judge_placement

    if not target.facts.can_fall_back:
        return
    run_error: RunError | None = None
    try:
        placement = target.placement(samples[0].inputs) if samples else None
    except RunError as exc:  # reported after the fall-back, which may well be its cause
        placement, run_error = None, exc
    judgement = judge_placement(record.case.target, target.facts, placement)
    record.found(providers=dict(judgement.details))
    if judgement.action == "fail":
        raise RunError(judgement.message)
    if judgement.action == "warn":
        record.notes.extend(judgement.problems)
    if run_error is not None:
        raise run_error


def compared_outputs(record: CaseRecord, ignored: Sequence[str], names: Sequence[str],
                     expected: Outputs, actual: Outputs) -> tuple[list[str], Outputs, Outputs]:
    """The outputs to compare: all but those the spec leaves out (ignore_outputs), which the
    reports list as not compared."""
    if not ignored:
        return list(names), expected, actual
    keep = kept_positions(record, ignored, names)

    def pick(values: Outputs) -> Outputs:
        return [[sample[k] for k in keep] if len(sample) == len(names) else sample
                for sample in values]

    return [names[k] for k in keep], pick(expected), pick(actual)


def kept_positions(record: CaseRecord, ignored: Sequence[str],
                   names: Sequence[str]) -> list[int]:
    """The positions of the outputs to compare (compare/outputs.py), the others recorded and
    noted as not compared."""
    from onnx_parity.compare.outputs import compared_positions

    keep = compared_positions(names, ignored)
    if ignored:
        record.found(not_compared=tuple(n for n in names if n in ignored))
        record.note(f"not compared (ignore_outputs): {', '.join(ignored)}")
    return keep


def _verdict(memo: ModelMemo, record: CaseRecord, opset: int | None, path: Path,
             samples: Sequence[Sample], names: Sequence[str], expected: Outputs,
             actual: Outputs, started: float, failure: str = "") -> CaseResult:
    """Compare, judge against the baseline, then the follow-ups the comparison calls for. A
    `failure` (float16_checks) fails the case whatever the comparison says, which it leads."""
    from onnx_parity.compare.blind import Watch, distinct_inputs
    from onnx_parity.compare.outputs import compare_case, summarize, verdict

    case = record.case
    _check_named(memo, names)
    model = memo.task.model
    watch = Watch(distinct=distinct_inputs([s.inputs for s in samples]),
                  from_model=model.torch is not None, constant=frozenset(model.constant_outputs))
    comparisons = compare_case(names, expected, actual, case.tolerance_for, watch,
                               model.detections,
                               "PyTorch" if model.torch is not None else "the recorded outputs")
    status = verdict(comparisons)
    message = summarize(comparisons)
    if failure:
        from onnx_parity.sentences import compared_on

        status, message = "failed", f"{failure}; {compared_on(case.target.name, message)}"
    result = case.result(status, stage=None if status == "passed" else "compare",
                         message=message, outputs=tuple(comparisons))
    return _finish(memo, record, opset, path, result, [s.inputs for s in samples], names,
                   expected, actual, comparisons, started)


def _check_named(memo: ModelMemo, names: Sequence[str]) -> None:
    for key, named in (("tolerance.outputs", memo.task.model.tolerances.output_names()),
                       ("constant_outputs", memo.task.model.constant_outputs)):
        unknown = sorted(set(named) - set(names))
        if unknown:
            # A misspelt output name would otherwise leave its setting silently unused.
            raise CompareError(f"{key} names {', '.join(unknown)}, which the model does not "
                               f"output (its outputs: {', '.join(names)})")


def _rolled(memo: ModelMemo, record: CaseRecord, stepper: Stepper, opset: int | None,
            path: Path, target: OrtTarget, samples: Sequence[Sample], names: Sequence[str],
            started: float) -> CaseResult:
    """A rollout's verdict (run/rollout.py): every output at every step; its follow-ups at the
    judged step, both sides on ONNX Runtime's own inputs of that step."""
    from onnx_parity.compare.outputs import verdict
    from onnx_parity.run.rollout import rolled_case

    kept = [names[k] for k in kept_positions(record, memo.task.model.ignore_outputs, names)]
    _check_named(memo, kept)
    rolled = rolled_case(memo, record, stepper, target, samples, names, kept)
    record.found(rollout=rolled.record)
    status = rolled.status
    result = record.case.result(status, stage=None if status == "passed" else "compare",
                                message=rolled.message, outputs=rolled.comparisons)
    alone = verdict(rolled.local) == "failed"
    if status == "failed" and not alone:
        record.note(f"at step {rolled.record.judged}, on the same inputs (ONNX Runtime's own"
                    " at that step), ONNX Runtime's call is within tolerance of PyTorch's:"
                    " the failure is drift accumulated over the steps before it, so no cause"
                    " was re-run")
    return _finish(memo, record, opset, path, result, rolled.feeds, kept, rolled.expected,
                   rolled.actual, rolled.local, started, rollout=True, cause=alone)


def _finish(memo: ModelMemo, record: CaseRecord, opset: int | None, path: Path,
            result: CaseResult, feeds: Sequence[Mapping[str, Any]], names: Sequence[str],
            expected: Outputs, actual: Outputs, comparisons: Sequence[OutputComparison],
            started: float, rollout: bool = False, cause: bool = True) -> CaseResult:
    """The baseline's judgement, then the follow-ups the verdict calls for."""
    status = result.status
    if memo.task.baseline is not None:
        from onnx_parity.compare.baseline import judge_case

        result = judge_case(result, memo.task.model.regression, memo.task.baseline)
        result = _judge_latency(memo, record, result)
    wanted = follow_ups(status, memo.task.localize, memo.task.artifacts is not None,
                        memo.task.causes)
    if not cause:
        wanted = dataclasses.replace(wanted, cause=False)
    if wanted.any:
        # A rollout's judged call alone may be within tolerance (accumulated drift): then
        # localization looks at that call as a passing one.
        _follow_up(wanted, memo, record, path, feeds, names, expected, actual, comparisons,
                   status == "failed" and cause)
        drift = record.details.divergence
        if (status == "failed" and drift is not None and drift.verdict == "selection"
                and not rollout):
            from onnx_parity.sentences import picked_sentence

            # The comparison's advice was an atol; a selection among ties is not fixed by one.
            op = f"{drift.op_type} '{drift.node}'" if drift.node else "a selection op"
            result = dataclasses.replace(result, message=picked_sentence(comparisons, op))
    return _result(memo, record, opset, started, result)


def _judge_latency(memo: ModelMemo, record: CaseRecord, result: CaseResult) -> CaseResult:
    """The latency check against the baseline (compare/latency.py): a passing case whose ONNX
    Runtime time grew by `regression.latency` fails."""
    from onnx_parity.compare.latency import judge

    latency, baseline = record.details.latency, memo.task.baseline
    old = baseline.cases.get(record.case.id) if baseline is not None else None
    if latency is None or old is None or old.details.latency is None:
        return result
    regression = memo.task.model.regression
    latency, failure = judge(latency, regression.latency if regression else None,
                             old.details.latency)
    record.found(latency=latency)
    if not failure or result.status != "passed":
        return result
    return dataclasses.replace(result, status="failed", stage="compare", message=failure)


def float16_checks(memo: ModelMemo, record: CaseRecord, path: Path, target: OrtTarget,
                   samples: Sequence[Sample], names: Sequence[str], expected: Outputs,
                   actual: Outputs) -> str:
    """A float16 graph's checks (explain/fp16.py), in the case's notes and details: how much
    of it ran in float16 on the target; for an fp16 variant, float16's range on the float32
    model's tensors; for a module run in float16, a reference that overflowed where ONNX
    Runtime did not. Returns what fails the case, or ""."""
    from onnx_parity.compare.float16 import reference_overflows
    from onnx_parity.explain import fp16
    from onnx_parity.sentences import range_failure, reference_overflowed

    case, model, threads = record.case, memo.task.model, memo.task.threads
    cast_to = memo.loaded(record).cast_to if model.torch is not None else None
    if not samples or (case.precision != "fp16" and cast_to != "float16" and not any(
            i.dtype == "float16" for i in model.inputs or target.input_specs())):
        return ""
    found, note = memo.get(("float16 nodes", path, case.target.name), lambda: fp16.ran_in_float16(
        target, path, case.target, samples[0].inputs, threads))
    record.note(note)
    failures = []
    if case.precision == "fp16":
        float32 = memo.float32_path(record)
        record.enter("compare")
        feeds = [s.inputs for s in samples]
        data = data_key(case.dataset, case.batch_size)
        checked = memo.get(  # targets with the same tolerances share the whole check
            ("float16 range", float32, path, *data, *map(case.tolerance_for, names)),
            lambda: fp16.check_variant(case, float32, path, feeds, names, threads, lambda: memo.get(
                ("float32 ranges", float32, *data),
                lambda: fp16.float32_run(float32, feeds, names, threads))))
        if checked.note:
            record.note(checked.note)
        found = dataclasses.replace(checked.record, nodes=found.nodes,
                                    float16_nodes=found.float16_nodes)
        if found.failing is not None:
            failures.append(range_failure(found.failing, checked.proof))
    if cast_to == "float16":
        overflows = reference_overflows(names, expected, actual)
        failures += [reference_overflowed(o.name, o.kinds, o.count, o.elements, cast_to)
                     for o in overflows]
        found = dataclasses.replace(found, reference_overflow=tuple(o.name for o in overflows))
    record.found(float16=found)
    return "; ".join(failures)


def _follow_up(wanted: FollowUps, memo: ModelMemo, record: CaseRecord, path: Path,
               feeds: Sequence[Mapping[str, Any]], names: Sequence[str], expected: Outputs,
               actual: Outputs, comparisons: Sequence[OutputComparison],
               failed: bool) -> None:
    from onnx_parity.explain.followups import find_cause, localize_and_bundle

    case, task = record.case, memo.task
    float32 = memo.float32_path(record) if case.precision != "fp32" else None
    loaded = memo.loaded(record) if task.model.torch is not None else None
    module = loaded.module if loaded is not None else None
    evidence = Evidence(case, path, feeds, names, expected, actual,
                        comparisons, float32, memo.calibration.get(case.precision, []),
                        loaded.binding if loaded is not None else None)
    if wanted.cause:
        record.found_all(find_cause(evidence, record.numerics, _Reruns(memo, record, path),
                                    module, threads=task.threads))
    record.enter("compare")  # a timeout while localizing names the right stage
    record.found_all(localize_and_bundle(wanted, evidence, module, failed=failed,
                                         artifacts=task.artifacts, threads=task.threads))


@dataclass(frozen=True)
class _Reruns:
    """The cause ladder's second runs (explain/causes.Reruns), made through the model's memo:
    a variant the spec also checks (the other exporter's export) is made once for both."""

    memo: ModelMemo
    record: CaseRecord
    path: Path  # the model the case ran

    def on_target(self, variant: TargetSpec) -> OrtTarget:
        return self.memo.session(self.record, self.path, variant)

    def remade(self, reduce_range: bool) -> OrtTarget:
        from onnx_parity.prepare.precision import convert

        case, memo = self.record.case, self.memo
        source = memo.float32_path(self.record)
        remade = self.path.with_name(f"{self.path.stem}.reduce-range.onnx")
        made = memo.get(("remade", self.path, reduce_range), lambda: convert(
            source, case.precision, remade, memo.calibration.get(case.precision, []),
            reduce_range=reduce_range))
        return memo.session(self.record, made)

    def optimized_ops(self, variant: TargetSpec) -> dict[str, int]:
        from onnx_parity.backends.session import optimized_ops

        return optimized_ops(self.path, variant, self.memo.task.work_dir, self.memo.task.threads)

    def exported_with(self, exporter: str) -> OrtTarget:
        twin = CaseRecord(dataclasses.replace(self.record.case, exporter=exporter))
        return self.memo.session(twin, self.memo.onnx_path(twin))


def _result(memo: ModelMemo, record: CaseRecord, opset: int | None, started: float,
            result: CaseResult) -> CaseResult:
    """The case's final result, with its notes and details, and its export log kept under
    --artifacts when it did not pass."""
    log = memo.export_logs.get((record.case.opset, record.case.exporter), "")
    if result.status not in ("passed", "skipped") and memo.task.artifacts is not None and log:
        from onnx_parity.explain.artifacts import keep_export_log

        kept = keep_export_log(memo.task.artifacts, record.case.id, log)
        if kept is not None:
            record.found(export_log=str(kept))
    return dataclasses.replace(
        result, opset=opset, seconds=_seconds(started), notes=tuple(dict.fromkeys(record.notes)),
        details=record.details)


def _seconds(started: float) -> float:
    return round(time.perf_counter() - started, 4)
