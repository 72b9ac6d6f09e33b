"""What a person and GitHub see of a run: console lines that can never be workflow commands,
the report files the flags ask for, the annotations and job summary on GitHub, the exit code."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from onnx_parity.results import RunReport

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
FAIL_ON = ("drift", "error", "never")


def say(text: str, *, err: bool = False, end: str = "\n", flush: bool = False) -> None:
    """Print for a person: no line of it can be a workflow command, whatever user text it holds
    (GitHub Actions reads them from stdout and stderr alike)."""
    from onnx_parity.escape import console_lines

    print(console_lines(text), end=end, flush=flush, file=sys.stderr if err else sys.stdout)


def shown(value: object) -> str:
    """User text (a path, a name, a message) inside one line, control characters escaped."""
    from onnx_parity.escape import visible

    return visible(str(value))


def write_files(args: argparse.Namespace, report: RunReport) -> None:
    from onnx_parity.report import jsonfile, junit

    if args.json:
        jsonfile.write_json(report, args.json)
    if args.junit:
        junit.write_junit(report, args.junit)


def write_github(args: argparse.Namespace, report: RunReport) -> None:
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


def exit_code(report: RunReport, fail_on: str, allow_empty: bool = False) -> int:
    """The exit code `--fail-on` asks for. The reports are written whatever it is."""
    counts = report.counts
    if fail_on == "never":
        return EXIT_OK
    if counts["error"] or (counts["failed"] and fail_on == "drift"):
        return EXIT_FAILED
    if not counts["passed"] and not counts["failed"] and not allow_empty:
        say(f"{shown(report.spec_path)}: every case was skipped; nothing was checked",
             err=True)
        return EXIT_FAILED
    return EXIT_OK
