"""Meta-tests: the action, the image, the workflows and the README agree with the CLI and the
package, and the entrypoint works in a fake GitHub environment."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from fake_github import FakeGitHub, github
from helpers import ROOT
from onnx_parity import __version__
from onnx_parity.cli import action
from onnx_parity.cli.main import build_parser

__all__ = ["github"]  # the fixture, imported for the tests here

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
BIN = Path(sys.executable).parent


def _yaml(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return data


ACTION = _yaml(ROOT / "action.yml")


def _run_options() -> set[str]:
    """Option strings and positional names of `onnx-parity run`."""
    commands = next(a for a in build_parser()._actions if a.dest == "command")
    assert commands.choices is not None
    run = commands.choices["run"]
    return {s for a in run._actions for s in a.option_strings} | {
        a.dest for a in run._actions if not a.option_strings}


def _tool(name: str) -> str:
    path = shutil.which(name, path=str(BIN)) or shutil.which(name)
    assert path, f"{name} is not installed: pip install -e '.[dev]'"
    return path


# -- the action's inputs and outputs -----------------------------------------------------------


def test_the_action_and_the_entrypoint_know_the_same_inputs() -> None:
    assert list(ACTION["inputs"]) == list(action.INPUTS)
    for name, spec in ACTION["inputs"].items():
        assert spec.get("description"), f"input {name} has no description"
        assert "default" in spec, f"input {name} has no default"


def test_every_input_maps_to_a_cli_flag() -> None:
    options = _run_options()
    for name, flag in action.FLAGS.items():
        assert flag in options, f"input {name} maps to {flag}, which `onnx-parity run` lacks"
    # The rest choose where the CLI runs (the image or the runner's Python, and from which folder);
    # the action's own steps must use each of them.
    steps = yaml.safe_dump(ACTION["runs"])
    for name in action.RUNNER_INPUTS:
        assert f"inputs.{name}" in steps


def test_every_input_reaches_the_entrypoint_in_both_modes() -> None:
    step = next(s for s in ACTION["runs"]["steps"] if s.get("id") == "run")
    for name in ACTION["inputs"]:
        variable = "INPUT_" + name.upper().replace("-", "_")
        assert step["env"].get(variable) == f"${{{{ inputs.{name} }}}}", variable
        assert f"--env {variable} " in step["run"].replace("\\\n", " ") + " ", (
            f"{variable} is not passed to `docker run`")


def test_the_docs_document_every_input_and_output() -> None:
    page = (ROOT / "docs" / "action.md").read_text(encoding="utf-8")
    match = re.search(r"^## Action inputs and outputs\n(.*?)(?=^## |\Z)", page, re.M | re.S)
    assert match, "docs/action.md has no '## Action inputs and outputs' section"
    section = match[1]
    for kind in ("inputs", "outputs"):
        for name in ACTION[kind]:
            assert re.search(rf"^\| `{re.escape(name)}` \|", section, re.M), (
                f"docs/action.md's table lacks the {kind[:-1]} `{name}`")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "## Use it in CI" in readme and "uses: onnx-parity/onnx-parity-action@v1" in readme


def test_the_action_image_is_the_package_version() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    version = re.search(r'^version = "(.+)"$', pyproject, re.M)
    assert version is not None and version[1] == __version__
    image = ACTION["inputs"]["image"]["default"]
    assert image.rsplit(":", 1)[1] == __version__, f"{image} is not tagged {__version__}"


# -- the workflows, the action and the Dockerfile pass their linters ---------------------------


def test_workflows_and_action_pass_githubs_schemas() -> None:
    assert {p.name for p in WORKFLOWS} >= {"ci.yml", "image.yml", "release.yml"}
    tool = _tool("check-jsonschema")
    for schema, files in (("vendor.github-workflows", WORKFLOWS),
                          ("vendor.github-actions", [ROOT / "action.yml"])):
        done = subprocess.run([tool, "--builtin-schema", schema, *map(str, files)],
                              capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr


def test_dockerfile_passes_hadolint() -> None:
    done = subprocess.run([_tool("hadolint"), "--no-color", str(ROOT / "Dockerfile")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_third_party_actions_are_pinned_by_commit() -> None:
    for path in [*WORKFLOWS, ROOT / "action.yml"]:
        for uses in re.findall(r"^\s*(?:-\s*)?uses:\s*(\S+)", path.read_text(), re.M):
            if uses.startswith("./"):
                continue
            assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", uses), (
                f"{path.name}: {uses} is not pinned to a full commit SHA")


def test_workflow_permissions_are_minimal() -> None:
    writes = {}
    for path in WORKFLOWS:
        workflow = _yaml(path)
        assert workflow.get("permissions") == {"contents": "read"}, path.name
        for job_name, job in workflow["jobs"].items():
            for scope, level in (job.get("permissions") or {}).items():
                if level == "write":
                    writes[f"{path.name}:{job_name}:{scope}"] = level
    assert set(writes) == {"image.yml:image:packages", "release.yml:major-tag:contents"}


def test_image_and_ci_install_the_same_way() -> None:
    constraints = (ROOT / "constraints.txt").read_text()
    assert re.search(r"^torch==2\.13\.0$", constraints, re.M)
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "COPY pyproject.toml README.md constraints.txt ./" in dockerfile
    assert "TORCH_VARIANT=cu130" in dockerfile and "bash scripts/install.sh ." in dockerfile
    assert re.search(r"^ENTRYPOINT \[.*entrypoint\.py\"\]$", dockerfile, re.M)
    assert re.search(r"^USER \d+:\d+$", dockerfile, re.M)
    test_script = (ROOT / "scripts" / "test-image-install.sh").read_text()
    assert 'TORCH_VARIANT=cpu PYTHON="$venv/bin/python" bash "$root/scripts/install.sh"' in \
        test_script
    # install.sh asks for torch by the constraint's version, never an unpinned one.
    install = (ROOT / "scripts" / "install.sh").read_text()
    assert "torch_pin=\"$(grep -E '^torch==' \"$constraints\")\"" in install
    assert '--constraint "$constraints"' in install


# -- the action's own steps, run by bash with stand-ins for docker and nvidia-smi ---------------


def _step(step_id: str) -> dict[str, Any]:
    """The step with this id, or else this name."""
    step: dict[str, Any] = next(s for s in ACTION["runs"]["steps"]
                                if step_id in (s.get("id"), s.get("name")))
    return step


def _run_step(step_id: str, tmp_path: Path, tools: dict[str, str],
              **env: str) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    """Run one step's script as the runner would, with `tools` (and `id`) as the only commands:
    a real docker or nvidia-smi on the machine running the tests must not change the answer."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if not (bin_dir / "id").exists():
        (bin_dir / "id").symlink_to(_tool("id"))
    for name, script in tools.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{script}\n")
        (bin_dir / name).chmod(0o755)
    output = tmp_path / f"{step_id.replace(' ', '-')}.output"
    output.write_text("")
    full_env = {"PATH": str(bin_dir), "GITHUB_OUTPUT": str(output),
                "GITHUB_ACTION_PATH": str(ROOT), **env}
    done = subprocess.run([_tool("bash"), "-e", "-c", _step(step_id)["run"]], env=full_env,
                          capture_output=True, text=True, check=False, timeout=60)
    return done, _parse_outputs(output.read_text())


@pytest.mark.parametrize("gpu, tools, mode", [
    ("auto", {"nvidia-smi": "echo 'GPU 0: NVIDIA H100'", "docker": "exit 0",
              "python": "exit 0"}, "image"),
    ("auto", {"nvidia-smi": "exit 9", "docker": "exit 0", "python": "exit 0"}, "python"),
    ("auto", {"docker": "exit 0", "python": "exit 0"}, "python"),
    ("true", {"docker": "exit 0"}, "image"),
    ("false", {"nvidia-smi": "exit 0", "docker": "exit 0", "python": "exit 0"}, "python"),
])
def test_the_action_chooses_the_image_only_with_a_gpu(tmp_path: Path, gpu: str,
                                                      tools: dict[str, str], mode: str) -> None:
    done, outputs = _run_step("mode", tmp_path, tools, INPUT_GPU=gpu)
    assert done.returncode == 0, done.stdout + done.stderr
    assert outputs["mode"] == mode


@pytest.mark.parametrize("gpu, tools, says", [
    ("yes", {}, "input 'gpu': expected auto, true or false, got 'yes'"),
    ("true", {"nvidia-smi": "exit 0"}, "needs Docker with the NVIDIA Container Toolkit"),
])
def test_the_action_refuses_what_it_cannot_do(tmp_path: Path, gpu: str, tools: dict[str, str],
                                              says: str) -> None:
    done, _ = _run_step("mode", tmp_path, tools, INPUT_GPU=gpu)
    assert done.returncode == 2
    assert "::error title=onnx-parity" in done.stdout and says in done.stdout


def test_the_action_runs_the_image_with_the_gpu_and_every_input(tmp_path: Path) -> None:
    args_file = tmp_path / "docker-args"
    workspace, runner_temp = tmp_path / "work", tmp_path / "temp"
    env = {"INPUT_" + name.upper().replace("-", "_"): f"value of {name}"
           for name in ACTION["inputs"]}
    done, _ = _run_step(
        "run", tmp_path, {"docker": f'printf "%s\\n" "$@" > {args_file}'},
        ONNX_PARITY_MODE="image", ONNX_PARITY_IMAGE="ghcr.io/acme/parity:9", ONNX_PARITY_PYTHON="",
        GITHUB_WORKSPACE=str(workspace), RUNNER_TEMP=str(runner_temp), **env)
    assert done.returncode == 0, done.stderr
    args = args_file.read_text().splitlines()
    assert args[:4] == ["run", "--rm", "--gpus", "all"]
    assert args[-1] == "ghcr.io/acme/parity:9"
    assert f"{workspace}:{workspace}" in args and f"{runner_temp}:{runner_temp}" in args
    assert args[args.index("--user") + 1] == f"{os.getuid()}:{os.getgid()}"
    passed = {args[i + 1] for i, a in enumerate(args) if a == "--env"}
    assert set(env) | {"GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY", "GITHUB_WORKSPACE"} <= passed
    assert "GITHUB_TOKEN" not in passed  # the models' step holds no token


# -- the token: only the step that runs no model code holds it ---------------------------------

_TOKEN = re.compile(r"github\.token|secrets\.|GITHUB_TOKEN|ACTIONS_RUNTIME_TOKEN"
                    r"|ACTIONS_ID_TOKEN_REQUEST", re.I)


def _runs_model_code(step: dict[str, Any]) -> bool:
    """A step that starts onnx-parity, or its image, for anything but `publish`; or a step of
    another action (which might, for all this test knows)."""
    if "uses" in step:
        return False  # the actions/cache and upload-artifact steps: checked below
    script = step.get("run", "").replace("\\\n", " ")
    starts = [line for line in script.splitlines()
              if "entrypoint.py" in line or "docker run" in line or "onnx_parity" in line]
    return any(" publish " not in f"{line} " for line in starts)


def test_the_step_that_runs_model_code_holds_no_token() -> None:
    """action.yml, parsed: no step that runs model code names a token in its env, its `with`
    or its script (so neither the runner's shell nor `docker run --env` hands one on); the one
    step that holds the token runs `onnx-parity publish`, which runs no model code."""
    steps = ACTION["runs"]["steps"]
    running = [s for s in steps if _runs_model_code(s)]
    assert [s.get("id") for s in running] == ["run"]
    for step in running:
        for part in ("env", "with", "run"):
            text = yaml.safe_dump(step.get(part, "")) if part != "run" else step["run"]
            assert not _TOKEN.search(text), f"step {step.get('name')}: {part} names a token"
    holding = [s for s in steps if _TOKEN.search(yaml.safe_dump(s))]
    assert [s["name"] for s in holding] == ["Comment on the pull request"]
    (publisher,) = holding
    assert publisher["env"]["GITHUB_TOKEN"] == "${{ github.token }}"
    assert publisher["if"] == "${{ !cancelled() && steps.run.outputs.comment-report != '' }}"
    for step in steps:  # no other action is handed the token either
        assert not _TOKEN.search(yaml.safe_dump(step.get("with", {}))), step.get("name")


def test_the_publish_step_posts_from_the_report_without_site_packages(
        tmp_path: Path, github: FakeGitHub) -> None:
    """The runner's Python, started with -S -E and the action's own source: the comment is
    posted from the report; in image mode the image's `publish` gets the token, no GPU."""
    from onnx_parity.report.jsonfile import write_json
    from report_fixtures import sample_report

    report = tmp_path / "report.json"
    write_json(sample_report(), report)
    env = {key: os.environ[key] for key in os.environ if key.startswith("GITHUB_")}
    done, _ = _run_step("Comment on the pull request", tmp_path, {}, ONNX_PARITY_MODE="python",
                        ONNX_PARITY_PYTHON=sys.executable, ONNX_PARITY_REPORT=str(report),
                        **env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "created the onnx-parity comment on pull request #7" in done.stderr
    assert len(github.ours()) == 1

    args_file = tmp_path / "docker-args"
    done, _ = _run_step("Comment on the pull request", tmp_path,
                        {"docker": f'printf "%s\\n" "$@" > {args_file}'},
                        ONNX_PARITY_MODE="image", ONNX_PARITY_IMAGE="ghcr.io/acme/parity:9",
                        ONNX_PARITY_REPORT=str(report), RUNNER_TEMP=str(tmp_path),
                        GITHUB_WORKSPACE=str(tmp_path), **env)
    assert done.returncode == 0, done.stderr
    args = args_file.read_text().splitlines()
    assert args[-4:] == ["ghcr.io/acme/parity:9", "publish", str(report), "--comment"]
    assert "--gpus" not in args and "GITHUB_TOKEN" in args


def test_the_cache_never_restores_another_refs_entries() -> None:
    """The export cache's key holds the ref; each restore key is this ref's or the base
    branch's (`refs/heads/...`), never a prefix that a pull request's entries (keyed on
    `refs/pull/N/merge`) would match on the base branch."""
    steps = {s["name"]: s for s in ACTION["runs"]["steps"]}
    restore, save = steps["Restore the export cache"], steps["Save the export cache"]
    prefix = "onnx-parity-${{ runner.os }}-${{ github.job }}-${{ inputs.shard }}-"
    key = f"{prefix}${{{{ github.ref }}}}-${{{{ github.run_id }}}}-${{{{ github.run_attempt }}}}"
    assert restore["with"]["key"] == save["with"]["key"] == key
    assert restore["with"]["restore-keys"].splitlines() == [
        f"{prefix}${{{{ github.ref }}}}-",
        f"{prefix}refs/heads/${{{{ github.base_ref || github.event.repository.default_branch }}}}-"]
    # What those expressions become: a pull request's key matches none of a push's restore keys.
    pull_key = key.replace("${{ github.ref }}", "refs/pull/7/merge")
    for restore_key in restore["with"]["restore-keys"].splitlines():
        on_main = (restore_key.replace("${{ github.ref }}", "refs/heads/main")
                   .replace("${{ github.base_ref || github.event.repository.default_branch }}",
                            "main"))
        assert not pull_key.startswith(on_main)


def test_a_hostile_gpu_input_cannot_start_a_command(tmp_path: Path) -> None:
    done, _ = _run_step("mode", tmp_path, {}, INPUT_GPU="yes\n::warning::pwned\r%0A")
    assert done.returncode == 2
    (command,) = [line for line in done.stdout.splitlines() if line.startswith("::")]
    assert command.endswith("got 'yes%0A::warning::pwned%0D%250A'")


# -- settings ----------------------------------------------------------------------------------


def test_settings_from_inputs() -> None:
    settings = action.get_settings({
        "INPUT_SPEC": "models/parity.yaml",
        "INPUT_SELECT": "mlp[opset17-*\n  cnn*, attention* \n",
        "INPUT_TARGETS": "cpu, cuda",
        "INPUT_JUNIT-PATH": "out/junit.xml",  # GitHub's own spelling
        "INPUT_JSON_PATH": "",  # empty means unset
        "INPUT_SUMMARY": "off",
        "INPUT_ANNOTATIONS": "TRUE",
        "INPUT_FAIL_ON": "error",
        "INPUT_SHARD": " 2 / 3 ",
        "INPUT_BASELINE": "base/report.json",
        "INPUT_GPU": "false",
    })
    assert settings == action.Settings(
        spec="models/parity.yaml", select=("mlp[opset17-*", "cnn*", "attention*"),
        targets=("cpu", "cuda"), junit_path="out/junit.xml", json_path=None, summary=False,
        annotations=True, fail_on="error", shard="2/3", baseline="base/report.json",
        gpu="false",
    )
    args = settings.run_args("r.json", "/tmp/step_summary.md")
    assert args == ["run", "models/parity.yaml", "--json", "r.json", "--fail-on", "error",
                    "--no-step-summary", "--select", "mlp[opset17-*", "--select", "cnn*",
                    "--select", "attention*", "--targets", "cpu,cuda", "--junit", "out/junit.xml",
                    "--shard", "2/3", "--baseline", "base/report.json"]
    assert build_parser().parse_args(args).shard is not None  # the CLI takes what it is given


def test_unset_inputs_take_the_defaults() -> None:
    settings = action.get_settings({"INPUT_SPEC": " ", "INPUT_FAIL_ON": ""})
    assert settings == action.Settings(spec="parity.yaml")
    assert settings.run_args("r.json", None) == [
        "run", "parity.yaml", "--json", "r.json", "--fail-on", "drift", "--no-step-summary"]


def test_every_bad_input_is_named_at_once(tmp_path: Path) -> None:
    with pytest.raises(action.SettingsError) as caught:
        action.get_settings({
            "INPUT_FAIL_ON": "sometimes", "INPUT_SUMMARY": "maybe", "INPUT_SHARD": "3/2",
            "INPUT_GPU": "yes", "INPUT_WORKING_DIRECTORY": str(tmp_path / "nowhere"),
        })
    assert caught.value.problems == (
        "input 'shard': '3/2': the shard number must be between 1 and 2",
        f"input 'working-directory': no folder '{tmp_path / 'nowhere'}' (from {Path.cwd()})",
        "input 'summary': expected on, true, off or false, got 'maybe'",
        "input 'fail-on': expected drift, error or never, got 'sometimes'",
        "input 'gpu': expected auto, true or false, got 'yes'",
    )


def test_arguments_go_straight_to_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert action.main(["--version"], {}) == 0
    assert capsys.readouterr().out == f"onnx-parity {__version__}\n"
    assert action.main([], {}) == 2  # neither a command nor inputs: the help
    assert "give a command" in capsys.readouterr().err


def test_outputs_survive_any_value(tmp_path: Path) -> None:
    target = tmp_path / "github_output"
    target.write_text("earlier=1\n")
    values = {"passed": "3", "json-path": "/w/a b.json", "note": "line 1\nghadelimiter_x\nline 3"}
    action.write_outputs(values, {"GITHUB_OUTPUT": str(target)})
    assert _parse_outputs(target.read_text()) == {"earlier": "1", **values}


def _parse_outputs(text: str) -> dict[str, str]:
    """GitHub's reading of GITHUB_OUTPUT: `name=value` lines and `name<<DELIMITER` blocks."""
    values: dict[str, str] = {}
    lines = iter(text.splitlines())
    for line in lines:
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            body = []
            for body_line in lines:
                if body_line == delimiter:
                    break
                body.append(body_line)
            else:
                raise AssertionError(f"{name}: delimiter {delimiter} never closes")
            values[name] = "\n".join(body)
        else:
            name, value = line.split("=", 1)
            values[name] = value
    return values


# -- the entrypoint in a fake GitHub environment -----------------------------------------------


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A repository with a spec in project/: one model that passes, one whose recorded outputs
    drifted. ONNX files with recorded outputs: no export, so a run takes a second or two."""
    project = tmp_path / "project"
    shutil.copytree(ROOT / "examples" / "golden", project / "golden")
    (project / "parity.yaml").write_text(textwrap.dedent("""
        version: 1
        datasets:
          golden: {kind: onnx-test-data, path: golden/data}
          drifted: {kind: onnx-test-data, path: golden/drifted}
        models:
          - name: head
            onnx: golden/head.onnx
            datasets: [golden]
          - name: drifted-head
            onnx: golden/head.onnx
            datasets: [drifted]
    """).lstrip())
    return tmp_path


def _github(workspace: Path, runner_temp: Path | None = None,
            **inputs: str) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    output, summary = workspace / "runner" / "output", workspace / "runner" / "summary.md"
    output.parent.mkdir(exist_ok=True)
    output.write_text("")
    summary.write_text("")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GITHUB_", "INPUT_", "RUNNER_"))}
    env.update({
        "GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": str(workspace),
        "GITHUB_OUTPUT": str(output), "GITHUB_STEP_SUMMARY": str(summary),
        "GITHUB_SERVER_URL": "https://github.example", "GITHUB_REPOSITORY": "acme/models",
        "GITHUB_RUN_ID": "42", "GITHUB_RUN_ATTEMPT": "2",
    })
    env.update({f"INPUT_{k.upper()}": v for k, v in inputs.items()})
    if runner_temp is not None:
        env["RUNNER_TEMP"] = str(runner_temp)
    done = subprocess.run([sys.executable, str(ROOT / "entrypoint.py")], cwd=workspace, env=env,
                          capture_output=True, text=True, check=False, timeout=300)
    return done, output, summary


def test_entrypoint_on_github_fails_the_step_on_drift(workspace: Path) -> None:
    done, output, summary = _github(
        workspace, SPEC="parity.yaml", WORKING_DIRECTORY="project", SELECT="",
        JSON_PATH="out/report.json", JUNIT_PATH="out/junit.xml", SUMMARY="on",
        ANNOTATIONS="on", FAIL_ON="", SHARD="", TARGETS="", GPU="auto",
        ARTIFACTS_PATH="out/bundles", IMAGE=ACTION["inputs"]["image"]["default"])
    assert done.returncode == 1, done.stdout + done.stderr
    outputs = _parse_outputs(output.read_text())
    project = workspace / "project"
    assert outputs == {
        "passed": "1", "failed": "1", "errors": "0", "skipped": "0", "xfailed": "0",
        "json-path": str(project / "out" / "report.json"),
        "junit-path": str(project / "out" / "junit.xml"),
        "report-url": "https://github.example/acme/models/actions/runs/42/attempts/2",
        "artifacts-path": str(project / "out" / "bundles"),
        "artifacts-name": "onnx-parity-repro-run",  # for the upload step, not an output
        "spec-errors": "0",
    }
    assert set(ACTION["outputs"]) == set(outputs) - {"artifacts-name"}
    marker, bundle, models = sorted((project / "out" / "bundles").iterdir())
    assert marker.name == ".onnx-parity-root"  # the bundles' specs name ../models/
    assert bundle.name.startswith("drifted-head") and (bundle / "parity.yaml").is_file()
    assert models.name == "models"  # the one copy of the model the bundle names
    # The annotation points at the spec from the repository root, on the model's line.
    assert "::error file=project/parity.yaml,line=9,title=onnx-parity%3A drifted-head drifted" \
        in done.stdout
    text = summary.read_text()
    assert text.startswith("## ❌ onnx-parity: 1 passed, 1 failed, 0 errors, 0 skipped")
    assert text.count("## ❌ onnx-parity") == 1  # written once, not by the CLI again
    assert (project / "out" / "junit.xml").read_text().count("<testcase") == 2


def test_entrypoint_reports_only_when_asked(workspace: Path) -> None:
    done, output, summary = _github(
        workspace, SPEC="project/parity.yaml", SELECT="drifted-head*", FAIL_ON="never",
        ANNOTATIONS="off", SUMMARY="off", SHARD="1/1", BASELINE="base/report.json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "::error" not in done.stdout
    # No base branch report yet (a first run): said, never a silent pass of that check.
    warning = next(line for line in done.stdout.splitlines() if line.startswith("::warning "))
    assert "title=onnx-parity%3A regression check not done::" in warning
    assert "base/report.json does not exist" in warning
    assert summary.read_text() == ""
    outputs = _parse_outputs(output.read_text())
    assert (outputs["passed"], outputs["failed"]) == ("0", "1")
    assert "json-path" not in outputs  # none was asked for; the counts came from a scratch file


def test_entrypoint_names_bad_inputs_as_annotations(workspace: Path) -> None:
    done, output, _ = _github(workspace, SPEC="project/parity.yaml", FAIL_ON="sometimes",
                              SHARD="0/2")
    assert done.returncode == 2
    assert "::error title=onnx-parity inputs::input 'fail-on': expected drift, error or never" \
        in done.stdout
    assert "input 'shard': '0/2': the shard number must be between 1 and 2" in done.stderr
    assert output.read_text() == ""


def test_entrypoint_on_a_broken_spec_annotates_it_and_sets_spec_errors(workspace: Path) -> None:
    spec = workspace / "project" / "parity.yaml"
    spec.write_text(spec.read_text().replace("datasets: [drifted]", "datasets: [drifted]\n"
                                             "    opsets: [99]\n    tourch: x.py:y"))
    done, output, summary = _github(workspace, SPEC="parity.yaml", WORKING_DIRECTORY="project",
                                    JUNIT_PATH="out/junit.xml")
    assert done.returncode == 2
    outputs = _parse_outputs(output.read_text())
    assert outputs["spec-errors"] == "3"  # the typo, the opset, opsets on an ONNX file
    assert "failed" not in outputs and "passed" not in outputs  # nothing ran: no counts
    assert outputs["junit-path"] == str(workspace / "project" / "out" / "junit.xml")
    annotations = [line for line in done.stdout.splitlines() if line.startswith("::error ")]
    assert [a.split(",title=")[0] for a in annotations] == [
        "::error file=project/parity.yaml,line=12,col=5",
        "::error file=project/parity.yaml,line=12,col=14",
        "::error file=project/parity.yaml,line=13,col=5"]
    assert summary.read_text().startswith("## ❌ onnx-parity: parity.yaml cannot be used")


def test_entrypoint_with_comment_on_leaves_the_report_for_the_next_step(workspace: Path) -> None:
    """With `comment: on` and no json-path, the report outlives the step (in RUNNER_TEMP) and
    `comment-report` names it; the step itself posted nothing (it holds no token)."""
    runner_temp = workspace / "runner-temp"
    runner_temp.mkdir()
    done, output, _ = _github(workspace, SPEC="project/parity.yaml", COMMENT="on",
                              FAIL_ON="never", runner_temp=runner_temp)
    assert done.returncode == 0, done.stdout + done.stderr
    outputs = _parse_outputs(output.read_text())
    report = Path(outputs["comment-report"])
    assert report.is_file() and report.is_relative_to(runner_temp)
    assert "comment" not in done.stderr and "--comment" not in done.stdout
    done, output, _ = _github(workspace, SPEC="project/parity.yaml", COMMENT="on", SHARD="1/2",
                              FAIL_ON="never", runner_temp=runner_temp)
    assert "comment-report" not in _parse_outputs(output.read_text())
    assert "shard 1/2 does not comment" in done.stderr


def test_entrypoint_echoes_its_command_line_on_one_line(workspace: Path) -> None:
    """Inputs with a newline and `::` in them: the echoed command line shows them escaped, and
    no line but onnx-parity's own escaped annotations is a workflow command."""
    done, _, _ = _github(workspace, SPEC="project/parity.yaml\n::error::spec",
                         TARGETS="cpu\n::error::targets", JUNIT_PATH="j\n::error::junit.xml")
    lines = (done.stdout + done.stderr).splitlines()
    echo = next(line for line in lines if line.startswith("onnx-parity run "))
    assert "\\n::error::spec" in echo and "\\n::error::targets" in echo
    commands = [line for line in lines if line.lstrip().startswith("::")]
    assert commands and all(line.startswith("::error file=") for line in commands), commands

