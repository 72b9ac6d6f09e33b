"""What a compared case gets after its verdict, and the one rule (`follow_ups`) for which
cases get it: the cause a second run proves (weights.py: a shipped file with its module's
weights swapped in; ladder.py and causes.py: the case again with one suspect undone), where
the drift starts (localize/: against PyTorch, another provider, or, for a reduced precision,
the float32 model) and a repro bundle (bundle.py). None changes the case's status, and none
raises: one that fails says why in its place. localize/ and bundle.py do not know each other;
the localization's Localization is the one value that passes from one to the other, here.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from onnx_parity.errors import StageError
from onnx_parity.explain import causes
from onnx_parity.findings import BundleRecord, CaseDetails, CauseRecord, DriftRecord
from onnx_parity.frozen import frozen
from onnx_parity.literals import Causes, Localize, Status

if TYPE_CHECKING:
    from onnx_parity.explain.causes import Numerics, Reruns
    from onnx_parity.explain.evidence import Evidence
    from onnx_parity.explain.localize import Localization
    from onnx_parity.spec import TargetSpec

logger = logging.getLogger(__name__)


@frozen
class FollowUps:
    """What a compared case gets after its verdict."""

    cause: bool = False  # re-runs that may prove why it failed (causes.py)
    localize: bool = False  # where the drift starts (localize/)
    bundle: bool = False  # a repro bundle under --artifacts (bundle.py)

    @property
    def any(self) -> bool:
        return self.cause or self.localize or self.bundle


def follow_ups(compared: Status, localize: Localize, artifacts: bool,
               causes: Causes = "failed") -> FollowUps:
    """The one rule for which cases get follow-ups, read off the comparison's verdict: a case
    whose outputs failed gets the cause re-runs unless `--causes never`, its localization
    unless `--localize never`,
    and a bundle under --artifacts; under `--localize always` every compared case is
    localized. A case in error (a powerless output, say) failed nothing, so it gets no bundle
    however --localize is set; nor does one failed only by the regression check, whose growth
    lies within the tolerance, where no tensor is out of it and a bundle's check would pass."""
    failed = compared == "failed"
    return FollowUps(cause=failed and causes == "failed",
                     localize=localize == "always" or (failed and localize == "failed"),
                     bundle=failed and artifacts)


def localize_and_bundle(wanted: FollowUps, evidence: Evidence, module: Any | None = None, *,
                        failed: bool = False, artifacts: Path | None = None,
                        threads: int = 0) -> CaseDetails:
    """The localization and the bundle `wanted` asks for, as the case's `divergence` and
    `bundle`. Never raises: a localization that fails says why in its place, and the case
    keeps its verdict."""
    # Imported here: a run whose cases pass never needs the localization's modules.
    from onnx_parity.explain.localize import localize_case, unlocalized, worst_sample
    from onnx_parity.explain.localize.quality import locate

    divergence: DriftRecord | None = None
    bundle: BundleRecord | None = None
    finding: Localization | None = None
    case, inputs = evidence.case, evidence.inputs
    if wanted.localize:
        started = time.perf_counter()
        sample = worst_sample(evidence.comparisons)
        try:
            if case.precision != "fp32" and evidence.float32_path is not None:
                # A reduced-precision variant: where it parts from the float32 model.
                divergence = locate(case, evidence.float32_path, evidence.model_path,
                                    inputs[sample], threads).as_record(sample)
            else:
                finding = localize_case(evidence, sample, module, case_failed=failed,
                                        threads=threads)
                divergence = finding.divergence.as_record()
        except Exception as exc:  # never turn a verdict into a crash; say why instead
            logger.debug("localization failed: %s", traceback.format_exc())
            divergence = unlocalized(f"{type(exc).__name__}: {_first_line(str(exc))}")
        divergence = dataclasses.replace(divergence,
                                         seconds=round(time.perf_counter() - started, 4))
    if wanted.bundle and artifacts is not None:
        from onnx_parity.explain.bundle import write_bundle  # only a bundle asked for

        try:
            written = write_bundle(artifacts, evidence, finding)
            bundle = BundleRecord(path=str(written.folder), command=written.command)
        except Exception as exc:  # a bundle is a courtesy; it must not cost the verdict
            logger.debug("bundle failed: %s", traceback.format_exc())
            bundle = BundleRecord(error=f"could not write the repro bundle: "
                                        f"{type(exc).__name__}: {_first_line(str(exc))}")
    return CaseDetails(divergence=divergence, bundle=bundle)


def _first_line(text: str, limit: int = 300) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def find_cause(evidence: Evidence, numerics: Numerics | None, reruns: Reruns,
               module: Any | None = None, *, threads: int = 0) -> CaseDetails:
    """Run the case again with each suspect undone; the first one the second run proves is the
    case's `cause`, the others `causes_ruled_out`. The case keeps its status either way.

    Suspects, in order: a shipped file's weights that are not its module's (weights.py: only for
    a model with both `onnx` and `torch`, when `module` is given; one re-run, and only when some
    differ), then the ladder's rungs (ladder.py): TF32, int8 saturation, the other exporter,
    each one second run through `reruns`, tried only while none before it was proven."""
    # the causes' modules: only a case that failed
    from onnx_parity.explain.ladder import suspects
    from onnx_parity.explain.weights import stale_weights

    case, before = evidence.case, evidence.comparisons
    ruled_out: list[CauseRecord] = []
    weights = stale_weights(evidence, module, threads) if module is not None else None
    if weights is not None and weights.proven:
        return CaseDetails(cause=weights)
    ruled_out.extend([weights] if weights is not None else [])
    floating = causes.floating_failure(before)
    for suspect in suspects(case, numerics):
        if suspect.floating_only and not floating:
            continue  # only a floating output's failure can have an arithmetic cause
        try:
            session = suspect.rerun(reruns)
            after = evidence.compared(session)
        except StageError as exc:
            ruled_out.append(CauseRecord(suspect.kind, proven=False, setting=suspect.setting,
                                         message=f"{suspect.name} not tried: with"
                                                 f" {suspect.setting} the re-run failed:"
                                                 f" {exc.message}"))
            continue
        verdict = causes.prove(suspect, before, after)
        if verdict.proven and suspect.kind == "graph":
            verdict = _graph_level(verdict, evidence, reruns)
        if verdict.proven:
            return CaseDetails(cause=verdict, causes_ruled_out=tuple(ruled_out))
        ruled_out.append(verdict)
    return CaseDetails(causes_ruled_out=tuple(ruled_out))


def _graph_level(verdict: CauseRecord, evidence: Evidence, reruns: Reruns) -> CauseRecord:
    """Graph optimizations proven: the levels below the default, walked up, name the first at
    which the case fails again (one more run each, only for a proven cause)."""
    from onnx_parity.explain.ladder import graph_levels  # only a proven cause

    case = evidence.case
    kept = "disable_all"  # the highest level walked so far that keeps the numbers
    below = case.target.with_session_options(graph_optimization_level=kept)
    for level, variant in graph_levels(case):
        try:
            after = evidence.compared(reruns.on_target(variant))
        except StageError:
            return verdict
        if not all(c.passed for c in after):
            return dataclasses.replace(
                verdict, setting=f"{verdict.setting}; fails from {level}",
                message=f"{verdict.message}; it passes below level '{level}' and fails from"
                        f" it on: graph_optimization_level: "
                        f"{kept} is the highest that keeps its numbers"
                        + _new_nodes(reruns, below, variant, level))
        kept, below = level, variant
    return dataclasses.replace(verdict, message=f"{verdict.message}; it passes at every level"
                                                " below all, so the change comes at level all")


def _new_nodes(reruns: Reruns, below: TargetSpec, at: TargetSpec, level: str) -> str:
    """"; nodes only level 'extended' makes: FusedMatMul (2)", from the optimized graphs ONNX
    Runtime saves at the two levels; '' when it cannot tell or nothing is new."""
    try:
        before, after = reruns.optimized_ops(below), reruns.optimized_ops(at)
    except Exception as exc:  # a courtesy: the level is named either way
        logger.debug("optimized graphs not compared: %s", exc)
        return ""
    new = [f"{op} ({count})" for op, count in sorted(after.items()) if op not in before]
    return f"; nodes only level '{level}' makes: {', '.join(new)}" if new else ""
