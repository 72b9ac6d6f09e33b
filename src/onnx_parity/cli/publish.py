"""`onnx-parity publish REPORT.json`: the pull request's comment, the job summary and the
annotations from a JSON report alone, for a step or a workflow that holds the token and never
runs model code (docs/security.md).

It imports neither torch nor ONNX nor ONNX Runtime, reads no spec and starts no process. The
report is untrusted data, written by a run of the pull request's own code: read within bounds
(report/jsonlimits.py), checked field by field (report/jsonfile.py), and escaped wherever it is
shown, as every report is. Exit 0 once published (the gate's verdict is the run's exit code, not
this one's), 2 when the report cannot be read.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from onnx_parity.literals import EXIT_OK, EXIT_USAGE


def add_parser(commands: Any) -> None:
    """`publish` among the command line's subcommands (cli/main.py)."""
    publish = commands.add_parser(
        "publish", help="post a JSON report's comment, job summary and annotations; imports "
                        "no torch and runs no model code (for the step that holds the token)")
    publish.add_argument("report", type=Path, metavar="REPORT.json",
                         help="the JSON report of `run` or `merge`")
    publish.add_argument("--comment", action="store_true",
                         help="on GitHub Actions, create or update the pull request's comment "
                              "(needs GITHUB_TOKEN with pull-requests: write)")
    publish.add_argument("--summary", type=Path, metavar="PATH",
                         help="append the Markdown summary here, e.g. \"$GITHUB_STEP_SUMMARY\"")
    publish.add_argument("--annotations", action="store_true",
                         help="on GitHub Actions, an ::error annotation on the spec line of "
                              "each model that drifted")


def publish_command(args: argparse.Namespace) -> int:
    # only when `publish` runs: cli/main.py imports this module for every command line
    from onnx_parity.report import github, summary
    from onnx_parity.report.jsonfile import ReportFormatError, read_json
    from onnx_parity.report.publish import (
        ReportSettings,
        github_output,
        repo_relative,
        say,
        shown,
        write_comment,
    )

    try:
        report = read_json(args.report)
    except (OSError, ReportFormatError) as exc:
        say(f"onnx-parity publish: error: {shown(exc)}", err=True)
        return EXIT_USAGE
    if args.summary:
        summary.write_summary(report, args.summary)
    if args.annotations:
        if github_output(ReportSettings()).annotations:
            for line in github.annotations(report, repo_relative(Path(report.spec_path))):
                print(line)
        else:
            say("--annotations: not on GitHub Actions, so none were printed", err=True)
    if args.comment:
        write_comment(github_output(ReportSettings(comment=True)), report)
    return EXIT_OK
