"""Sharding a plan across runners, and the plan's record that each shard's report carries.

A shard holds whole models: every case of a model runs in the same job, so each export happens
exactly once across the matrix. Models go to shards by a stable greedy rule (largest model first,
to the least loaded shard, ties to the lower shard and the earlier model), so every runner computes
the same split from the same spec with no coordination. A model's size is its number of cases, or
with durations (an earlier run's report) its seconds there. `--shard auto` reads the shard from
the CI runner's own variables (`shard_from_environment`). Each shard's report records the whole
plan (`plan_record`), so that `merge` (plan/merge.py) can check that the shards cover it.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence

from onnx_parity import __version__
from onnx_parity.frozen import frozen
from onnx_parity.plan.cases import Case
from onnx_parity.results import CaseResult, PlanRecord

_SHARD = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")


@frozen
class Shard:
    """Shard `index` (1-based) of `count`."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


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
    # Shards past the number of models stay empty: while a model is left, an empty shard below
    # that number is there, and it wins any tie with a later one. So `--shard 1/300000000`
    # allocates one load per model, not one per shard.
    loads = [0.0] * min(count, len(sizes))
    owner: dict[str, int] = {}
    for name in largest_first:
        lightest = min(range(len(loads)), key=lambda shard: (loads[shard], shard))
        loads[lightest] += sizes[name]
        owner[name] = lightest + 1
    return owner


def shard_cases(cases: Sequence[Case], shard: Shard,
                durations: Mapping[str, float] | None = None) -> tuple[Case, ...]:
    """The cases of `shard`, in plan order."""
    owner = assign_models(cases, shard.count, durations)
    return tuple(case for case in cases if owner[case.model.name] == shard.index)


def plan_record(spec_sha256: str, cases: Sequence[Case], shard: Shard | None = None,
                durations_sha256: str | None = None) -> PlanRecord:
    """The record of a run's plan that its report carries: `cases` is the whole selection,
    before sharding; `durations_sha256` the digest of the report that balanced the shards
    (None: they were balanced by case count)."""
    return PlanRecord(spec_sha256=spec_sha256, cases=tuple(case.id for case in cases),
                      version=__version__,
                      split="count" if durations_sha256 is None else "durations",
                      durations_sha256=durations_sha256,
                      shard=None if shard is None else (shard.index, shard.count))
