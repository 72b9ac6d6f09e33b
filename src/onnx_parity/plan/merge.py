"""Merging the reports of a run's shards back into one, refusing what it cannot vouch for.

Each report carries the plan it belongs to (results.PlanRecord: the spec's digest, every planned
case, how the shards were split, which shard it is, the onnx-parity that planned it). A merge
joins reports of one plan only, each shard exactly once, and every planned case exactly once;
anything else is a MergeError whose one line names the file, so a shard whose job died, one
split another way, or one of another spec can never leave a case unseen.
"""

from __future__ import annotations

import dataclasses
import itertools
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from onnx_parity.errors import ParityError
from onnx_parity.results import PlanRecord, PreflightRecord, RunReport

_NAMED = 10  # missing shards or cases named in a message; the rest are counted


class MergeError(ParityError):
    """Shard reports that cannot be joined into one; the message names the files."""


Named = tuple[str, RunReport, PlanRecord]  # a report, the file it came from, and its plan


def merge_reports(reports: Sequence[tuple[str, RunReport]]) -> RunReport:
    """One report from shard reports (each named by its file): cases in spec order, the
    slowest shard's time, and the environment facts (where shards disagree, every distinct
    value). Reports of separate runs (no `--shard`) of one spec merge too, each holding its
    own plan's cases."""
    if not reports:
        raise MergeError("no reports to merge")
    named = [(name, report, _plan_of(name, report)) for name, report in reports]
    _check_specs(named)
    _check_shards(named)
    planned = _check_cases(named)
    order = {case_id: index for index, case_id in enumerate(planned)}
    _, first, first_plan = named[0]
    return RunReport(
        spec_path=first.spec_path,
        environment=_merged_environment([report.environment for _, report, _ in named]),
        # Models in the order of their line in the spec, a model's cases in plan order: one
        # run's order, also for reports of separate runs.
        cases=tuple(sorted((c for _, r, _ in named for c in r.cases),
                           key=lambda c: (c.line is None, c.line or 0, order[c.id]))),
        seconds=max(report.seconds for _, report, _ in named),
        # Every shard compared with the same baseline, and named the same cases gone from it.
        baseline=next((report.baseline for _, report, _ in named if report.baseline), None),
        preflight=merged_preflight([r.preflight for _, r, _ in named if r.preflight is not None]),
        # A shard whose run did not finish leaves the merged run unfinished: marked, not refused,
        # so the cases it did check are still reported.
        complete=all(report.complete for _, report, _ in named),
        # Shards hold whole models: each names the expectations of its own models; in spec
        # order, as one run lists them, whichever shard holds which.
        unmatched=tuple(sorted(dict.fromkeys(e for _, r, _ in named for e in r.unmatched),
                               key=lambda e: (e.line is None, e.line or 0))),
        # The merged report is the whole plan's: it merges again, alone, as an unsharded run's.
        plan=dataclasses.replace(first_plan, cases=planned, shard=None),
    )


def merged_preflight(preflights: Sequence[PreflightRecord]) -> PreflightRecord | None:
    """The shards' preflights as one: the first unusable one speaks for all (a GPU a shard
    could not use is the run's problem), with the GPU cases of every shard counted."""
    if not preflights:
        return None
    if len(preflights) == 1:
        return preflights[0]
    first = next((p for p in preflights if not p.usable), preflights[0])
    return dataclasses.replace(first, gpu_cases=sum(p.gpu_cases or 0 for p in preflights),
                               skipped_cases=sum(p.skipped_cases or 0 for p in preflights))


def _plan_of(name: str, report: RunReport) -> PlanRecord:
    if report.plan is None:
        raise MergeError(f"{name} has no plan record (it was written by an older onnx-parity), "
                         "so merge cannot vouch that its shards cover the run: re-run the "
                         "shards with this version")
    return report.plan


def _check_specs(named: Sequence[Named]) -> None:
    """One spec, with one content, planned by one onnx-parity."""
    first_name, first, first_plan = named[0]
    spec = _spec_key(first.spec_path)
    for name, report, plan in named[1:]:
        if _spec_key(report.spec_path) != spec:
            raise MergeError(f"{name} is a report on {report.spec_path}, but {first_name} is one "
                             f"on {first.spec_path}: only shards of one spec can be merged")
        if plan.spec_sha256 != first_plan.spec_sha256:
            raise MergeError(f"{name} and {first_name} are reports on different contents of "
                             f"{first.spec_path} (sha256 {plan.spec_sha256[:12]} and "
                             f"{first_plan.spec_sha256[:12]}): merge the shards of one run")
        if plan.version != first_plan.version:
            raise MergeError(f"{name} was planned by onnx-parity {plan.version}, {first_name} by "
                             f"{first_plan.version}: run every shard with one version")


def _check_shards(named: Sequence[Named]) -> None:
    """Shards of one plan, each once, none missing; or reports of separate runs alone."""
    sharded = [(name, plan) for name, _, plan in named if plan.shard is not None]
    if not sharded:
        return  # reports of separate runs, not of --shard: nothing to count
    unsharded = [name for name, _, plan in named if plan.shard is None]
    if unsharded:
        raise MergeError(f"{', '.join(unsharded)} did not come from a --shard run, but "
                         f"{sharded[0][0]} did: merge the shards of one run")
    counts = {plan.shard[1] for _, plan in sharded if plan.shard is not None}
    if len(counts) > 1:
        raise MergeError("the reports come from splits into different numbers of shards: "
                         + ", ".join(f"{name} is {_shard_text(plan)}" for name, plan in sharded))
    first_name, first = sharded[0]
    for name, plan in sharded[1:]:
        differs = _plan_difference(plan, first)
        if differs:
            raise MergeError(f"{name} and {first_name} are shards of different plans: {differs}; "
                             "every shard of a run must plan the same cases and split them "
                             "the same way")
    count = counts.pop()
    holders: dict[int, list[str]] = {}
    for name, plan in sharded:
        if plan.shard is not None:
            holders.setdefault(plan.shard[0], []).append(name)
    twice = {index: names for index, names in holders.items() if len(names) > 1}
    if twice:
        raise MergeError("; ".join(f"shard {index}/{count} is in {' and '.join(names)}"
                                   for index, names in sorted(twice.items())))
    # Counted, not listed: a file may claim a split into millions of shards.
    absent = count - len(holders)
    if absent:
        missing = itertools.islice((i for i in range(1, count + 1) if i not in holders), _NAMED)
        named_ones = ", ".join(f"{index}/{count}" for index in missing)
        more = f" and {absent - _NAMED} more" if absent > _NAMED else ""
        raise MergeError(f"no report for shard {named_ones}{more}: its job may have failed "
                         "before writing one; refusing to merge an incomplete run")


def _plan_difference(plan: PlanRecord, first: PlanRecord) -> str:
    """What sets two shards' plans apart, in words; "" for one plan."""
    if plan.split != first.split:
        return f"one split by {plan.split}, the other by {first.split}"
    if plan.durations_sha256 != first.durations_sha256:
        return "they were balanced by different --durations reports"
    if plan.cases != first.cases:
        return (f"they planned {len(plan.cases)} and {len(first.cases)} cases, not the same "
                "ones (another --select or --targets?)")
    return ""


def _check_cases(named: Sequence[Named]) -> tuple[str, ...]:
    """Every case a report holds is one its plan lists, and in one report only; every planned
    case is in a report. The planned cases, in plan order."""
    seen: dict[str, str] = {}
    for name, report, plan in named:
        listed = set(plan.cases)
        for case in report.cases:
            if case.id not in listed:
                raise MergeError(f"{name} holds case {case.id}, which its plan does not list")
            if case.id in seen:
                where = f"twice in {name}" if seen[case.id] == name else (
                    f"in both {seen[case.id]} and {name}")
                raise MergeError(f"case {case.id} is {where}")
            seen[case.id] = name
    planned = tuple(dict.fromkeys(case_id for _, _, plan in named for case_id in plan.cases))
    missing = [case_id for case_id in planned if case_id not in seen]
    if missing:
        more = f" and {len(missing) - _NAMED} more" if len(missing) > _NAMED else ""
        raise MergeError(f"{len(missing)} of the {len(planned)} planned cases are in no report: "
                         f"{', '.join(missing[:_NAMED])}{more}; a report must hold every case "
                         "its shard was given")
    return planned


def _shard_text(plan: PlanRecord) -> str:
    return "unsharded" if plan.shard is None else f"{plan.shard[0]}/{plan.shard[1]}"


def _spec_key(path: str) -> str:
    return posixpath.normpath(path.replace("\\", "/"))


def _merged_environment(environments: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    keys = dict.fromkeys(key for env in environments for key in env)
    for key in keys:
        values: list[Any] = []
        for env in environments:
            if key in env and env[key] not in values:
                values.append(env[key])
        merged[key] = values[0] if len(values) == 1 else values
    return merged
