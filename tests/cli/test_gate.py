"""The gate holds: interrupted runs still report, oversized inputs are refused, text is inert."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tomllib

from helpers import EXAMPLES, ROOT, by_id

pytestmark = pytest.mark.slow

PAYLOADS = [
    "line one\nline two",
    "::error::injected",
    "%0A::warning::encoded",
    "::stop-commands::token",
    "a | b | c",
    "<script>alert(1)</script>",
    "bell\x07 escape\x1b[31m null\x00 end",
    "carriage\r::error file=x::return",
]


def _quick_and_stuck(write_spec: Callable[[str], Path], opsets: str) -> Path:
    """A model that passes at once and one that hangs: a run to stop while it goes on."""
    return write_spec(f"""
        version: 1
        defaults: {{exporter: torchscript, opsets: {opsets}}}
        models:
          - name: quick
            torch: models.py:make_linear
            inputs: {{x: {{shape: [batch, 4]}}}}
          - name: stuck
            torch: models.py:make_crash
            args: {{how: hang}}
            inputs: {{x: {{shape: [batch, 4]}}}}
    """)


def _until_one_passed(report: Path, stop: Callable[[], None]) -> None:
    """Wait until the run's JSON report holds a passed case; on a hang guard's end, `stop` the
    run and fail."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if report.exists() and json.loads(report.read_text())["summary"]["passed"] >= 1:
            return
        time.sleep(0.2)
    stop()
    pytest.fail("the quick model never reported")


def test_sigterm_mid_run_writes_every_report(write_spec: Callable[[str], Path],
                                             tmp_path: Path) -> None:
    spec = _quick_and_stuck(write_spec, "[18]")
    report, junit = tmp_path / "out.json", tmp_path / "out.xml"
    process = subprocess.Popen(
        [sys.executable, "-m", "onnx_parity", "run", str(spec), "--jobs", "2",
         "--json", str(report), "--junit", str(junit)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    _until_one_passed(report, process.kill)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM
    assert "interrupted by SIGTERM" in err
    data = json.loads(report.read_text())
    assert data["complete"] is False  # one passed, one skipped: not a green run
    cases = by_id(data)
    assert cases["quick[opset18-cpu-random-b1]"]["status"] == "passed"
    stuck = cases["stuck[opset18-cpu-random-b1]"]
    assert stuck["status"] == "skipped"
    assert stuck["message"] == "not run: the run was interrupted by SIGTERM"
    suites = ET.parse(junit).getroot()
    assert suites.get("tests") == "2" and suites.get("skipped") == "1"


def test_a_run_killed_outright_leaves_reports_that_read_red(
        write_spec: Callable[[str], Path], tmp_path: Path) -> None:
    # SIGKILL (or the OOM killer) cannot be handled: what the reports said before it must
    # already count every planned case and say the run did not finish.
    spec = _quick_and_stuck(write_spec, "[17, 18]")
    report, junit, summary = tmp_path / "out.json", tmp_path / "out.xml", tmp_path / "s.md"
    process = subprocess.Popen(
        [sys.executable, "-m", "onnx_parity", "run", str(spec), "--jobs", "2",
         "--json", str(report), "--junit", str(junit), "--summary", str(summary)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    _until_one_passed(report, lambda: os.killpg(process.pid, signal.SIGKILL))
    os.killpg(process.pid, signal.SIGKILL)  # the run and its workers, at once
    process.wait(timeout=60)
    data = json.loads(report.read_text())
    assert data["complete"] is False
    cases = by_id(data)
    assert len(cases) == 4  # every planned case, finished or not
    unfinished = [c for c in cases.values() if c["status"] != "passed"]
    assert {c["model"] for c in unfinished} >= {"stuck"}
    for case in unfinished:
        assert (case["status"], case["message"]) == ("error", "not run: the run did not finish")
    assert data["summary"]["errors"] == len(unfinished) >= 2
    suites = ET.parse(junit).getroot()
    assert suites.get("tests") == "4" and suites.get("errors") == str(len(unfinished))
    # The job summary is written once, at the end: a killed run leaves none to read green.
    assert not summary.exists() or "The run did not finish" in summary.read_text()


def test_the_command_ends_at_once_with_its_output_and_exit_code_whole(tmp_path: Path) -> None:
    # `onnx-parity` and `python -m onnx_parity` skip the interpreter's teardown once main
    # returns (cli/main.py's entry): what they printed, wrote and exit with must all survive it.
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["onnx-parity"] == "onnx_parity.cli.main:entry"
    shutil.copytree(EXAMPLES / "golden", tmp_path / "golden")
    spec = tmp_path / "parity.yaml"
    spec.write_text("version: 1\n"
                    "datasets:\n"
                    "  recorded: {kind: onnx-test-data, path: golden/data}\n"
                    "  drifted: {kind: onnx-test-data, path: golden/drifted}\n"
                    "models:\n"
                    "  - {name: head, onnx: golden/head.onnx, datasets: [recorded]}\n"
                    "  - {name: drifted-head, onnx: golden/head.onnx, datasets: [drifted]}\n")
    command = [sys.executable, "-m", "onnx_parity", "run", str(spec)]
    listed = subprocess.run([*command, "--list"], capture_output=True, text=True, timeout=120,
                            check=False)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == ["head[onnx-cpu-recorded]",
                                     "drifted-head[onnx-cpu-drifted]"]
    report = tmp_path / "report.json"
    done = subprocess.run([*command, "--json", str(report)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 1, done.stdout + done.stderr  # the drifted head fails the gate
    assert done.stdout.rstrip().splitlines()[-1].startswith("1 passed, 1 failed"), done.stdout
    assert by_id(json.loads(report.read_text()))["drifted-head[onnx-cpu-drifted]"]["status"] \
        == "failed"


def test_oversized_inputs_are_refused_with_the_arithmetic(
    write_spec: Callable[[str], Path], run_cli: Callable[..., Any]
) -> None:
    spec = write_spec("""
        version: 1
        defaults: {exporter: torchscript}
        datasets:
          big: {kind: random, samples: 4, batch_sizes: [64]}
        models:
          - name: typo
            torch: models.py:make_linear
            inputs: {x: {shape: [batch, 4000000, 4]}}
            datasets: [big]
          - name: fine
            torch: models.py:make_linear
            inputs: {x: {shape: [batch, 4]}}
    """)
    code, _, _, report = run_cli(spec)
    assert code == 1
    cases = by_id(report)
    typo = cases["typo[opset18-cpu-big-b64]"]
    assert (typo["status"], typo["stage"]) == ("error", "load")
    assert typo["message"] == (
        "inputs would take 15.3 GiB (x: 4 × [64, 4000000, 4] × 4 B), over the budget of "
        "2.0 GiB per case; check the shapes, or raise --max-input-mb"
    )
    assert cases["fine[opset18-cpu-random-b1]"]["status"] == "passed"


def test_a_model_over_its_memory_limit_fails_alone(write_spec: Callable[[str], Path],
                                                   run_cli: Callable[..., Any]) -> None:
    spec = write_spec("""
        version: 1
        defaults: {exporter: torchscript}
        models:
          - name: greedy
            torch: models.py:make_greedy
            inputs: {x: {shape: [batch, 4]}}
            memory_limit: 3072
          - name: fine
            torch: models.py:make_linear
            inputs: {x: {shape: [batch, 4]}}
    """)
    code, _, _, report = run_cli(spec)
    assert code == 1
    cases = by_id(report)
    greedy = cases["greedy[opset18-cpu-random-b1]"]
    assert (greedy["status"], greedy["stage"]) == ("error", "run")
    assert "can't allocate memory" in greedy["message"]
    assert cases["fine[opset18-cpu-random-b1]"]["status"] == "passed"


def test_a_small_memory_limit_is_the_models_not_torchs_import(
        write_spec: Callable[[str], Path], run_cli: Callable[..., Any]) -> None:
    """A worker maps torch's libraries (hundreds of MiB of address space on the CPU build,
    gigabytes on a CUDA one) before a model's limit applies, and the limit counts on top."""
    spec = write_spec("""
        version: 1
        defaults: {exporter: torchscript}
        models:
          - name: small
            torch: models.py:make_linear
            inputs: {x: {shape: [batch, 4]}}
            memory_limit: 300
    """)
    code, out, _, report = run_cli(spec, "--jobs", "2")
    assert code == 0, out
    assert report["cases"][0]["status"] == "passed"


@pytest.mark.parametrize("payload", PAYLOADS)
def test_hostile_messages_cannot_inject(payload: str, write_spec: Callable[[str], Path],
                                        run_cli: Callable[..., Any], tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Text from a model (here its exception) reaches every report, and changes none of them."""
    (tmp_path / "hostile.py").write_text(
        "def make():\n    raise RuntimeError(" + repr(payload) + ")\n")
    step_summary, junit = tmp_path / "summary.md", tmp_path / "junit.xml"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_WORKSPACE", str(tmp_path))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    spec = write_spec("""
        version: 1
        models:
          - name: hostile
            torch: hostile.py:make
            inputs: {x: {shape: [batch, 4]}}
    """)
    code, out, _, report = run_cli(spec, "--junit", str(junit))
    assert code == 1
    assert payload in report["cases"][0]["message"]  # JSON keeps the text as it was
    lines = out.splitlines()
    commands = [line for line in lines if line.startswith("::")]
    assert len(commands) == 1, commands  # the console lines cannot start a command either
    assert commands[0].startswith("::error file=parity.yaml,line=3,title=")
    assert "\r" not in commands[0]
    properties, message = commands[0][len("::error "):].split("::", 1)
    assert len(properties.split(",")) == 3  # file, line, title: nothing smuggled in
    assert _unescape(message).count("RuntimeError") == 1
    summary = step_summary.read_text()
    tables = _tables(summary)
    assert tables and all(len({_cells(row) for row in table}) == 1 for table in tables), tables
    assert "<script>" not in summary and "\x1b" not in summary
    ET.parse(junit)  # the XML stays well-formed


def _unescape(data: str) -> str:
    """GitHub's own reading of a workflow command's message."""
    return data.replace("%0D", "\r").replace("%0A", "\n").replace("%25", "%")


def _tables(markdown: str) -> list[list[str]]:
    tables: list[list[str]] = []
    previous = False
    for line in markdown.splitlines():
        is_row = line.startswith("|")
        if is_row and not previous:
            tables.append([])
        if is_row:
            tables[-1].append(line)
        previous = is_row
    return tables


def _cells(row: str) -> int:
    return len(row.replace("\\|", "").split("|"))


def test_an_empty_run_fails_unless_allowed(write_spec: Callable[[str], Path],
                                           run_cli: Callable[..., Any]) -> None:
    spec = write_spec("""
        version: 1
        models:
          - name: lin
            torch: models.py:make_linear
            inputs: {x: {shape: [batch, 4]}}
    """)
    code, _, err, _ = run_cli(spec, "--select", "other*")
    assert code == 1 and "nothing was checked" in err


def test_help_and_spec_errors_do_not_import_torch(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("version: 1\nmodels:\n  - name: m\n    tourch: x.py:f\n")
    probe = (
        "import sys\nfrom onnx_parity.cli.main import main\n"
        f"code = main(['run', {str(tmp_path / 'bad.yaml')!r}])\n"
        "heavy = [m for m in ('torch', 'onnxruntime', 'onnx') if m in sys.modules]\n"
        "print(code, heavy)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"}, check=True)
    assert done.stdout.strip() == "2 []"
    assert "bad.yaml:4:5: unknown key 'tourch'" in done.stderr


def test_every_run_flag_reaches_the_settings(tmp_path: Path) -> None:
    from onnx_parity.cli.main import build_parser, run_settings
    from onnx_parity.plan.select import Selection
    from onnx_parity.plan.shard import Shard
    from onnx_parity.report.publish import ReportSettings

    args = build_parser().parse_args([
        "run", "p.yaml", "--select", "a*", "--select", "b*", "--targets", "cpu, cuda",
        "--junit", "j.xml", "--json", "r.json", "--summary", "s.md", "--jobs", "3",
        "--work-dir", "w", "--max-input-mb", "1.5", "--list", "--allow-empty", "-v",
        "--localize", "always", "--artifacts", "a", "--shard", "2/3", "--baseline", "b.json",
        "--skip-unavailable", "--fail-on", "error", "--no-annotations", "--no-step-summary",
        "--causes", "never"])
    settings = run_settings(args)
    assert settings.selection == Selection(("a*", "b*"), ("cpu", "cuda"))
    assert settings.reports == ReportSettings(json=Path("r.json"), junit=Path("j.xml"),
                                              summary=Path("s.md"), fail_on="error",
                                              annotations=False, step_summary=False)
    assert (settings.spec, settings.jobs, settings.work_dir) == (Path("p.yaml"), 3, Path("w"))
    assert settings.input_budget == 3 << 19 and settings.localize == "always"
    assert (settings.artifacts, settings.shard, settings.baseline) == (
        Path("a"), Shard(2, 3), Path("b.json"))
    assert settings.list_only and settings.allow_empty and settings.verbose
    assert settings.skip_unavailable and settings.causes == "never"
    defaults = run_settings(build_parser().parse_args(["run", "p.yaml"]))
    assert defaults.selection == Selection() and defaults.reports == ReportSettings()
    assert (defaults.jobs, defaults.localize, defaults.input_budget) == (0, "failed", 2 << 30)
    assert defaults.causes == "failed"
    assert not (defaults.list_only or defaults.allow_empty or defaults.skip_unavailable)


def test_a_negative_job_count_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    from onnx_parity.cli.main import main

    assert main(["run", "nowhere.yaml", "--jobs", "-1"]) == 2
    assert "onnx-parity: error: --jobs must be 0 (automatic) or more" in capsys.readouterr().err


def test_run_reads_its_workers_from_the_command_line_before_parsing_it() -> None:
    from onnx_parity.cli.main import _prestarted, main

    cores = os.cpu_count() or 1
    assert _prestarted(["run", "parity.yaml"]) == 1
    assert _prestarted(["run", "parity.yaml", "--jobs", "2"]) == min(2, cores)
    assert _prestarted(["run", "--jobs=64", "parity.yaml"]) == cores
    assert _prestarted(["run", "parity.yaml", "--list", "--jobs", "2"]) == 0
    assert _prestarted(["run", "--help"]) == 0
    assert _prestarted(["run", "parity.yaml", "--jobs"]) == 1
    assert main(["run", "parity.yaml", "--jobs"]) == 2  # argparse refuses it, the worker ends
