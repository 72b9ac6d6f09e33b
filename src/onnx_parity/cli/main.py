"""The command line: `run SPEC`, `merge`, `publish`, `doctor`, `schema`; exit 0 clean, 1 drift or
error."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from onnx_parity import __version__
from onnx_parity.cli.publish import add_parser as add_publish_parser
from onnx_parity.literals import CAUSES, EXIT_FAILED, EXIT_OK, EXIT_USAGE, FAIL_ON, LOCALIZE

if TYPE_CHECKING:
    from onnx_parity.cli.run import RunSettings
    from onnx_parity.plan.shard import Shard
    from onnx_parity.prepare.cache import ExportCache
    from onnx_parity.report.publish import ReportSettings
    from onnx_parity.run.pool import Pool

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "build_parser", "entry", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="onnx-parity",
        description="Check that PyTorch models and their ONNX exports agree, as a merge gate.",
    )
    parser.add_argument("--version", action="version", version=f"onnx-parity {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="export, run and compare every case of a spec")
    run.add_argument("spec", type=Path, help="the YAML spec, e.g. parity.yaml")
    run.add_argument("--select", action="append", default=[], metavar="GLOB",
                     help="only cases whose id matches (repeatable), e.g. 'mlp[opset17-*'")
    _add_report_options(run)
    run.add_argument("--jobs", type=int, default=0, metavar="N",
                     help="models checked at once, each in its own process (default: one per"
                          " core, fewer when memory is short)")
    run.add_argument("--work-dir", type=Path, metavar="DIR",
                     help="keep exported models here (default: a temporary folder)")
    run.add_argument("--max-input-mb", type=float, default=2048, metavar="MB",
                     help="refuse a case whose inputs would exceed this, random ones before "
                          "they are made, recorded ones before they are read (default 2048)")
    run.add_argument("--allow-outside-repo", action="store_true",
                     help="let the spec's paths (ONNX files, data, custom op libraries, "
                          "provider caches, factories) lead outside its repository, symlinks "
                          "resolved (default: a spec error); see docs/security.md")
    run.add_argument("--list", action="store_true", help="print the selected case ids and exit")
    run.add_argument("--allow-empty", action="store_true",
                     help="exit 0 when the selection holds no case (default: that fails)")
    run.add_argument("-v", "--verbose", action="store_true", help="log each stage")
    run.add_argument("--localize", choices=LOCALIZE, default="failed",
                     help="find the first ONNX node where the drift starts, with one extra run "
                          "keeping every intermediate tensor: for failed cases (default), every "
                          "case, or never")
    run.add_argument("--causes", choices=CAUSES, default="failed",
                     help="try each suspected cause of a failure with one second run (stale "
                          "weights, TF32, int8 saturation, the other exporter): for failed "
                          "cases (default), or never")
    run.add_argument("--cache", type=Path, metavar="DIR",
                     help="keep exports and reduced-precision variants here, and reuse them "
                          "while nothing that can change them changed (the module's weights, "
                          "its source files, the spec's settings for it, the tools' versions)")
    run.add_argument("--cache-max-mb", type=float, default=2048, metavar="MB",
                     help="the cache's size cap; the least recently used entries go first "
                          "(default 2048)")
    run.add_argument("--artifacts", type=Path, metavar="DIR",
                     help="write a repro bundle per failed case here: model, inputs, both "
                          "sides' outputs, the subgraph where the drift starts, and a spec that "
                          "re-runs the check on the bundle alone")
    run.add_argument("--profile", action="store_true",
                     help="profile ONNX Runtime on each case: its five costliest nodes and their "
                          "providers in the summary, the profile itself kept under --artifacts")
    run.add_argument("--targets", type=_names, metavar="NAME,...",
                     help="only cases on these targets, e.g. 'cpu' or 'cpu,cuda'")
    run.add_argument("--shard", type=_shard, metavar="K/N",
                     help="run only shard K of N (whole models, balanced by case count, or by "
                          "seconds with --durations); join the shards' JSON reports with "
                          "`onnx-parity merge`. `auto` (or auto/N) reads K and N from the CI "
                          "runner: Buildkite's BUILDKITE_PARALLEL_JOB(_COUNT), GitLab's "
                          "CI_NODE_INDEX/CI_NODE_TOTAL, or a Kubernetes indexed job's "
                          "JOB_COMPLETION_INDEX with N in ONNX_PARITY_SHARDS")
    run.add_argument("--durations", type=Path, metavar="REPORT.json",
                     help="with --shard: balance the shards by each model's seconds in this "
                          "earlier JSON report (a model it lacks counts as the median)")
    run.add_argument("--baseline", type=Path, metavar="REPORT.json",
                     help="compare with an earlier run's JSON report (the base branch's): a case "
                          "whose error grew by the model's regression factor (default 10x) "
                          "fails even within tolerance; a missing or unreadable report is a "
                          "warning, and the reports say the check was not done")
    run.add_argument("--skip-unavailable", action="store_true",
                     help="when the GPU preflight finds no usable GPU, mark cases on GPU targets "
                          "skipped with its reason (default: they run, and each target's "
                          "fallback policy decides)")
    _add_gate_options(run)

    merge = commands.add_parser("merge", help="join shard JSON reports into one set of reports")
    merge.add_argument("reports", type=Path, nargs="+", metavar="REPORT.json",
                       help="the JSON reports of every shard of one run")
    _add_report_options(merge)
    _add_gate_options(merge)

    add_publish_parser(commands)

    commands.add_parser("schema", help="print the spec's JSON Schema (for editors)")

    doctor = commands.add_parser("doctor", help="check the GPU, driver, CUDA and cuDNN that "
                                 "ONNX Runtime needs here, with a fix for each problem")
    doctor.add_argument("--json", action="store_true", help="print the findings as JSON")
    doctor.add_argument("--no-probe", action="store_true",
                        help="judge from the facts alone; do not start a CUDA session")
    return parser


def _add_report_options(command: argparse.ArgumentParser) -> None:
    """The report files `run` and `merge` both write (see write_files and write_github)."""
    command.add_argument("--junit", type=Path, metavar="PATH", help="write JUnit XML here")
    command.add_argument("--json", type=Path, metavar="PATH", help="write the JSON report here")
    command.add_argument("--summary", type=Path, metavar="PATH",
                         help="append the Markdown summary here (on GitHub Actions it also goes "
                              "to $GITHUB_STEP_SUMMARY)")


def _add_gate_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("--fail-on", choices=FAIL_ON, default="drift",
                         help="exit 1 on drift: any failed or errored case (default); on error: "
                              "errored cases only; never: always exit 0, reports still written")
    command.add_argument("--no-annotations", action="store_true",
                         help="on GitHub Actions, print no ::error annotations")
    command.add_argument("--no-step-summary", action="store_true",
                         help="on GitHub Actions, do not append to $GITHUB_STEP_SUMMARY")
    command.add_argument("--comment", action="store_true",
                         help="on GitHub Actions, create or update one comment on the pull "
                              "request: the counts and what changed against the baseline "
                              "(needs GITHUB_TOKEN with pull-requests: write; a shard does not "
                              "comment, `merge` does; a failed API call is a warning)")


def _names(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    if not names:
        raise argparse.ArgumentTypeError("expected one or more names separated by commas")
    return names


def _shard(text: str) -> Shard:
    import os

    from onnx_parity.plan.shard import is_auto, parse_shard, shard_from_environment

    try:
        return shard_from_environment(text, os.environ) if is_auto(text) else parse_shard(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _cache(args: argparse.Namespace) -> ExportCache | None:
    if args.cache is None:
        return None
    from onnx_parity.prepare.cache import ExportCache

    return ExportCache(args.cache, max_bytes=int(args.cache_max_mb * (1 << 20)))


def entry() -> NoReturn:
    """`onnx-parity` and `python -m onnx_parity`: main(), then the process ends at once.

    When main returns, the command has done all it owes: its reports written and closed, its
    workers stopped, its temporary folders removed. What is left is the interpreter taking down
    every module it imported, about 40 ms of a small check; it is skipped once the log and the
    console's streams are flushed."""
    code = main()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: Python's own exit says 120 then
            code = code or 120
    os._exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["run"]:
        return _run_command_line(words)
    args = _parsed(words)
    if isinstance(args, int):
        return args
    if args.command == "schema":
        import json

        from onnx_parity.spec import spec_schema

        print(json.dumps(spec_schema(), indent=2))
        return EXIT_OK
    if args.command == "merge":
        return merge_command(args.reports, report_settings(args))
    if args.command == "doctor":
        return doctor_command(args)
    if args.command == "publish":
        from onnx_parity.cli.publish import publish_command

        return publish_command(args)
    return _run_command_line(words)  # `run` after words argparse skips, such as `--`


def _parsed(words: Sequence[str]) -> argparse.Namespace | int:
    """The command line read, or the exit code when argparse ended it (2 on bad usage, 0 on
    --help and --version, its words printed)."""
    try:
        return build_parser().parse_args(words)
    except SystemExit as exc:
        return int(exc.code or 0)


def _run_command_line(words: Sequence[str]) -> int:
    """`onnx-parity run ...`. Its first workers start before anything else, the command line's
    parser included (10 ms): their own imports (numpy, onnx, ONNX Runtime) overlap the reading
    of the command line and the spec, and a forked one starts with no more than the command
    line's modules in its memory (run/pool.py). A command line the parser then refuses ends
    them unused."""
    # Before anything starts a process: no worker, and no model, inherits the job's tokens.
    from onnx_parity.run.isolation import guarded, withhold

    held = withhold(os.environ)
    from onnx_parity.run.pool import Pool

    # Around every worker's life: model code can neither read this process (its first
    # environment may hold what was withheld) nor outlive it (run/isolation.py).
    with guarded(holding=bool(held)):
        pool = Pool(prestart=_prestarted(words), fork=not held)
        try:
            args = _parsed(words)
            if isinstance(args, int):
                return args
            kept = {"GITHUB_TOKEN": held["GITHUB_TOKEN"]} \
                if args.comment and "GITHUB_TOKEN" in held else {}
            return _run(args, kept, pool)
        finally:
            pool.close()


def _prestarted(words: Sequence[str]) -> int:
    """The workers started before the command line is parsed, read from its words: none for
    --list or --help; as many as an explicit --jobs asks for, up to one per core (a large
    suite's workers then import numpy, onnx and ONNX Runtime while the spec is read, not
    after); else one (the planner decides the rest, and a small check needs no second). A
    word this misreads costs time, never a result: the pool starts what the plan needs."""
    if {"--list", "-h", "--help"} & set(words):
        return 0
    jobs = ""
    for word, following in zip(words, [*words[1:], ""], strict=True):
        if word == "--jobs":
            jobs = following
        elif word.startswith("--jobs="):
            jobs = word.removeprefix("--jobs=")
    asked = int(jobs) if jobs.isdigit() else 0
    return min(asked, os.cpu_count() or 1) if asked > 1 else 1


def _run(args: argparse.Namespace, kept: Mapping[str, str], pool: Pool) -> int:
    from onnx_parity.report.publish import say

    try:
        settings = run_settings(args, kept)
    except ValueError as exc:
        say(f"onnx-parity: error: {exc}", err=True)
        return EXIT_USAGE
    # Under -v each line is a stage of a case, led by the case id (workers send them).
    handler = logging.StreamHandler()
    handler.setFormatter(_SafeFormatter("%(message)s" if settings.verbose
                                        else "%(levelname)s: %(message)s"))
    logging.basicConfig(level=logging.DEBUG if settings.verbose else logging.WARNING,
                        handlers=[handler])
    from onnx_parity.cli.run import run_command

    return run_command(settings, pool)


def report_settings(args: argparse.Namespace,
                    credentials: Mapping[str, str] | None = None) -> ReportSettings:
    """The report and gate options `run` and `merge` share, from their flags."""
    from onnx_parity.report.publish import ReportSettings

    return ReportSettings(json=args.json, junit=args.junit, summary=args.summary,
                          fail_on=args.fail_on, annotations=not args.no_annotations,
                          step_summary=not args.no_step_summary, comment=args.comment,
                          credentials=dict(credentials or {}))


def run_settings(args: argparse.Namespace,
                 credentials: Mapping[str, str] | None = None) -> RunSettings:
    """`run`'s flags as settings: the one place that reads them; a ValueError says what is
    wrong with a value the parser let through. `credentials`: the comment's token, held since
    it left the environment."""
    from onnx_parity.cli.run import RunSettings
    from onnx_parity.plan.select import Selection

    return RunSettings(
        spec=args.spec, selection=Selection(tuple(args.select), args.targets or ()),
        reports=report_settings(args, credentials), jobs=args.jobs,
        input_budget=int(args.max_input_mb * (1 << 20)), localize=args.localize,
        causes=args.causes, work_dir=args.work_dir, artifacts=args.artifacts, shard=args.shard,
        durations=args.durations,
        baseline=args.baseline, list_only=args.list, allow_empty=args.allow_empty,
        skip_unavailable=args.skip_unavailable, verbose=args.verbose,
        profile=args.profile,
        cache=_cache(args), allow_outside_repo=args.allow_outside_repo)


class _SafeFormatter(logging.Formatter):
    """Log lines carry user text (case ids, exporter messages): none may be a workflow
    command."""

    def format(self, record: logging.LogRecord) -> str:
        from onnx_parity.escape import console_lines

        return console_lines(super().format(record))


def doctor_command(args: argparse.Namespace) -> int:
    """Exit 0 when CUDA is usable here, 1 when it is not."""
    import json

    from onnx_parity.backends import probe
    from onnx_parity.machine.preflight import preflight
    from onnx_parity.report.preflight import render_text
    from onnx_parity.report.preflightjson import preflight_dict
    from onnx_parity.report.publish import say

    found = preflight(probe=None if args.no_probe else probe.__name__).record()
    if args.json:
        print(json.dumps(preflight_dict(found), indent=2))
    else:
        say(render_text(found), end="")
    return EXIT_OK if found.usable else EXIT_FAILED


def merge_command(paths: Sequence[Path], settings: ReportSettings) -> int:
    from onnx_parity.plan.merge import MergeError, merge_reports
    from onnx_parity.report import console
    from onnx_parity.report.jsonfile import ReportFormatError, read_json
    from onnx_parity.report.publish import exit_code, say, shown, write_files, write_github

    try:
        reports = [(str(path), read_json(path)) for path in paths]
        report = merge_reports(reports)
    except (OSError, ReportFormatError, MergeError) as exc:
        say(f"onnx-parity merge: error: {shown(str(exc))}", err=True)
        return EXIT_USAGE
    say(f"merged {len(reports)} report{'s' * (len(reports) != 1)}: {len(report.cases)} cases "
        f"from {shown(report.spec_path)}")
    for name, shard in reports:
        if not shard.complete:
            say(f"warning: {shown(name)} comes from a run that did not finish: the merged "
                "report says so, and its cases that did not end count as errors", err=True)
    say(console.final_table(report), end="")
    write_files(settings, report)
    write_github(settings, report)
    return exit_code(report, settings.fail_on)
