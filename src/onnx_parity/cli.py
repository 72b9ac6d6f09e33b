"""The command line: `run SPEC` and `schema`; exit 0 clean, 1 drift or error, 2 bad input."""

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
from typing import TYPE_CHECKING

from onnx_parity import __version__

if TYPE_CHECKING:
    from onnx_parity.plan import Case
    from onnx_parity.results import RunReport
    from onnx_parity.spec import Spec

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


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
    run.add_argument("--junit", type=Path, metavar="PATH", help="write JUnit XML here")
    run.add_argument("--json", type=Path, metavar="PATH", help="write the JSON report here")
    run.add_argument("--summary", type=Path, metavar="PATH",
                     help="append the Markdown summary here (on GitHub Actions it also goes to "
                          "$GITHUB_STEP_SUMMARY)")
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

    commands.add_parser("schema", help="print the spec's JSON Schema (for editors)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad usage and 0 on --help
        return int(exc.code or 0)
    if args.command == "schema":
        from onnx_parity.schema import spec_schema

        print(json.dumps(spec_schema(), indent=2))
        return EXIT_OK
    if args.command == "run" and args.jobs < 0:
        print("onnx-parity: error: --jobs must be 0 (automatic) or more", file=sys.stderr)
        return EXIT_USAGE
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    return run_command(args)


def run_command(args: argparse.Namespace) -> int:
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
    if args.list:
        print("\n".join(c.id for c in cases))
        return EXIT_OK
    if not cases:
        selection = f" matching {', '.join(args.select)}" if args.select else ""
        print(f"{args.spec}: no cases{selection}; nothing was checked", file=sys.stderr)
        return EXIT_OK if args.allow_empty else EXIT_FAILED
    if args.work_dir is not None:
        return _run(args, spec, cases, args.work_dir)
    with tempfile.TemporaryDirectory(prefix="onnx-parity-") as work:
        return _run(args, spec, cases, Path(work))


def _run(args: argparse.Namespace, spec: Spec, cases: Sequence[Case], work_dir: Path) -> int:
    import signal

    from onnx_parity.environment import collect
    from onnx_parity.pipeline import RunOptions, run_cases
    from onnx_parity.report import console
    from onnx_parity.results import CaseResult, RunReport

    started = time.perf_counter()
    environment = collect()
    finished: list[CaseResult] = []

    def report_of(results: Sequence[CaseResult]) -> RunReport:
        return RunReport(spec_path=str(args.spec), environment=environment, cases=tuple(results),
                         seconds=round(time.perf_counter() - started, 3))

    def on_result(case: CaseResult) -> None:
        finished.append(case)
        print(console.case_line(case), flush=True)
        # Reports land as cases finish: a job killed mid-run still leaves valid files.
        _write_files(args, report_of(finished))

    options = RunOptions(work_dir=work_dir, jobs=args.jobs)
    outcome = run_cases(spec, cases, options, on_result=on_result)
    report = report_of(outcome.results)
    print(console.final_table(report), end="")
    _write_files(args, report)
    _write_github(args, report)
    counts = report.counts
    if outcome.interrupted:
        print(f"interrupted by {outcome.interrupted}: {counts['skipped']} cases not run; "
              "the reports say which", file=sys.stderr)
        return 128 + int(signal.Signals[outcome.interrupted])
    if counts["failed"] or counts["error"]:
        return EXIT_FAILED
    if not counts["passed"] and not args.allow_empty:
        print(f"{args.spec}: every case was skipped; nothing was checked", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _write_files(args: argparse.Namespace, report: RunReport) -> None:
    from onnx_parity.report import jsonfile, junit

    if args.json:
        jsonfile.write_json(report, args.json)
    if args.junit:
        junit.write_junit(report, args.junit)


def _write_github(args: argparse.Namespace, report: RunReport) -> None:
    from onnx_parity.report import github

    if args.summary:
        github.write_summary(report, args.summary)
    if os.environ.get("GITHUB_ACTIONS") == "true":
        for line in github.annotations(report, _repo_relative(args.spec)):
            print(line)
        step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if step_summary:
            github.write_summary(report, Path(step_summary))


def _repo_relative(path: Path) -> str:
    """Annotations need the path from the repository root, which GitHub calls the workspace."""
    root = Path(os.environ.get("GITHUB_WORKSPACE") or Path.cwd()).resolve()
    try:
        return path.resolve().relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()
