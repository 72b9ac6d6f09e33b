"""torch only where it is needed, and a worker's last words when it dies.

Each test runs the command line in a child process whose import of torch (or of the worker
module, in workers only) is made to fail the way a broken CUDA install makes it fail.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import onnx_parity
from helpers import ROOT

SOURCE = Path(onnx_parity.__file__).resolve().parent.parent
CUDNN_MISSING = "libcudnn.so.9: cannot open shared object file: No such file or directory"


def _broken_torch(folder: Path) -> Path:
    """A `torch` package that fails to import as torch does when cuDNN cannot be loaded."""
    package = folder / "torch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(f"raise ImportError({CUDNN_MISSING!r})\n")
    return folder


def _run(spec: Path, *paths: Path) -> tuple[int, str, dict[str, Any]]:
    report = spec.parent / "report.json"
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join([*map(str, paths), str(SOURCE)])}
    done = subprocess.run(
        [sys.executable, "-m", "onnx_parity", "run", str(spec), "--json", str(report)],
        capture_output=True, text=True, env=env, cwd=spec.parent, timeout=300, check=False)
    data = json.loads(report.read_text()) if report.exists() else {}
    return done.returncode, done.stdout + done.stderr, data


def _golden(tmp_path: Path, extra: str = "") -> Path:
    shutil.copytree(ROOT / "examples" / "golden", tmp_path / "golden")
    shutil.copy(ROOT / "tests" / "fixtures" / "models.py", tmp_path / "models.py")
    spec = tmp_path / "parity.yaml"
    spec.write_text(textwrap.dedent("""\
        version: 1
        datasets:
          golden: {kind: onnx-test-data, path: golden/data}
        models:
          - name: golden-head
            onnx: golden/head.onnx
            datasets: [golden]
        """) + extra)
    return spec


def test_an_onnx_only_spec_passes_where_torch_cannot_be_imported(tmp_path: Path) -> None:
    code, output, report = _run(_golden(tmp_path), _broken_torch(tmp_path / "fake"))
    assert code == 0, output
    assert report["cases"] and {c["status"] for c in report["cases"]} == {"passed"}


def test_a_torch_model_beside_it_fails_alone_with_the_import_error(tmp_path: Path) -> None:
    spec = _golden(tmp_path, "  - name: lin\n    torch: models.py:make_linear\n"
                             "    inputs: {x: {shape: [batch, 4]}}\n")
    code, output, report = _run(spec, _broken_torch(tmp_path / "fake"))
    assert code == 1, output
    cases = {c["model"]: c for c in report["cases"]}
    assert {c["status"] for c in report["cases"] if c["model"] == "golden-head"} == {"passed"}
    assert cases["lin"]["status"] == "error" and cases["lin"]["stage"] == "load"
    assert f"ImportError: {CUDNN_MISSING}" in cases["lin"]["message"]


def test_a_worker_that_dies_while_starting_reports_its_last_words(tmp_path: Path) -> None:
    # Only workers are broken: the module they run, which the run's own process never
    # imports, cannot be imported (in a forked worker and a spawned one alike).
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(textwrap.dedent(f"""\
        import sys
        class Refuse:
            def find_spec(self, name, path=None, target=None):
                if name == "onnx_parity.run.worker":
                    raise ImportError({CUDNN_MISSING!r})
        sys.meta_path.insert(0, Refuse())
        """))
    code, output, report = _run(_golden(tmp_path), hooks)
    assert code == 1, output
    case = report["cases"][0]
    assert case["status"] == "error" and case["stage"] == "load"
    assert case["message"] == (
        f"not run: the worker exited with code 1 before its first case: ImportError: "
        f"{CUDNN_MISSING}")
    assert any("Traceback" in line for line in case["details"]["worker_log"])
    assert "Traceback" not in output  # the worker's stderr went to its log, not the console
