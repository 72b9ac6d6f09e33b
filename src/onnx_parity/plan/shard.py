"""Sharding a plan across runners, and merging the shards' reports back into one.

A shard holds whole models: every case of a model runs in the same job, so each export happens
exactly once across the matrix. Models go to shards by a stable greedy rule (largest model first,
to the least loaded shard, ties to the lower shard and the earlier model), so every runner computes
the same split from the same spec with no coordination. A model's size is its number of cases, or
with durations (an earlier run's report) its seconds there. `--shard auto` reads the shard from
the CI runner's own variables (`shard_from_environment`).
"""

from __future__ import annotations

import dataclasses
import math
import posixpath
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from onnx_parity.errors import ParityError
from onnx_parity.plan.cases import Case
from onnx_parity.results import CaseResult, PreflightRecord, RunReport

_SHARD = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")


@dataclass(frozen=True)
class Shard:
    """Shard `index` (1-based) of `count`."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


class MergeError(ParityError):
    """Shard reports that cannot be joined into one; the message names the files."""


def parse_shard(text: str) -> Shard:
    """'K/N' with 1 ≤ K ≤ N; a ValueError says what is wrong with anything else."""
    match = _SHARD.fullmatch(text)
    if match is None:
        raise ValueError(f"expected K/N, e.g. 2/4 for the second of four shards; got {text!r}")
    index, count = int(match[1]), int(match[2])
    if count < 1:
        raise ValueError(f"{text!r}: the number of shards must be at least 1")
    if not 1 <= index <= count:
        raise ValueError(f"{text!r}: the shard number must be between 1 and {count}")
    return Shard(index, count)


# `--shard auto`: each runner's own (index, count) variables and the number its index starts at.
# A Kubernetes indexed job has no count variable: it comes from AUTO_COUNT or `--shard auto/N`.
RUNNERS: tuple[tuple[str, str, str | None, int], ...] = (
    ("Buildkite", "BUILDKITE_PARALLEL_JOB", "BUILDKITE_PARALLEL_JOB_COUNT", 0),
    ("GitLab", "CI_NODE_INDEX", "CI_NODE_TOTAL", 1),
    ("a Kubernetes indexed job", "JOB_COMPLETION_INDEX", None, 0),
)
AUTO_COUNT = "ONNX_PARITY_SHARDS"
_AUTO = re.compile(r"\s*auto\s*(?:/\s*(\d+)\s*)?", re.IGNORECASE)


def is_auto(text: str) -> bool:
    """`auto` or `auto/N`: the shard comes from the runner's variables."""
    return _AUTO.fullmatch(text) is not None


def shard_from_environment(text: str, env: Mapping[str, str]) -> Shard:
    """`auto` or `auto/N` resolved from the first CI runner whose index variable is set; a
    ValueError says what to set where none is, or where the variables disagree."""
    match = _AUTO.fullmatch(text)
    if match is None:
        raise ValueError(f"expected auto or auto/N; got {text!r}")
    given = int(match[1]) if match[1] else None
    for runner, index_name, count_name, base in RUNNERS:
        index_text = env.get(index_name, "").strip()
        if not index_text:
            continue
        where = f"{index_name}={index_text} ({runner}, counted from {base})"
        names = [name for name in (count_name, AUTO_COUNT) if name]
        count_text, source = next(((env[n].strip(), n) for n in names if env.get(n, "").strip()),
                                  (str(given) if given is not None else "", "--shard auto/N"))
        if not count_text:
            raise ValueError(f"--shard auto: {where} is set, but not the number of shards: "
                             f"set {' or '.join(names)}, or pass --shard auto/N")
        if not index_text.isdigit() or not count_text.isdigit():
            raise ValueError(f"--shard auto: {where} and {source}={count_text} must be whole "
                             "numbers")
        if given is not None and int(count_text) != given:
            raise ValueError(f"--shard auto/{given}: {source}={count_text} says otherwise")
        index = int(index_text) - base + 1
        try:
            return parse_shard(f"{index}/{count_text}")
        except ValueError as exc:
            raise ValueError(f"--shard auto: {where} with {source}={count_text}: {exc}") from None
    known = ", ".join(f"{index_name}{f' and {count_name}' if count_name else ''} ({runner})"
                      for runner, index_name, count_name, _ in RUNNERS)
    raise ValueError(f"--shard auto found no shard index: set {known}, with the number of "
                     f"shards in {AUTO_COUNT} or --shard auto/N where the runner gives none; "
                     "on GitHub Actions pass the matrix's own --shard K/N")


def model_seconds(results: Iterable[CaseResult]) -> dict[str, float]:
    """Model name → the seconds of its cases in a report: the durations shards balance by. A
    case with no time (one a killed run never ran, a time that is not a number) adds nothing,
    and a model with none is left out: unknown, it weighs the median, not nothing."""
    seconds: dict[str, float] = {}
    for case in results:
        if math.isfinite(case.seconds) and case.seconds > 0:
            seconds[case.model] = seconds.get(case.model, 0.0) + case.seconds
    return seconds


def assign_models(cases: Sequence[Case], count: int,
                  durations: Mapping[str, float] | None = None) -> dict[str, int]:
    """Model name → shard (1-based), balancing the number of cases per shard, or with
    `durations` (model name → seconds, model_seconds) their seconds: a model the durations do
    not know weighs the median of those they do; none known: the number of cases."""
    sizes: dict[str, float] = {}
    for case in cases:
        sizes[case.model.name] = sizes.get(case.model.name, 0) + 1
    known = {name: durations[name] for name in sizes if durations and name in durations}
    if known:
        median = statistics.median(known.values())
        sizes = {name: known.get(name, median) for name in sizes}
    # sorted() is stable: models of equal size keep spec order.
    largest_first = sorted(sizes, key=lambda name: -sizes[name])
    loads = [0.0] * count
    owner: dict[str, int] = {}
    for name in largest_first:
        lightest = min(range(count), key=lambda shard: (loads[shard], shard))
        loads[lightest] += sizes[name]
        owner[name] = lightest + 1
    return owner


def shard_cases(cases: Sequence[Case], shard: Shard,
                durations: Mapping[str, float] | None = None) -> tuple[Case, ...]:
    """The cases of `shard`, in plan order."""
    owner = assign_models(cases, shard.count, durations)
    return tuple(case for case in cases if owner[case.model.name] == shard.index)


def merge_reports(reports: Sequence[tuple[str, RunReport]]) -> RunReport:
    """One report from shard reports (each named by its file): cases in spec order, the slowest
    shard's time, and the environment facts (where shards disagree, every distinct value).

    Refuses reports of different specs, a case that appears twice, and — when the reports come
    from `--shard K/N` runs — a set of shards that is not exactly 1..N, since a shard whose job died
    before writing its report would otherwise pass unseen.
    """
    if not reports:
        raise MergeError("no reports to merge")
    first_name, first = reports[0]
    spec = _spec_key(first.spec_path)
    for name, report in reports[1:]:
        if _spec_key(report.spec_path) != spec:
            raise MergeError(
                f"{name} is a report on {report.spec_path}, but {first_name} is one on "
                f"{first.spec_path}: only shards of one spec can be merged"
            )
    _check_shards(reports)
    seen: dict[str, str] = {}
    for name, report in reports:
        for case in report.cases:
            if case.id in seen:
                raise MergeError(f"case {case.id} is in both {seen[case.id]} and {name}")
            seen[case.id] = name
    return RunReport(
        spec_path=first.spec_path,
        environment=_merged_environment([report.environment for _, report in reports]),
        cases=_spec_order(reports),
        seconds=max(report.seconds for _, report in reports),
        # Every shard compared with the same baseline, and named the same cases gone from it.
        baseline=next((report.baseline for _, report in reports if report.baseline), None),
        preflight=merged_preflight([r.preflight for _, r in reports if r.preflight is not None]),
        # A shard whose run did not finish leaves the merged run unfinished: marked, not refused,
        # so the cases it did check are still reported.
        complete=all(report.complete for _, report in reports),
        # Shards hold whole models: each names the expectations of its own models; in spec
        # order, as one run lists them, whichever shard holds which.
        unmatched=tuple(sorted(dict.fromkeys(e for _, r in reports for e in r.unmatched),
                               key=lambda e: (e.line is None, e.line or 0))),
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


def _spec_key(path: str) -> str:
    return posixpath.normpath(path.replace("\\", "/"))


def _check_shards(reports: Sequence[tuple[str, RunReport]]) -> None:
    found: dict[str, Shard] = {}
    for name, report in reports:
        if report.shard is None:
            continue
        try:
            found[name] = parse_shard(report.shard)
        except ValueError as exc:
            raise MergeError(f"{name}: environment.shard: {exc}") from exc
    if not found:
        return  # reports of separate runs, not of --shard: nothing to count
    unsharded = [name for name, _ in reports if name not in found]
    if unsharded:
        raise MergeError(f"{', '.join(unsharded)} did not come from a --shard run, but "
                         f"{next(iter(found))} did: merge the shards of one run")
    counts = {shard.count for shard in found.values()}
    if len(counts) > 1:
        raise MergeError("the reports come from splits into different numbers of shards: "
                         + ", ".join(f"{name} is {shard}" for name, shard in found.items()))
    count = counts.pop()
    holders: dict[int, list[str]] = {}
    for name, shard in found.items():
        holders.setdefault(shard.index, []).append(name)
    twice = {index: names for index, names in holders.items() if len(names) > 1}
    if twice:
        raise MergeError("; ".join(f"shard {index}/{count} is in {' and '.join(names)}"
                                   for index, names in sorted(twice.items())))
    missing = [f"{index}/{count}" for index in range(1, count + 1) if index not in holders]
    if missing:
        raise MergeError(f"no report for shard {', '.join(missing)}: its job may have failed "
                         "before writing one; refusing to merge an incomplete run")


def _spec_order(reports: Sequence[tuple[str, RunReport]]) -> tuple[CaseResult, ...]:
    """Models in the order of their line in the spec; a model's cases in the order its shard ran
    them, which is plan order. Cases without a line keep their place after those with one."""
    cases = [case for _, report in reports for case in report.cases]
    first_seen: dict[str, int] = {}
    for position, case in enumerate(cases):
        first_seen.setdefault(case.model, position)

    def key(position_case: tuple[int, CaseResult]) -> tuple[int, int, int, int]:
        position, case = position_case
        if case.line is None:
            return (1, 0, first_seen[case.model], position)
        return (0, case.line, first_seen[case.model], position)

    return tuple(case for _, case in sorted(enumerate(cases), key=key))


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
