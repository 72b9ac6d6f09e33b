"""The GitHub Action: its inputs (INPUT_*) → `onnx-parity run` → its outputs.

    python entrypoint.py            reads the action's inputs from INPUT_* variables
    python entrypoint.py ARGS...    is `onnx-parity ARGS...` (the image used as the CLI)

Every input is read once, checked, and kept in one frozen Settings; a wrong value is an error that
names the input, and all of them are reported at once. An empty INPUT_X means unset. The outputs go
to $GITHUB_OUTPUT (in the multiline-safe form) and the summary to $GITHUB_STEP_SUMMARY; without
those variables, outside GitHub, the run is the same and the outputs are printed instead.
"""

from __future__ import annotations

import os
import shlex
import sys
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from onnx_parity.cli.main import main as cli
from onnx_parity.frozen import frozen
from onnx_parity.literals import EXIT_USAGE, FAIL_ON, FailOn
from onnx_parity.report.publish import say, shown

# Inputs that become flags of `onnx-parity run` (tests/cli/test_action.py checks each one against
# the parser, and action.yml and docs/action.md against this list).
FLAGS = {
    "spec": "spec",  # the positional SPEC
    "select": "--select",
    "targets": "--targets",
    "junit-path": "--junit",
    "json-path": "--json",
    "summary": "--no-step-summary",
    "annotations": "--no-annotations",
    "fail-on": "--fail-on",
    "shard": "--shard",
    "durations": "--durations",
    "artifacts-path": "--artifacts",
    "baseline": "--baseline",
    "comment": "--comment",
    "cache": "--cache",
    "allow-outside-repo": "--allow-outside-repo",
}
# Inputs the action itself uses before the CLI starts: where and how it runs.
RUNNER_INPUTS = ("image", "gpu", "working-directory")
INPUTS = (*FLAGS, *RUNNER_INPUTS)

SWITCHES = {"on": True, "true": True, "off": False, "false": False}
GPU = ("auto", "true", "false")

_Option = TypeVar("_Option", bound=str)


class SettingsError(Exception):
    """Inputs that cannot be used; `problems` names each input and what is wrong with it."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = tuple(problems)


@frozen
class Settings:
    spec: str
    select: tuple[str, ...] = ()
    targets: tuple[str, ...] = ()
    junit_path: str | None = None
    json_path: str | None = None
    summary: bool = True
    annotations: bool = True
    fail_on: FailOn = "drift"
    shard: str | None = None
    durations: str | None = None
    artifacts_path: str | None = None
    baseline: str | None = None
    comment: bool = False
    cache: str | None = None  # the folder actions/cache keeps (cache: on)
    allow_outside_repo: bool = False
    gpu: str = "auto"
    image: str | None = None
    working_directory: str | None = None

    def run_args(self, json_path: str, step_summary: str | None) -> list[str]:
        """`onnx-parity run` arguments. The summary is passed as a file, never left to the CLI's
        own GITHUB_STEP_SUMMARY handling, so it is written once, inside or outside GitHub."""
        args = ["run", self.spec, "--json", json_path, "--fail-on", self.fail_on,
                "--no-step-summary"]
        for glob in self.select:
            args += ["--select", glob]
        if self.targets:
            args += ["--targets", ",".join(self.targets)]
        if self.junit_path:
            args += ["--junit", self.junit_path]
        if self.shard:
            args += ["--shard", self.shard]
        if self.durations:
            args += ["--durations", self.durations]
        if self.artifacts_path:
            args += ["--artifacts", self.artifacts_path]
        if self.baseline:
            args += ["--baseline", self.baseline]
        if self.cache:
            args += ["--cache", self.cache]
        if self.summary and step_summary:
            args += ["--summary", step_summary]
        if not self.annotations:
            args.append("--no-annotations")
        if self.allow_outside_repo:
            args.append("--allow-outside-repo")
        # No --comment: the step that runs the models holds no token; the action's next step
        # publishes the comment from the JSON report (`comment-report`, docs/security.md).
        return args


def read_input(env: Mapping[str, str], name: str) -> str | None:
    """INPUT_NAME as GitHub spells it (upper case, `-` kept) or with `_` for `-`, as a shell and
    `docker run -e` need it; empty or blank means unset."""
    for key in (f"INPUT_{name.upper()}", f"INPUT_{name.upper().replace('-', '_')}"):
        value = env.get(key)
        if value is not None and value.strip():
            return value.strip()
    return None


def get_settings(env: Mapping[str, str]) -> Settings:
    problems: list[str] = []

    def choice(name: str, options: Sequence[_Option], default: _Option) -> _Option:
        value = read_input(env, name)
        if value is None:
            return default
        # The option itself, not the text: its type is then the options' (FailOn for fail-on).
        for option in options:
            if option == value.lower():
                return option
        problems.append(f"input '{name}': expected {_either(options)}, got {value!r}")
        return default

    def switch(name: str, default: str = "on") -> bool:
        return SWITCHES[choice(name, tuple(SWITCHES), default)]

    shard = read_input(env, "shard")
    if shard is not None:
        # The action's entry, as cli/main.py is the command line's: each input's modules
        # load only when it is given, and the run's workers start before the rest loads.
        from onnx_parity.plan.shard import parse_shard

        try:
            shard = str(parse_shard(shard))
        except ValueError as exc:
            problems.append(f"input 'shard': {exc}")
    durations = read_input(env, "durations")
    if durations is not None and shard is None:
        problems.append("input 'durations': it balances shards; give 'shard' too")
    working_directory = read_input(env, "working-directory")
    if working_directory is not None and not Path(working_directory).is_dir():
        problems.append(f"input 'working-directory': no folder {working_directory!r} "
                        f"(from {Path.cwd()})")
    settings = Settings(
        spec=read_input(env, "spec") or "parity.yaml",
        select=_items(read_input(env, "select"), separators=",\n"),
        targets=_items(read_input(env, "targets"), separators=","),
        junit_path=read_input(env, "junit-path"),
        json_path=read_input(env, "json-path"),
        summary=switch("summary"),
        annotations=switch("annotations"),
        fail_on=choice("fail-on", FAIL_ON, "drift"),
        shard=shard,
        durations=durations,
        artifacts_path=read_input(env, "artifacts-path"),
        baseline=read_input(env, "baseline"),
        comment=switch("comment", "off"),
        cache=_cache_folder(env) if switch("cache", "off") else None,
        allow_outside_repo=switch("allow-outside-repo", "off"),
        gpu=choice("gpu", GPU, "auto"),
        image=read_input(env, "image"),
        working_directory=working_directory,
    )
    if problems:
        raise SettingsError(problems)
    return settings


def _cache_folder(env: Mapping[str, str]) -> str:
    """The folder the action's actions/cache steps keep: in the runner's temp folder, which the
    image sees at the same path."""
    import tempfile

    return str(Path(env.get("RUNNER_TEMP") or tempfile.gettempdir()) / "onnx-parity-cache")


def _either(options: Sequence[str]) -> str:
    return ", ".join(options[:-1]) + f" or {options[-1]}"


def _items(value: str | None, separators: str) -> tuple[str, ...]:
    """Globs or names, one per line or separated by commas."""
    if value is None:
        return ()
    for separator in separators[1:]:
        value = value.replace(separator, separators[0])
    return tuple(item.strip() for item in value.split(separators[0]) if item.strip())


def outputs(json_path: Path, settings: Settings, env: Mapping[str, str]) -> dict[str, str]:
    """The action's outputs. The counts only when the run wrote its report: a spec that cannot
    be used leaves them empty (never a '0' that a later step could take for a pass) and sets
    `spec-errors` to the number of its problems instead."""
    values: dict[str, str] = {"spec-errors": "0" if json_path.is_file() else str(
        spec_problems(settings.spec, settings.allow_outside_repo))}
    if json_path.is_file():
        from onnx_parity.report.jsonfile import ReportFormatError, read_json  # after the run

        try:
            counts = read_json(json_path).counts
        except ReportFormatError as exc:
            say(f"onnx-parity action: cannot read the report back: {shown(exc)}", err=True)
        else:
            values.update(passed=str(counts["passed"]), failed=str(counts["failed"]),
                          errors=str(counts["error"]), skipped=str(counts["skipped"]),
                          xfailed=str(counts["xfailed"]))
    if settings.json_path and json_path.is_file():
        values["json-path"] = str(json_path.resolve())
    if settings.junit_path and Path(settings.junit_path).is_file():
        values["junit-path"] = str(Path(settings.junit_path).resolve())
    bundles = Path(settings.artifacts_path) if settings.artifacts_path else None
    if bundles is not None and bundles.is_dir() and any(bundles.iterdir()):
        values["artifacts-path"] = str(bundles.resolve())
        # Unique per job and shard: an artifact name may be uploaded once per workflow run.
        shard = f"-shard-{settings.shard.replace('/', '-of-')}" if settings.shard else ""
        values["artifacts-name"] = f"onnx-parity-repro-{env.get('GITHUB_JOB', 'run')}{shard}"
    server, repository, run = (env.get(k) for k in
                               ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID"))
    if server and repository and run:
        url = f"{server}/{repository}/actions/runs/{run}"
        attempt = env.get("GITHUB_RUN_ATTEMPT")
        values["report-url"] = f"{url}/attempts/{attempt}" if attempt else url
    return values


def spec_problems(spec: str, allow_outside_repo: bool = False) -> int:
    """How many problems the spec has (0 when it can be used; it is read again, which is cheap
    next to a run)."""
    # the spec's reader, after the run: its workers start before it loads
    from onnx_parity.errors import SpecError
    from onnx_parity.spec import load_spec

    try:
        load_spec(Path(spec), allow_outside_repo=allow_outside_repo)
    except SpecError as exc:
        return len(exc.problems)
    except OSError:
        return 1
    return 0


def write_outputs(values: Mapping[str, str], env: Mapping[str, str]) -> None:
    """Append to $GITHUB_OUTPUT as `name<<DELIMITER` blocks, which hold any value, newlines
    included; without GITHUB_OUTPUT, print them."""
    target = env.get("GITHUB_OUTPUT")
    if not target:
        for name, value in values.items():
            say(f"output {name}={shown(value)}")
        return
    with open(target, "a", encoding="utf-8") as handle:
        for name, value in values.items():
            delimiter = f"ghadelimiter_{uuid.uuid4()}"
            while delimiter in value:
                delimiter = f"ghadelimiter_{uuid.uuid4()}"
            handle.write(f"{name}<<{delimiter}\n{value}\n{delimiter}\n")


def _error(message: str, env: Mapping[str, str]) -> None:
    if env.get("GITHUB_ACTIONS") == "true":
        from onnx_parity.report.github import escape_data  # only on GitHub Actions

        print(f"::error title=onnx-parity inputs::{escape_data(message)}")
    say(f"onnx-parity action: error: {shown(message)}", err=True)


def run_action(env: Mapping[str, str]) -> int:
    try:
        settings = get_settings(env)
    except SettingsError as exc:
        for problem in exc.problems:
            _error(problem, env)
        return EXIT_USAGE
    if settings.working_directory:
        os.chdir(settings.working_directory)
    with tempfile.TemporaryDirectory(prefix="onnx-parity-action-") as scratch:
        json_path = Path(settings.json_path or _report_path(settings, env, Path(scratch)))
        args = settings.run_args(str(json_path), env.get("GITHUB_STEP_SUMMARY"))
        # The command line holds the inputs as given: shown on one line, it cannot start a
        # workflow command whatever they hold.
        say(f"onnx-parity {shown(shlex.join(args))}", flush=True)
        code = cli(args)
        values = outputs(json_path, settings, env)
        if settings.comment:
            values.update(_comment_report(json_path, settings))
        write_outputs(values, env)
    return code


def _report_path(settings: Settings, env: Mapping[str, str], scratch: Path) -> Path:
    """Where the JSON report goes when `json-path` is empty: a scratch file, or with `comment`
    on a file in the runner's temp folder that outlives this step, for the one that posts the
    comment."""
    if not settings.comment:
        return scratch / "report.json"
    folder = Path(env.get("RUNNER_TEMP") or tempfile.gettempdir())
    return folder / f"onnx-parity-{uuid.uuid4().hex}" / "report.json"


def _comment_report(json_path: Path, settings: Settings) -> dict[str, str]:
    """`comment-report`, the report the action's next step posts the comment from (a hidden
    output): none from a shard, which leaves the comment to `merge --comment`, or from a spec
    that cannot be used (nothing ran)."""
    if settings.shard:
        say(f"comment: shard {settings.shard} does not comment; `onnx-parity merge --comment` "
            "posts the comment for the whole run", err=True)
        return {}
    return {"comment-report": str(json_path.resolve())} if json_path.is_file() else {}


def main(argv: Sequence[str], env: Mapping[str, str]) -> int:
    if argv:
        return cli(argv)
    if not any(key.startswith("INPUT_") for key in env):
        print("onnx-parity: give a command (run, merge, ...), or action inputs as INPUT_* "
              "variables", file=sys.stderr)
        cli(["--help"])
        return 2
    return run_action(env)

