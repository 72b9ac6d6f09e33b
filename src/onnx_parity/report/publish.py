"""What a person and GitHub see of a run: console lines that can never be workflow commands,
the report files the flags ask for, the annotations and job summary on GitHub, the exit code."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from onnx_parity.escape import console_lines, visible
from onnx_parity.frozen import frozen
from onnx_parity.literals import EXIT_FAILED, EXIT_OK

if TYPE_CHECKING:
    from onnx_parity.errors import SpecProblem
    from onnx_parity.literals import FailOn
    from onnx_parity.report.texts import CaseTexts
    from onnx_parity.results import CaseResult, RunReport



@frozen
class ReportSettings:
    """Where a run's reports go and what fails the gate: what `run` and `merge` share."""

    json: Path | None = None
    junit: Path | None = None
    summary: Path | None = None  # the Markdown summary is appended here
    fail_on: FailOn = "drift"
    annotations: bool = True  # on GitHub Actions, `::error` annotations on the spec
    step_summary: bool = True  # on GitHub Actions, the summary in $GITHUB_STEP_SUMMARY too
    comment: bool = False  # on GitHub Actions, the pull request's comment (`--comment`)
    # The comment's token, taken out of the environment before any worker started
    # (run/isolation.py) and kept here alone; empty: the environment's.
    credentials: Mapping[str, str] = field(default_factory=dict, repr=False)


@frozen
class GitHubOutput:
    """What goes to GitHub itself, beside the report files; nothing outside GitHub Actions."""

    # Workflow commands are read: the `::warning` that a check was not done goes out whatever
    # --no-annotations says, since the run must not look as if the check had passed.
    commands: bool = False
    annotations: bool = False  # `::error` on the spec's lines, implies `commands`
    step_summary: Path | None = None  # the job summary to append to
    comment: bool = False  # create or update the pull request's comment


def github_output(settings: ReportSettings,
                  env: Mapping[str, str] = os.environ) -> GitHubOutput:
    """The one place that decides what of a run, or of a spec that cannot be used, GitHub gets:
    workflow commands only when GitHub Actions runs us (elsewhere they are noise in a log), the
    job summary only when the runner names its file."""
    if env.get("GITHUB_ACTIONS") != "true":
        return GitHubOutput()
    step_summary = env.get("GITHUB_STEP_SUMMARY")
    return GitHubOutput(commands=True, annotations=settings.annotations,
                        step_summary=Path(step_summary)
                        if step_summary and settings.step_summary else None,
                        comment=settings.comment)


def say(text: str, *, err: bool = False, end: str = "\n", flush: bool = False) -> None:
    """Print for a person: no line of it can be a workflow command, whatever user text it holds
    (GitHub Actions reads them from stdout and stderr alike)."""
    print(console_lines(text), end=end, flush=flush, file=sys.stderr if err else sys.stdout)


def shown(value: object) -> str:
    """User text (a path, a name, a message) inside one line, control characters escaped."""
    return visible(str(value))


def write_files(settings: ReportSettings, report: RunReport,
                texts: CaseTexts | None = None) -> None:
    """The report files the settings ask for. `texts`: each case's part of them, kept from one
    write of a run's reports to the next (report/texts.py)."""
    # Each writer is imported only when its file is asked for: a run without reports pays none.
    # JUnit first: a run killed between the two leaves a JSON report no newer than the JUnit
    # one, so whoever waits on the JSON report finds the JUnit one written too.
    if settings.junit:
        from onnx_parity.report import junit

        junit.write_junit(report, settings.junit, texts)
    if settings.json:
        from onnx_parity.report import jsonfile

        jsonfile.write_json(report, settings.json, texts)
    if texts is not None:
        texts.keep(report.cases)


def make_parts(settings: ReportSettings, case: CaseResult, spec_path: str,
               texts: CaseTexts) -> None:
    """A case's parts of the report files the settings ask for, made into `texts` as its
    result comes in, between the workers' results: the next write joins them."""
    if settings.junit:
        from onnx_parity.report import junit

        junit.testcase(case, spec_path, texts)
    if settings.json:
        from onnx_parity.report import jsonfile

        jsonfile.case_line(case, texts)


def suite_maker(settings: ReportSettings, spec_path: str, environment: Mapping[str, Any],
                shard: str | None = None,
                ) -> Callable[[str, Sequence[CaseResult], CaseTexts], None]:
    """What makes a model's JUnit testsuite into `texts` once its last case has ended, while
    the run goes on: the reports' last write, after the workers' last result, then joins the
    suites rather than make them all (0.1 s for 1,884 models). Nothing where no JUnit report
    is asked for."""
    if not settings.junit:
        return lambda model, cases, texts: None
    from onnx_parity.report import junit  # as write_files: only where JUnit is asked for

    head = junit.suite_head(spec_path, environment, shard)

    def make(model: str, cases: Sequence[CaseResult], texts: CaseTexts) -> None:
        junit.model_suite(head, model, cases, spec_path, texts)

    return make


def write_github(settings: ReportSettings, report: RunReport) -> None:
    output = github_output(settings)
    if settings.summary or output.step_summary:
        from onnx_parity.report import summary  # each writer only where its output is asked for
    if settings.summary:
        summary.write_summary(report, settings.summary)
    if output.commands:
        from onnx_parity.report import github

        spec_file = repo_relative(Path(report.spec_path))
        for line in github.baseline_warning(report, spec_file):
            print(line)
        if output.annotations:
            for line in github.annotations(report, spec_file):
                print(line)
    if output.step_summary:
        summary.write_summary(report, output.step_summary)
    if settings.comment:
        write_comment(output, report, settings.credentials)


def write_comment(output: GitHubOutput, report: RunReport,
                  credentials: Mapping[str, str] | None = None) -> None:
    """The pull request's comment: posted by an unsharded run or by `merge`, never by a shard
    (each would overwrite the others'). Whatever the API answers, one line says it, and the
    gate is not touched."""
    if not output.comment:
        say("--comment: not on GitHub Actions, so no comment was posted", err=True)
        return
    if report.shard is not None:
        say(f"--comment: shard {shown(report.shard)} does not comment; `onnx-parity merge "
            "--comment` posts the comment for the whole run", err=True)
        return
    from onnx_parity.report.pullrequest import publish_comment  # only where a comment is asked for

    say(f"onnx-parity: {shown(publish_comment(report, {**os.environ, **(credentials or {})}))}",
        err=True)


def write_spec_problems(settings: ReportSettings, problems: Sequence[SpecProblem],
                        spec_path: str) -> None:
    """The reports of a spec that cannot be used: the JUnit file with a failing `spec`
    testcase, the summary, and on GitHub an annotation on each problem's line and column. No
    JSON report: nothing ran."""
    # a spec that cannot be used is the rare path: a run's process imports none of these
    from onnx_parity.report import github, junit, summary

    if settings.junit:
        from onnx_parity.report.jsonfile import write_text_atomic

        write_text_atomic(settings.junit, junit.spec_junit_xml(problems, spec_path))
    text = summary.spec_summary(problems, spec_path)
    if settings.summary:
        summary.write_summary(text, settings.summary)
    output = github_output(settings)
    if output.annotations:
        for line in github.spec_annotations(problems, repo_relative(Path(spec_path))):
            print(line)
    if output.step_summary:
        summary.write_summary(text, output.step_summary)


def repo_relative(path: Path) -> str:
    """Annotations need the path from the repository root, which GitHub calls the workspace."""
    root = Path(os.environ.get("GITHUB_WORKSPACE") or Path.cwd()).resolve()
    try:
        return path.resolve().relative_to(root).as_posix()
    except (OSError, RuntimeError, ValueError):  # outside the root; a NUL byte or a loop in a
        return path.as_posix()  # path a report (untrusted, for `publish`) holds


def exit_code(report: RunReport, fail_on: FailOn, allow_empty: bool = False) -> int:
    """The exit code `--fail-on` asks for. The reports are written whatever it is."""
    counts = report.counts
    if fail_on == "never":
        return EXIT_OK
    if counts["error"] or (counts["failed"] and fail_on == "drift"):
        return EXIT_FAILED
    if not report.complete:  # a run stopped early checked less than it was asked to
        say(f"{shown(report.spec_path)}: the run did not finish; the reports say which cases "
            "did not end", err=True)
        return EXIT_FAILED
    if not counts["passed"] and not counts["failed"] and not counts["xfailed"] and not allow_empty:
        say(f"{shown(report.spec_path)}: every case was skipped; nothing was checked", err=True)
        return EXIT_FAILED
    return EXIT_OK
