"""The command line: `run SPEC`, `merge`, `doctor`, `schema`; exit 0 clean, 1 drift or error."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from onnx_parity import __version__

if TYPE_CHECKING:
    from onnx_parity.baseline import Baseline
    from onnx_parity.environment import Gpu
    from onnx_parity.plan import Case
    from onnx_parity.pool import Pool
    from onnx_parity.results import CaseResult, RunReport
    from onnx_parity.shard import Shard
    from onnx_parity.spec import Spec

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
FAIL_ON = ("drift", "error", "never")


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
                     help="refuse a case whose random inputs would exceed this (default 2048)")
    run.add_argument("--list", action="store_true", help="print the selected case ids and exit")
    run.add_argument("--allow-empty", action="store_true",
                     help="exit 0 when the selection holds no case (default: that fails)")
    run.add_argument("-v", "--verbose", action="store_true", help="log each stage")
    run.add_argument("--localize", choices=("never", "failed", "always"), default="failed",
                     help="find the first ONNX node where the drift starts, with one extra run "
                          "keeping every intermediate tensor: for failed cases (default), every "
                          "case, or never")
    run.add_argument("--artifacts", type=Path, metavar="DIR",
                     help="write a repro bundle per failed case here: model, inputs, both "
                          "sides' outputs, the subgraph where the drift starts, and a spec that "
                          "re-runs the check on the bundle alone")
    run.add_argument("--targets", type=_names, metavar="NAME,...",
                     help="only cases on these targets, e.g. 'cpu' or 'cpu,cuda'")
    run.add_argument("--shard", type=_shard, metavar="K/N",
                     help="run only shard K of N (whole models, balanced by case count); "
                          "join the shards' JSON reports with `onnx-parity merge`")
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

    commands.add_parser("schema", help="print the spec's JSON Schema (for editors)")

    doctor = commands.add_parser("doctor", help="check the GPU, driver, CUDA and cuDNN that "
                                 "ONNX Runtime needs here, with a fix for each problem")
    doctor.add_argument("--json", action="store_true", help="print the findings as JSON")
    doctor.add_argument("--no-probe", action="store_true",
                        help="judge from the facts alone; do not start a CUDA session")
    return parser


def _add_report_options(command: argparse.ArgumentParser) -> None:
    """The report files `run` and `merge` both write (see _write_files and _write_github)."""
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


def _names(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    if not names:
        raise argparse.ArgumentTypeError("expected one or more names separated by commas")
    return names


def _shard(text: str) -> Shard:
    from onnx_parity.shard import parse_shard

    try:
        return parse_shard(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad usage and 0 on --help
        return int(exc.code or 0)
    if args.command == "schema":
        from onnx_parity.spec import spec_schema

        print(json.dumps(spec_schema(), indent=2))
        return EXIT_OK
    if args.command == "merge":
        return merge_command(args)
    if args.command == "doctor":
        return doctor_command(args)
    if args.command == "run" and args.jobs < 0:
        print("onnx-parity: error: --jobs must be 0 (automatic) or more", file=sys.stderr)
        return EXIT_USAGE
    # Under -v each line is a stage of a case, led by the case id (workers send them).
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(message)s" if args.verbose else "%(levelname)s: %(message)s")
    return run_command(args)


def run_command(args: argparse.Namespace) -> int:
    from onnx_parity.pool import Pool

    # The first worker starts now: its imports overlap the reading of the spec.
    pool = Pool(prestart=not args.list)
    try:
        return _plan_and_run(args, pool)
    finally:
        pool.close()


def _plan_and_run(args: argparse.Namespace, pool: Pool) -> int:
    from onnx_parity.errors import SpecError
    from onnx_parity.plan import plan
    from onnx_parity.spec import load_spec

    try:
        spec = load_spec(args.spec)
    except SpecError as exc:
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        count = len(exc.problems)
        print(f"{args.spec}: {count} problem{'s' * (count != 1)}; nothing was run",
              file=sys.stderr)
        return EXIT_USAGE
    cases = plan(spec, args.select, input_budget=int(args.max_input_mb * (1 << 20)))
    if args.targets:
        unknown = [name for name in args.targets if name not in spec.targets]
        if unknown:
            print(f"{args.spec}: --targets: no target named {', '.join(unknown)}; the spec has "
                  f"{', '.join(spec.targets)}", file=sys.stderr)
            return EXIT_USAGE
        cases = tuple(c for c in cases if c.target.name in args.targets)
    selected = len(cases)
    against = _baseline(args, cases) if args.baseline is not None else None
    if args.shard is not None:
        from onnx_parity.shard import shard_cases

        cases = shard_cases(cases, args.shard)
    if args.list:
        print("\n".join(c.id for c in cases))
        return EXIT_OK
    if not cases and selected:
        return _empty_shard(args, selected)
    if not cases:
        selection = f" matching {', '.join(args.select)}" if args.select else ""
        if args.targets:
            selection += f" on {', '.join(args.targets)}"
        print(f"{args.spec}: no cases{selection}; nothing was checked", file=sys.stderr)
        return EXIT_OK if args.allow_empty or args.fail_on == "never" else EXIT_FAILED
    if args.work_dir is not None:
        return _run(args, spec, cases, args.work_dir, pool, against)
    with tempfile.TemporaryDirectory(prefix="onnx-parity-") as work:
        return _run(args, spec, cases, Path(work), pool, against)


def _baseline(args: argparse.Namespace, cases: Sequence[Case]) -> tuple[Baseline, list[str]]:
    """The baseline report, and its cases that this selection would have checked but the spec
    no longer plans (before sharding, so that every shard names the same ones)."""
    from onnx_parity.baseline import gone_cases, load
    from onnx_parity.plan import selects

    baseline = load(str(args.baseline))
    if not baseline.usable:
        from onnx_parity.report.escape import one_line

        print(f"warning: regression check not done: {one_line(baseline.problem)}",
              file=sys.stderr)
        return baseline, []
    gone = gone_cases(baseline, [case.id for case in cases],
                      lambda old: selects(old.id, args.select)
                      and (not args.targets or old.target in args.targets))
    return baseline, gone


def _run(args: argparse.Namespace, spec: Spec, cases: Sequence[Case], work_dir: Path,
         pool: Pool, against: tuple[Baseline, list[str]] | None = None) -> int:
    import signal

    from onnx_parity.environment import collect
    from onnx_parity.pipeline import RunOptions, run_cases
    from onnx_parity.report import console
    from onnx_parity.report.live import LiveReports
    from onnx_parity.results import RunReport

    started = time.perf_counter()
    environment = collect()
    if args.shard is not None:  # `merge` checks that every shard of the run is there
        from onnx_parity.shard import SHARD_KEY

        environment[SHARD_KEY] = str(args.shard)
    unavailable, gpus = _gpu_preflight(args, cases, environment)
    order = {case.id: index for index, case in enumerate(cases)}

    compared = _Comparison(against, environment, cases)

    def report_of(results: Sequence[CaseResult]) -> RunReport:
        return RunReport(spec_path=str(args.spec), environment=environment, cases=tuple(results),
                         seconds=round(time.perf_counter() - started, 3),
                         baseline=compared.record)

    # Reports land as cases finish: a job killed mid-run still leaves valid files.
    live = LiveReports(lambda report: _write_files(args, report), report_of)

    width = console.terminal_width()

    judged: dict[str, CaseResult] = {}

    def on_result(result: CaseResult) -> None:
        case = compared.judge(result)
        judged[case.id] = case
        print(console.case_line(case, width), flush=True)
        live.add(case)

    for result in unavailable:
        on_result(result)
    options = RunOptions(work_dir=work_dir, jobs=args.jobs, localize=args.localize,
                         artifacts=args.artifacts, gpus=gpus, verbose=args.verbose)
    skipping = {r.id for r in unavailable}
    runnable = [case for case in cases if case.id not in skipping]
    outcome = (run_cases(spec, runnable, options, on_result, pool, live.tick)
               if runnable else None)
    ran = [judged[result.id] for result in outcome.results] if outcome is not None else ()
    report = report_of(sorted((*ran, *unavailable), key=lambda r: order[r.id]))
    print(console.final_table(report), end="")
    _write_files(args, report)
    _write_github(args, report)
    counts = report.counts
    if outcome is not None and outcome.interrupted:
        print(f"interrupted by {outcome.interrupted}: {counts['skipped']} cases not run; "
              "the reports say which", file=sys.stderr)
        return 128 + int(signal.Signals[outcome.interrupted])
    return _verdict(report, args.fail_on, args.allow_empty)


class _Comparison:
    """The regression check of a run: judges each result against the baseline (as is without
    one) and holds the run's record of it."""

    def __init__(self, against: tuple[Baseline, list[str]] | None,
                 environment: dict[str, Any], cases: Sequence[Case]) -> None:
        from onnx_parity.baseline import run_record

        self.baseline = against[0] if against is not None else None
        self.record = (run_record(against[0], environment, against[1])
                       if against is not None else {})
        self.regression = {case.id: case.model.regression for case in cases}

    def judge(self, result: CaseResult) -> CaseResult:
        if self.baseline is None:
            return result
        from onnx_parity.baseline import judge

        return judge(result, self.regression.get(result.id), self.baseline)


def _gpu_preflight(args: argparse.Namespace, cases: Sequence[Case], environment: dict[str, Any],
                   ) -> tuple[list[CaseResult], tuple[Gpu, ...]]:
    """Before any case on a GPU target, the preflight: its findings lead the reports, and with
    --skip-unavailable and no usable GPU those cases end skipped with its reason. Its GPUs go
    to the workers, which record which one each GPU case ran on."""
    from onnx_parity.doctor import preflight, wants_gpu
    from onnx_parity.pipeline import skipped
    from onnx_parity.report.preflight import render_text

    gpu = [case for case in cases if wants_gpu(case.target.providers)]
    if not gpu:
        return [], ()
    checked = preflight()
    found = checked.as_dict()
    skip = bool(args.skip_unavailable and not found["usable"])
    found.update(gpu_cases=len(gpu), skipped_cases=len(gpu) if skip else 0)
    environment["preflight"] = found
    print(render_text(found), end="", flush=True)
    if not skip:
        return [], checked.facts.driver.gpus
    message = f"no usable GPU here (--skip-unavailable): {found['reason']}"
    return [skipped(case, message) for case in gpu], checked.facts.driver.gpus


def doctor_command(args: argparse.Namespace) -> int:
    """Exit 0 when CUDA is usable here, 1 when it is not."""
    from onnx_parity.doctor import preflight
    from onnx_parity.report.preflight import render_text

    found = preflight(probe=not args.no_probe).as_dict()
    print(json.dumps(found, indent=2) if args.json else render_text(found), end="\n" * args.json)
    return EXIT_OK if found["usable"] else EXIT_FAILED


def _verdict(report: RunReport, fail_on: str, allow_empty: bool = False) -> int:
    """The exit code `--fail-on` asks for. The reports are written whatever it is."""
    counts = report.counts
    if fail_on == "never":
        return EXIT_OK
    if counts["error"] or (counts["failed"] and fail_on == "drift"):
        return EXIT_FAILED
    if not counts["passed"] and not counts["failed"] and not allow_empty:
        print(f"{report.spec_path}: every case was skipped; nothing was checked", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _empty_shard(args: argparse.Namespace, selected: int) -> int:
    """A shard left without a model still writes (empty) reports, so `merge` can count it."""
    from onnx_parity.environment import collect
    from onnx_parity.results import RunReport
    from onnx_parity.shard import SHARD_KEY

    print(f"{args.spec}: shard {args.shard} holds no case: the {selected} selected cases belong "
          "to fewer models than there are shards; nothing to check here", file=sys.stderr)
    environment = {**collect(), SHARD_KEY: str(args.shard)}
    _write_files(args, RunReport(spec_path=str(args.spec), environment=environment, cases=()))
    return EXIT_OK


def merge_command(args: argparse.Namespace) -> int:
    from onnx_parity.report import console
    from onnx_parity.report.jsonfile import ReportFormatError, read_json
    from onnx_parity.shard import MergeError, merge_reports

    try:
        reports = [(str(path), read_json(path)) for path in args.reports]
        report = merge_reports(reports)
    except (OSError, ReportFormatError, MergeError) as exc:
        print(f"onnx-parity merge: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"merged {len(reports)} report{'s' * (len(reports) != 1)}: {len(report.cases)} cases "
          f"from {report.spec_path}")
    print(console.final_table(report), end="")
    _write_files(args, report)
    _write_github(args, report)
    return _verdict(report, args.fail_on)


def _write_files(args: argparse.Namespace, report: RunReport) -> None:
    from onnx_parity.report import jsonfile, junit

    if args.json:
        jsonfile.write_json(report, args.json)
    if args.junit:
        junit.write_junit(report, args.junit)


def _write_github(args: argparse.Namespace, report: RunReport) -> None:
    from onnx_parity.report import github, summary

    if args.summary:
        summary.write_summary(report, args.summary)
    if os.environ.get("GITHUB_ACTIONS") == "true":
        spec_file = _repo_relative(Path(report.spec_path))
        for line in github.baseline_warning(report, spec_file):
            print(line)
        if not args.no_annotations:
            for line in github.annotations(report, spec_file):
                print(line)
        step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if step_summary and not args.no_step_summary:
            summary.write_summary(report, Path(step_summary))


def _repo_relative(path: Path) -> str:
    """Annotations need the path from the repository root, which GitHub calls the workspace."""
    root = Path(os.environ.get("GITHUB_WORKSPACE") or Path.cwd()).resolve()
    try:
        return path.resolve().relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()
