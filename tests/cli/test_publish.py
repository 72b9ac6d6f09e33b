"""`onnx-parity publish REPORT.json`: the comment, the summary and the annotations from a JSON
report alone, for the step that holds the token. It imports no torch, ONNX or ONNX Runtime, runs
no code the report or its spec names, and takes the report as untrusted data."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fake_github import FakeGitHub, github
from helpers import ROOT
from onnx_parity.cli.main import main
from onnx_parity.report.jsonfile import write_json
from report_fixtures import HOSTILE_MODEL, sample_report

__all__ = ["github"]  # the fixture, imported for the tests here

HEAVY = ("torch", "onnx", "onnxruntime", "onnxscript", "numpy", "yaml", "jsonschema")


def test_publish_imports_no_torch_and_runs_no_model_code(tmp_path: Path) -> None:
    """In a fresh interpreter: after `publish --summary --annotations`, none of the heavy
    packages was imported, and the models file of the spec the report names, which would leave
    a mark if anything imported it, was not run."""
    mark = tmp_path / "model-code-ran"
    (tmp_path / "models.py").write_text(f"open({str(mark)!r}, 'w').close()\n"
                                        "def make():\n    raise SystemExit(9)\n")
    (tmp_path / "parity.yaml").write_text(
        "version: 1\nmodels:\n  - name: m\n    torch: models.py:make\n"
        "    inputs: {x: [1, 4]}\n")
    report = tmp_path / "report.json"
    write_json(sample_report(), report)
    data = json.loads(report.read_text())
    data["spec"] = str(tmp_path / "parity.yaml")
    report.write_text(json.dumps(data))
    probe = textwrap.dedent(f"""
        import json, sys
        from onnx_parity.cli.main import main
        code = main(["publish", {str(report)!r}, "--summary", {str(tmp_path / 's.md')!r},
                     "--annotations"])
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})
        print(json.dumps({{"code": code, "heavy": heavy}}))
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    env.update(GITHUB_ACTIONS="true", PYTHONPATH=str(ROOT / "src"))
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env=env, cwd=tmp_path, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.splitlines()[-1])
    assert found == {"code": 0, "heavy": []}
    assert not mark.exists()
    assert "## ❌ onnx-parity" in (tmp_path / "s.md").read_text()
    assert any(line.startswith("::error ") for line in done.stdout.splitlines())


def test_publish_posts_the_comment_from_the_report(
        github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "report.json"
    write_json(sample_report(), report)
    assert main(["publish", str(report), "--comment"]) == 0  # the verdict is the run's
    (body,) = github.ours()
    assert body.startswith("<!-- onnx-parity:comment models/parity.yaml @ parity/check -->")
    assert "created the onnx-parity comment on pull request #7" in capsys.readouterr().err
    assert main(["publish", str(report), "--comment"]) == 0
    assert len(github.ours()) == 1 and github.requests[-1][0] == "PATCH"


def test_publish_keeps_a_hostile_report_inert(
        github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A report forged by the code it checked: its spec path, model names, case ids and
    messages carry newlines followed by `::`; nothing publish prints or writes starts a
    workflow command but its own escaped annotations."""
    data = json.loads(_written(tmp_path))
    data["spec"] = f"x.yaml\n::error::spec{HOSTILE_MODEL}"
    for case in data["cases"]:
        case["id"] = f"{case['id']}\n::warning::id"
        case["message"] = f"{case['message']}\n::error file=a,line=1::message"
    report = tmp_path / "hostile.json"
    report.write_text(json.dumps(data))
    summary = tmp_path / "summary.md"
    assert main(["publish", str(report), "--comment", "--summary", str(summary),
                 "--annotations"]) == 0
    out, err = capsys.readouterr()
    own = [line for line in out.splitlines() if line.startswith("::")]
    assert own and all(line.startswith("::error file=x.yaml%0A%3A%3Aerror%3A%3Aspec")
                       for line in own)
    assert all("\n" not in line for line in own)
    assert not [line for line in err.splitlines() if line.lstrip().startswith("::")]
    for text in (summary.read_text(), *github.ours()):
        assert not [line for line in text.splitlines() if line.lstrip().startswith("::")]


@pytest.mark.parametrize("content", [None, b"{", b'{"version": 1}', b'{"version": 1e999}'])
def test_a_report_publish_cannot_read_exits_2_naming_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes | None) -> None:
    report = tmp_path / "report.json"
    if content is not None:
        report.write_bytes(content)
    assert main(["publish", str(report), "--comment"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("onnx-parity publish: error: ") and "report.json" in err
    assert "Traceback" not in err


def _written(tmp_path: Path) -> str:
    path = tmp_path / "report.json"
    write_json(sample_report(), path)
    return path.read_text()
