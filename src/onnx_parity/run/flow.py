"""One case's flow: resolved up front (prepared.py, the only step that looks into the model's
memo), run once or rolled out, compared, followed up, then settled by the verdict chain
(compare/chain.py), returning a `CaseResult`. A stage's exception becomes the case's outcome;
nothing escapes to stop the other cases.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from onnx_parity.backends.fallback import judge_placement
from onnx_parity.compare.blind import Watch, distinct_inputs
from onnx_parity.compare.chain import Compared, Outcome, Stopped, compared_status, settle
from onnx_parity.compare.outputs import compare_case, compared_positions, verdict
from onnx_parity.errors import CompareError, RunError, StageError
from onnx_parity.explain.evidence import Evidence
from onnx_parity.explain.followups import find_cause, follow_ups, localize_and_bundle
from onnx_parity.frozen import frozen, replaced
from onnx_parity.plan.cases import Case
from onnx_parity.results import CaseResult
from onnx_parity.run.adapters.base import Encoded
from onnx_parity.run.float16 import float16_failures
from onnx_parity.run.keys import ExportKey
from onnx_parity.run.latency import time_case
from onnx_parity.run.memo import ModelMemo
from onnx_parity.run.prepared import CaseReruns, Outputs, PreparedCase, prepare_case, reference
from onnx_parity.run.protocol import Progress, WorkerTask
from onnx_parity.run.record import CaseLog, CaseRecord

if TYPE_CHECKING:
    from onnx_parity.backends import OrtTarget
    from onnx_parity.prepare.inputs import Sample
    from onnx_parity.results import OutputComparison
    from onnx_parity.run.adapters.base import EncoderChecked
    from onnx_parity.run.rolled import Rolled
    from onnx_parity.spec import ModelSpec

logger = logging.getLogger(__name__)


def run_case(memo: ModelMemo, case: Case, index: int = -1, progress: Progress | None = None,
             log: CaseLog | None = None) -> CaseResult:
    """The verdict on one case, with its follow-ups; never raises."""
    record = CaseRecord(case, index, progress or Progress(), log)
    started = time.perf_counter()
    outcome: Outcome
    try:
        prepared = prepare_case(memo, record)
        judge_fallback(record, prepared.target, prepared.samples)
        checked = (_rolled(record, prepared) if prepared.stepper is not None
                   else _called(record, prepared))
        outcome = _followed_up(record, prepared, checked)
    except StageError as exc:
        memo.end_with(exc, case.id)
        outcome = Stopped(exc.stage, exc.message)
    except Exception as exc:  # a bug or an unexpected library error: still a result
        logger.debug("%s: %s", case.id, traceback.format_exc())
        outcome = Stopped(record.stage, f"{type(exc).__name__}: {exc}")
    result = settle(case, outcome, memo.task.rules_for(case), record.details)
    export_log = memo.export_logs.get(ExportKey(case.opset, case.exporter), "")
    return _result(memo.task, record, started, result, export_log)


@frozen
class Checked:
    """A compared case and what its follow-ups need: the call they look at (a rollout's judged
    step, both sides on ONNX Runtime's inputs of that step), and whether a cause may be
    re-run (not for a rollout whose judged call alone is within tolerance)."""

    outcome: Compared
    feeds: Sequence[Mapping[str, Any]]
    names: Sequence[str]
    expected: Outputs
    actual: Outputs
    comparisons: Sequence[OutputComparison]
    cause: bool = True
    path: Path | None = None  # the file they look at, where not the case's (an encoder's)
    module: Any = None  # and its PyTorch module
    reruns: CaseReruns | None = None  # and the cause ladder's second runs on it


def _called(record: CaseRecord, prepared: PreparedCase) -> Checked:
    """One call per sample on each side, compared, with a float16 graph's own checks."""
    model = prepared.task.model
    expected = reference(record, prepared)
    if model.reference is not None:
        record.note(f"compared against target '{model.reference.name}'"
                    " (the model's reference), not PyTorch's or recorded outputs")
    record.enter("run")
    actual = [prepared.target.run(s.inputs) for s in prepared.samples]
    time_case(record, prepared)
    record.enter("compare")
    names, expected, actual = compared_outputs(record, model.ignore_outputs,
                                               prepared.names, expected, actual)
    failures = float16_failures(record, prepared, names, expected, actual)
    _check_named(model, names)
    watch = Watch(distinct=distinct_inputs(prepared.feeds), from_model=model.torch is not None,
                  constant=frozenset(model.constant_outputs))
    comparisons = compare_case(names, expected, actual, prepared.case.tolerance_for, watch,
                               model.detections, reference_label(model))
    return Checked(Compared(comparisons, failures=failures), prepared.feeds, names, expected,
                   actual, comparisons)


def _rolled(record: CaseRecord, prepared: PreparedCase) -> Checked:
    """A rollout (run/rolled.py): every output at every step; its follow-ups at the judged
    step, both sides on ONNX Runtime's own inputs of that step."""
    from onnx_parity.run.rolled import rolled_case  # only a rollout

    names = prepared.names
    model = prepared.task.model
    kept = [names[k] for k in kept_positions(record, model.ignore_outputs, names)]
    _check_named(model, kept)
    halves = _encoder_half(record, prepared)
    if halves is not None and not halves.passed:
        return _encoder_drifted(prepared, halves)
    rolled = rolled_case(record, prepared, kept,
                         halves.firsts if halves is not None else None)
    record.found(rollout=rolled.record)
    if halves is not None:
        rolled = _decoder_said(record, halves, rolled)
    alone = verdict(rolled.local) == "failed"
    if compared_status(rolled.outcome) == "failed" and not alone:
        record.note(f"at step {rolled.record.judged}, on the same inputs (ONNX Runtime's own"
                    " at that step), ONNX Runtime's call is within tolerance of PyTorch's:"
                    " the failure is drift accumulated over the steps before it, so no cause"
                    " was re-run")
    return Checked(rolled.outcome, rolled.feeds, kept, rolled.expected, rolled.actual,
                   rolled.local, cause=alone)


def _encoder_half(record: CaseRecord, prepared: PreparedCase) -> EncoderChecked | None:
    """An encoder-decoder's encoder, checked before its decoder rolls out (run/adapters/);
    None for any other rollout."""
    stepper = prepared.stepper
    return stepper.check_encoder(record) if isinstance(stepper, Encoded) else None


def _encoder_drifted(prepared: PreparedCase, halves: EncoderChecked) -> Checked:
    """An encoder whose output drifted: the case fails on it, named, and its follow-ups
    look inside the encoder's file; the decoder is not rolled out on a drifted input."""
    from onnx_parity.compare.halves import encoder_failure  # only an encoder-decoder

    stepper = prepared.stepper
    assert isinstance(stepper, Encoded) and stepper.encoder is not None
    outcome = Compared(halves.comparisons, failures=(encoder_failure(halves.comparisons),))
    reruns = prepared.encoder_reruns(stepper.encoder)
    return Checked(outcome, halves.feeds, halves.names, halves.expected, halves.actual,
                   halves.comparisons, path=stepper.encoder, module=stepper.encoder_module,
                   reruns=reruns)


def _decoder_said(record: CaseRecord, halves: EncoderChecked, rolled: Rolled) -> Rolled:
    """The decoder's verdict, led by the half it is about: the encoder's output within
    tolerance, so a failure is the decoder's, at its first failing step."""
    from onnx_parity.compare.halves import decoder_failure, encoder_note  # only an encoder-decoder

    record.note(encoder_note(halves.comparisons))
    outcome = rolled.outcome
    if compared_status(outcome) != "failed":
        return rolled
    tokens = record.details.tokens
    steps = [s for s in (rolled.record.first_failing, tokens.step if tokens is not None
                         and tokens.failed else None) if s is not None]
    said = decoder_failure(min(steps) if steps else None, rolled.record.steps)
    return dataclasses.replace(rolled, outcome=dataclasses.replace(
        outcome, failures=(said, *outcome.failures)))


def judge_fallback(record: CaseRecord, target: OrtTarget, samples: Sequence[Sample]) -> None:
    """What the target asked for against what ran (backends/fallback.py): the session's
    providers, then each node's (profiled on the first sample). Under `fail` a fall-back is
    this case's error, under `warn` a note; a run error waits until the fall-back is said."""
    runtime = target.facts.runtime
    if runtime:  # a `python:` target: which runtime ran it, said on every case
        record.note(f"target '{record.case.target.name}' ran on {runtime_text(runtime)} "
                    f"({', '.join(target.facts.active) or 'no provider'})")
    if not target.facts.can_fall_back:
        if runtime:
            record.found(providers=judge_placement(record.case.target, target.facts,
                                                   None).providers)
        return
    run_error: RunError | None = None
    try:
        placement = target.placement(samples[0].inputs) if samples else None
    except RunError as exc:  # reported after the fall-back, which may well be its cause
        placement, run_error = None, exc
    judgement = judge_placement(record.case.target, target.facts, placement)
    record.found(providers=judgement.providers)
    if judgement.action == "fail":
        raise RunError(judgement.message)
    if judgement.action == "warn":
        record.notes.extend(judgement.problems)
    if run_error is not None:
        raise run_error


def reference_label(model: ModelSpec) -> str:
    """Who the case's expected outputs come from, as its comparisons name it."""
    if model.reference is not None:
        return f"target '{model.reference.name}'"
    return "PyTorch" if model.torch is not None else "the recorded outputs"


def runtime_text(runtime: Mapping[str, str]) -> str:
    """`onnxruntime-openvino 1.24.1 (Release CPU-OPENVINO_CPU) in .venv-ov/bin/python`."""
    build = f" ({runtime['build']})" if runtime.get("build") else ""
    return (f"{runtime.get('package', 'onnxruntime')} {runtime.get('onnxruntime', '?')}{build}"
            f" in {runtime.get('python', '?')}")


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
    keep = compared_positions(names, ignored)
    if ignored:
        record.found(not_compared=tuple(n for n in names if n in ignored))
        record.note(f"not compared (ignore_outputs): {', '.join(ignored)}")
    return keep


def _check_named(model: ModelSpec, names: Sequence[str]) -> None:
    for key, named in (("tolerance.outputs", model.tolerances.output_names()),
                       ("constant_outputs", model.constant_outputs)):
        unknown = sorted(set(named) - set(names))
        if unknown:
            # A misspelt output name would otherwise leave its setting silently unused.
            raise CompareError(f"{key} names {', '.join(unknown)}, which the model does not "
                               f"output (its outputs: {', '.join(names)})")


def _followed_up(record: CaseRecord, prepared: PreparedCase, checked: Checked) -> Compared:
    """The follow-ups the comparison calls for (explain/followups.py), chosen by how the case
    ended on its tolerance, before any regression check: a growth within the tolerance has
    no tensor out of it to explain. Returns the outcome with what they found that the verdict
    reads: a selection among tied scores, whose advice is not an atol."""
    task, outcome = prepared.task, checked.outcome
    status = compared_status(outcome)
    wanted = follow_ups(status, task.localize, task.artifacts is not None, task.causes)
    if not checked.cause:
        wanted = dataclasses.replace(wanted, cause=False)
    if not wanted.any:
        return outcome
    case, loaded = prepared.case, prepared.loaded
    module = loaded.module if loaded is not None else None
    if checked.module is not None:  # the half that drifted: an encoder-decoder's encoder
        module = checked.module
    evidence = Evidence(case, checked.path or prepared.path, checked.feeds, checked.names,
                        checked.expected,
                        checked.actual, checked.comparisons, prepared.float32,
                        prepared.calibration, loaded.binding if loaded is not None else None)
    if wanted.cause:
        reruns = checked.reruns or prepared.reruns
        record.found_all(find_cause(evidence, record.numerics, reruns, module,
                                    threads=task.threads))
    record.enter("compare")  # a timeout while localizing names the right stage
    # A rollout's judged call alone may be within tolerance (accumulated drift): then
    # localization looks at that call as a passing one. An encoder's call is the one that
    # failed.
    alone = checked.cause
    record.found_all(localize_and_bundle(wanted, evidence, module,
                                         failed=status == "failed" and alone,
                                         artifacts=task.artifacts, threads=task.threads))
    drift = record.details.divergence
    if drift is None or drift.verdict != "selection" or outcome.rollout:
        return outcome
    op = f"{drift.op_type} '{drift.node}'" if drift.node else "a selection op"
    return dataclasses.replace(outcome, selection=op)


def _result(task: WorkerTask, record: CaseRecord, started: float, result: CaseResult,
            log: str) -> CaseResult:
    """The case's final result, with its notes, and its export `log` kept under --artifacts
    when it did not pass."""
    case = record.case
    if result.status not in ("passed", "skipped") and task.artifacts is not None and log:
        from onnx_parity.explain.artifacts import keep_export_log  # only with --artifacts

        kept = keep_export_log(task.artifacts, case.id, log)
        if kept is not None:
            result = dataclasses.replace(result, details=dataclasses.replace(
                result.details, export_log=str(kept)))
    return replaced(
        result, opset=record.opset if record.opset is not None else case.opset,
        seconds=round(time.perf_counter() - started, 4), notes=tuple(dict.fromkeys(record.notes)))
