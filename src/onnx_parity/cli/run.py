"""`onnx-parity run`, from its settings to exit code: spec → plan → GPU preflight → workers →
baseline → reports, with the reports written as cases finish."""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from onnx_parity.compare.expect import unmatched
from onnx_parity.errors import SpecError
from onnx_parity.frozen import frozen
from onnx_parity.literals import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from onnx_parity.machine.compat import GPU_PROVIDERS
from onnx_parity.plan.cases import plan
from onnx_parity.plan.shard import plan_record, shard_cases
from onnx_parity.report import console
from onnx_parity.report.live import LiveReports
from onnx_parity.report.publish import (
    exit_code,
    make_parts,
    say,
    shown,
    suite_maker,
    write_files,
    write_github,
    write_spec_problems,
)
from onnx_parity.report.texts import CaseTexts
from onnx_parity.results import RunReport
from onnx_parity.run.scheduler import RunOptions, run_cases
from onnx_parity.spec import load_spec

if TYPE_CHECKING:
    from onnx_parity.compare.baseline import Baseline
    from onnx_parity.findings import Gpu
    from onnx_parity.literals import Causes, Localize
    from onnx_parity.plan.cases import Case
    from onnx_parity.plan.select import Selection
    from onnx_parity.plan.shard import Shard
    from onnx_parity.prepare.cache import ExportCache
    from onnx_parity.report.jsonfile import Durations
    from onnx_parity.report.publish import ReportSettings
    from onnx_parity.results import CaseResult, PlanRecord, PreflightRecord
    from onnx_parity.run.pool import Pool
    from onnx_parity.spec import Spec


# A planned case's word in a report written before it ended (mid-run, or left by a killed run).
NOT_RUN = "not run: the run did not finish"


@frozen
class RunSettings:
    """Everything `onnx-parity run` was asked for, read from the command line once (main.py)
    and checked on construction; nothing past it reads a flag."""

    spec: Path
    selection: Selection
    reports: ReportSettings
    jobs: int  # 0: one per core, bounded by memory
    input_budget: int  # bytes of generated inputs a case may have
    localize: Localize
    causes: Causes = "failed"
    work_dir: Path | None = None  # None: a temporary folder
    artifacts: Path | None = None  # repro bundles of failed cases
    shard: Shard | None = None
    baseline: Path | None = None  # an earlier run's JSON report
    list_only: bool = False  # print the selected case ids, run nothing
    allow_empty: bool = False
    skip_unavailable: bool = False
    verbose: bool = False
    durations: Path | None = None  # an earlier JSON report whose seconds balance the shards
    profile: bool = False  # ONNX Runtime's profile per case, its costliest nodes listed
    cache: ExportCache | None = None  # --cache DIR: exports and variants kept between runs
    allow_outside_repo: bool = False  # the spec's paths may leave its repository

    def __post_init__(self) -> None:
        if self.jobs < 0:
            raise ValueError("--jobs must be 0 (automatic) or more")
        if self.durations is not None and self.shard is None:
            raise ValueError("--durations balances shards: give --shard K/N (or auto) too")


def run_command(settings: RunSettings, pool: Pool) -> int:
    """`pool`: the run's workers, its first one already started (cli/main.py)."""
    try:
        spec = load_spec(settings.spec, allow_outside_repo=settings.allow_outside_repo)
    except SpecError as exc:
        _spec_failed(settings, exc)
        return EXIT_USAGE
    problem = settings.selection.problem(spec.targets)
    if problem is not None:
        say(f"{shown(settings.spec)}: {problem}", err=True)
        return EXIT_USAGE
    cases = plan(spec, settings.selection, input_budget=settings.input_budget)
    selected = len(cases)
    against = _baseline(settings, cases) if settings.baseline is not None else None
    durations = _durations(settings.durations) if settings.durations is not None else None
    record = plan_record(spec.sha256, cases, settings.shard,
                         durations.sha256 if durations is not None else None)
    if settings.shard is not None:
        cases = shard_cases(cases, settings.shard,
                            durations.seconds if durations is not None else None)
    if settings.list_only:
        say("\n".join(c.id for c in cases))
        return EXIT_OK
    if not cases and selected:
        return _empty_shard(settings, selected, record)
    if not cases:
        say(f"{shown(settings.spec)}: no cases{settings.selection.describe()}; nothing was "
            "checked", err=True)
        empty_ok = settings.allow_empty or settings.reports.fail_on == "never"
        return EXIT_OK if empty_ok else EXIT_FAILED
    if settings.work_dir is not None:
        return _run(settings, spec, cases, settings.work_dir, pool, record, against)
    with tempfile.TemporaryDirectory(prefix="onnx-parity-") as work:
        return _run(settings, spec, cases, Path(work), pool, record, against)


def _durations(path: Path) -> Durations | None:
    """Each model's seconds in an earlier JSON report, and the report's digest; None (a
    warning) when it cannot be read: the shards are balanced by case count. A runner that
    read another report, or none, splits another way: its report records the split it made,
    and `merge` refuses shards of different splits, so no model is checked twice or never."""
    # only with --durations
    from onnx_parity.report.jsonfile import ReportFormatError, read_durations

    try:
        return read_durations(path)
    except (OSError, ReportFormatError) as exc:
        reason = getattr(exc, "strerror", None) if isinstance(exc, OSError) else None
        say(f"warning: --durations {shown(path)} cannot be read ({shown(reason or exc)}): the "
            "shards are balanced by case count; `merge` refuses shards that split another "
            "way", err=True)
        return None


def _baseline(settings: RunSettings, cases: Sequence[Case]) -> tuple[Baseline, list[str]]:
    """The baseline report, and its cases that this selection would have checked but the spec
    no longer plans (before sharding, so that every shard names the same ones)."""
    from onnx_parity.compare.baseline import gone_cases  # numpy: only a run with --baseline
    from onnx_parity.report.jsonfile import read_baseline

    baseline = read_baseline(str(settings.baseline))
    if not baseline.usable:
        say(f"warning: regression check not done: {shown(baseline.problem)}", err=True)
        return baseline, []
    gone = gone_cases(baseline, [case.id for case in cases],
                      lambda old: settings.selection.matches(old.id, old.target))
    return baseline, gone


def _run(settings: RunSettings, spec: Spec, cases: Sequence[Case], work_dir: Path,
         pool: Pool, record: PlanRecord,
         against: tuple[Baseline, list[str]] | None = None) -> int:
    import collections
    import dataclasses
    import functools
    import signal

    started = time.perf_counter()

    @functools.cache
    def versions() -> dict[str, Any]:
        """The versions the report records, read once: while the first cases run (the run
        loop's first tick), not before they start; importlib.metadata's import with them."""
        from onnx_parity.machine.versions import read_versions

        return read_versions()

    # `merge` checks that every shard of the run is there
    shard = str(settings.shard) if settings.shard is not None else None
    options = RunOptions(work_dir=work_dir, jobs=settings.jobs, localize=settings.localize,
                         causes=settings.causes,
                         baseline=against[0] if against is not None else None,
                         artifacts=settings.artifacts, verbose=settings.verbose,
                         profile=settings.profile, cache=settings.cache)
    unavailable, gpus, preflight = _gpu_preflight(settings, cases, options)
    options = dataclasses.replace(options, gpus=gpus)
    order = {case.id: index for index, case in enumerate(cases)}
    baseline_run = None
    if against is not None:
        from onnx_parity.compare.baseline import run_record  # numpy: only with --baseline

        baseline_run = run_record(against[0], versions(), preflight, against[1])
    unmatched_expectations = unmatched(cases)

    not_run: dict[str, CaseResult] = {}  # made for the first report that needs them

    def unfinished(case: Case) -> CaseResult:
        if case.id not in not_run:
            not_run[case.id] = case.result("error", message=NOT_RUN)
        return not_run[case.id]

    def report_of(results: Sequence[CaseResult], complete: bool = False) -> RunReport:
        """The run's report: every planned case, those that have not ended as errors that say
        so, so a file written mid-run (and left by a run that was killed) never reads green."""
        done = {result.id for result in results}
        left = [unfinished(case) for case in cases if case.id not in done]
        return RunReport(spec_path=str(settings.spec), environment=versions(),
                         cases=tuple(sorted((*results, *left), key=lambda r: order[r.id])),
                         seconds=round(time.perf_counter() - started, 3),
                         baseline=baseline_run, preflight=preflight, shard=shard,
                         complete=complete and not left, unmatched=unmatched_expectations,
                         plan=record)

    # Reports land as cases finish: a job killed mid-run still leaves valid files, which count
    # every planned case and say that the run did not finish. Each case's part of them is made
    # once, as its result comes in (report/texts.py): a write joins them.
    texts = CaseTexts()
    files = settings.reports.json is not None or settings.reports.junit is not None

    def placeholders(chunk: Sequence[Case]) -> None:
        for case in chunk:
            make_parts(settings.reports, unfinished(case), str(settings.spec), texts)

    def ahead(results: Sequence[CaseResult]) -> list[Callable[[], None]]:
        """The placeholders a write needs that are not made yet, 8 a piece: the loop makes
        one a tick while it waits (report/live.py), a millisecond or two, about what a worker
        takes for a small model's case."""
        ended = {result.id for result in results}
        left = [case for case in cases if case.id not in ended and case.id not in not_run]
        return [functools.partial(placeholders, left[start:start + 8])
                for start in range(0, len(left), 8)]

    # No report file asked for, nothing written mid-run; else a write, once due, waits for the
    # placeholders of the cases not ended by then.
    live = LiveReports(lambda report: write_files(settings.reports, report, texts), report_of,
                       ahead=ahead)

    @functools.cache
    def width() -> int | None:
        return console.terminal_width()

    # A model's JUnit testsuite is made as its last case ends, while the workers go on.
    planned = collections.Counter(case.model.name for case in cases)
    ended: dict[str, dict[str, CaseResult]] = {}

    @functools.cache
    def make_suite() -> Callable[[str, Sequence[CaseResult], CaseTexts], None]:
        return suite_maker(settings.reports, str(settings.spec), versions(), shard)

    def on_result(result: CaseResult) -> None:
        # The console's wording is imported as the first result comes in, not before the
        # workers have their first models.

        say(console.case_line(result, width()), flush=True)
        if files:
            make_parts(settings.reports, result, str(settings.spec), texts)
            model = ended.setdefault(result.model, {})
            model[result.id] = result
            if len(model) == planned[result.model]:
                make_suite()(result.model, sorted(model.values(), key=lambda r: order[r.id]),
                             texts)
            live.add(result)

    for result in unavailable:
        on_result(result)
    skipping = {r.id for r in unavailable}
    runnable = [case for case in cases if case.id not in skipping]

    def tick() -> float:
        versions()
        return live.tick()

    outcome = run_cases(spec, runnable, options, on_result, pool, tick) if runnable else None
    ran = outcome.results if outcome is not None else ()
    report = report_of((*ran, *unavailable),
                       complete=outcome is None or not outcome.interrupted)

    say(console.final_table(report), end="")
    write_files(settings.reports, report, texts)
    write_github(settings.reports, report)
    counts = report.counts
    if outcome is not None and outcome.interrupted:
        say(f"interrupted by {outcome.interrupted}: {counts['skipped']} cases not run; "
            "the reports say which", err=True)
        return 128 + int(signal.Signals[outcome.interrupted])
    return exit_code(report, settings.reports.fail_on, settings.allow_empty)


def _gpu_preflight(settings: RunSettings, cases: Sequence[Case], options: RunOptions,
                   ) -> tuple[list[CaseResult], tuple[Gpu, ...], PreflightRecord | None]:
    """Before any case on a GPU target, the preflight: its findings lead the reports, and with
    --skip-unavailable and no usable GPU those cases end skipped with its reason. Its GPUs go
    to the workers, which record which one each GPU case ran on."""
    gpu = [case for case in cases if any(p in GPU_PROVIDERS for p in case.target.providers)]
    if not gpu:  # nothing below is imported: a CPU run reads no machine fact
        return [], (), None
    from onnx_parity.backends import probe
    from onnx_parity.compare.chain import Skipped
    from onnx_parity.machine.preflight import preflight
    from onnx_parity.report.preflight import render_text

    checked = preflight(probe=probe.__name__,
                        providers=sorted({p for case in gpu for p in case.target.providers}))
    skip = bool(settings.skip_unavailable and not checked.usable)
    found = replace(checked.record(), gpu_cases=len(gpu),
                    skipped_cases=len(gpu) if skip else 0)
    say(render_text(found), end="", flush=True)
    if not skip:
        return [], checked.facts.driver.gpus, found
    message = f"no usable GPU here (--skip-unavailable): {found.reason}"
    return ([options.never_ran(case, Skipped(message)) for case in gpu],
            checked.facts.driver.gpus, found)


def _empty_shard(settings: RunSettings, selected: int, record: PlanRecord) -> int:
    """A shard left without a model still writes (empty) reports, so `merge` can count it."""
    from onnx_parity.machine.versions import read_versions  # as _run's: importlib.metadata

    say(f"{shown(settings.spec)}: shard {settings.shard} holds no case: the {selected} selected "
        "cases belong to fewer models than there are shards; nothing to check here", err=True)
    write_files(settings.reports, RunReport(spec_path=str(settings.spec),
                                            environment=read_versions(), cases=(),
                                            shard=str(settings.shard), plan=record))
    return EXIT_OK


def _spec_failed(settings: RunSettings, exc: SpecError) -> None:
    """A spec that cannot be used: every problem on the console, then the reports that can
    still say so (publish.write_spec_problems)."""
    for problem in exc.problems:
        say(f"error: {shown(problem)}", err=True)
    count = len(exc.problems)
    say(f"{shown(settings.spec)}: {count} problem{'s' * (count != 1)}; nothing was run", err=True)
    write_spec_problems(settings.reports, exc.problems, str(settings.spec))
