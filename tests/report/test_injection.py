"""No user text becomes a workflow command: hostile names, paths and messages, through spec
errors as well as case results, never give a console line that starts with `::` other than the
annotations onnx-parity writes itself, escaped. And a broken spec is reported on the pull
request: annotations on its lines, the job summary, a failing `spec` testcase."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from onnx_parity.cli.main import main
from onnx_parity.errors import SpecProblem
from onnx_parity.escape import console_lines, visible
from onnx_parity.report.github import spec_annotations
from report_fixtures import HOSTILE_MESSAGE, HOSTILE_MODEL

# What onnx-parity's own commands look like: one line, properties escaped, then the message.
OWN_COMMAND = re.compile(r"^::(error|warning) (file=[^,:]+)?(,?line=\d+)?(,col=\d+)?"
                         r",?title=[^:,]*::")


def _commands(text: str) -> list[str]:
    """Every line GitHub Actions would read as a workflow command."""
    return [line for line in text.splitlines() if line.lstrip().startswith("::")]


def _hostile_spec(folder: Path) -> Path:
    spec = folder / "parity.yaml"
    quoted = HOSTILE_MODEL.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    spec.write_text(
        "version: 1\n"
        "models:\n"
        f'  - name: "{quoted}"\n'
        f'    onnx: "{quoted}.onnx"\n'
        f'    targets: ["{quoted}"]\n'
        f'    datasets: ["::warning::{quoted}"]\n'
        f'    "::error::key{quoted}": 1\n')
    return spec


@pytest.mark.parametrize("on_github", [False, True])
def test_spec_errors_never_print_a_workflow_command(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        on_github: bool) -> None:
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    if on_github:
        monkeypatch.setenv("GITHUB_ACTIONS", "true")
        monkeypatch.setenv("GITHUB_WORKSPACE", str(tmp_path))
    else:
        monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    spec = _hostile_spec(tmp_path)
    assert main(["run", str(spec), "--select", "::error::x\n::y"]) == 2
    out, err = capsys.readouterr()
    assert "pwned" in err  # the problems are told, with the names in them
    assert _commands(err) == []
    commands = _commands(out)
    assert bool(commands) == on_github
    for command in commands:
        assert OWN_COMMAND.match(command), command
        assert command.startswith("::error file=parity.yaml,line=")


def test_a_broken_spec_on_a_pull_request_is_annotated_summarized_and_a_failing_testcase(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_WORKSPACE", str(tmp_path))
    summary = tmp_path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    (tmp_path / "models.py").write_text("def make():\n    return None\n")
    spec = tmp_path / "parity.yaml"
    spec.write_text("version: 1\n"
                    "models:\n"
                    "  - name: mlp\n"
                    "    tourch: models.py:make\n"
                    "    opsets: [99]\n")
    junit = tmp_path / "out" / "junit.xml"
    assert main(["run", str(spec), "--junit", str(junit)]) == 2
    out, _ = capsys.readouterr()
    annotations = _commands(out)
    assert len(annotations) == 3  # the typo, the model without torch/onnx, the opset
    assert any(a.startswith("::error file=parity.yaml,line=4,col=5,title=onnx-parity%3A spec "
                            "error::unknown key 'tourch'") for a in annotations)
    assert any(",line=5,col=" in a and "opsets" in a for a in annotations)
    text = summary.read_text()
    assert text.startswith("## ❌ onnx-parity: ")
    assert "| 4:5 | unknown key 'tourch'" in text and "nothing was checked" in text
    suite = ET.parse(junit).getroot()
    case = suite.find("testsuite/testcase")
    assert case is not None and case.get("name") == "spec"
    failure = case.find("failure")
    assert failure is not None and failure.get("type") == "SpecError"
    assert "3 problems" in (failure.get("message") or "")
    assert "parity.yaml:4:5: unknown key 'tourch'" in (failure.text or "")
    assert suite.get("failures") == "1"


def test_hostile_case_results_never_print_a_workflow_command(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A factory whose error message is hostile, run with -v on GitHub: the case line, the
    table, the log lines and the annotation all hold the text, none of it as a command."""
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_WORKSPACE", str(tmp_path))
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    (tmp_path / "models.py").write_text(
        f"def make():\n    raise RuntimeError({HOSTILE_MESSAGE!r})\n")
    spec = tmp_path / "parity.yaml"
    spec.write_text("version: 1\nmodels:\n  - name: hostile\n    torch: models.py:make\n"
                    "    inputs: {x: {shape: [1, 4]}}\n")
    assert main(["run", str(spec), "-v", "--json", str(tmp_path / "r.json")]) == 1
    out, err = capsys.readouterr()
    assert "injected" in out
    assert _commands(err) == []
    commands = _commands(out)
    assert len(commands) == 1 and OWN_COMMAND.match(commands[0])
    assert "%0A" not in commands[0].split("::", 2)[1]  # the properties hold no line break


def test_console_text_keeps_its_lines_but_none_is_a_command() -> None:
    text = console_lines(HOSTILE_MESSAGE)
    assert _commands(text) == []
    assert "\x1b" not in text and "\x00" not in text
    assert visible("a\nb\tc\x1bd\u2028") == "a\\nb\\tc\\x1bd\\u2028"
    problem = SpecProblem("parity.yaml", 3, 5, f"model {HOSTILE_MODEL}")
    assert "\n" not in problem.message and "\n" not in str(problem)
    many = [SpecProblem("p.yaml", n, 1, "bad") for n in range(1, 15)]
    commands = spec_annotations(many, "p.yaml")
    assert len(commands) == 10 and "and 5 more spec errors" in commands[-1]


PAYLOAD = "\n::error::pwned"  # what every echoed field is fed with


def _own_commands_only(text: str) -> None:
    """Every line GitHub would read as a command is one onnx-parity wrote, escaped whole."""
    for command in _commands(text):
        assert OWN_COMMAND.match(command), command
        assert not command.startswith("::error::pwned"), command


def test_every_echoed_field_of_a_run_is_inert(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On GitHub: the spec's path, a --select glob, a --targets name, the --baseline and
    --durations paths and a factory's message, each with a newline and `::` in it, reach the
    console and the annotations as text only."""
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_WORKSPACE", str(tmp_path))
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    folder = tmp_path / f"specs{PAYLOAD}"
    folder.mkdir()
    (folder / "models.py").write_text(f"def make():\n    raise RuntimeError({PAYLOAD!r})\n")
    spec = folder / "parity.yaml"
    spec.write_text("version: 1\nmodels:\n  - name: m\n    torch: models.py:make\n"
                    "    inputs: {x: {shape: [1, 4]}}\n")
    report = tmp_path / "r.json"
    assert main(["run", str(spec), "--select", "m*", "--select", f"x{PAYLOAD}",
                 "--baseline", str(tmp_path / f"base{PAYLOAD}.json"), "--json",
                 str(report)]) == 1
    out, err = capsys.readouterr()
    assert "pwned" in out + err  # told, as text
    _own_commands_only(out + err)
    # An unreadable --durations is a warning; the shard is balanced by count and runs.
    assert main(["run", str(spec), "--shard", "1/1", "--durations",
                 str(tmp_path / f"d{PAYLOAD}.json")]) == 1
    assert main(["run", str(spec), "--select", f"none{PAYLOAD}"]) == 1
    assert main(["run", str(spec), "--targets", f"cpu,gpu{PAYLOAD}"]) == 2
    assert main(["run", str(spec), "--list", "--select", f"*{PAYLOAD}", "--select", "*"]) == 0
    out, err = capsys.readouterr()
    assert "pwned" in err
    _own_commands_only(out + err)


def test_every_echoed_field_of_a_report_is_inert(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`merge` of a forged report: its spec path, case ids, model names and messages, each
    with a newline and `::`, are said and annotated as text only."""
    import json

    from onnx_parity.report.jsonfile import write_json
    from report_fixtures import sample_report

    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    path = tmp_path / "r.json"
    write_json(sample_report(), path)
    data = json.loads(path.read_text())
    data["spec"] = f"parity.yaml{PAYLOAD}"
    for case in data["cases"]:
        case["id"] += PAYLOAD
        case["model"] += PAYLOAD
        case["message"] += PAYLOAD
    data["plan"]["cases"] = [case["id"] for case in data["cases"]]  # a forged plan agrees
    path.write_text(json.dumps(data))
    assert main(["merge", str(path), "--fail-on", "never"]) == 0
    out, err = capsys.readouterr()
    assert "pwned" in out + err and _commands(out)
    _own_commands_only(out + err)
