"""The suite's hooks and fixtures; the helpers tests import live in helpers.py."""

from __future__ import annotations

import json
import shutil
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers import FIXTURES, ROOT
from onnx_parity.cli.main import main

_BEFORE = pytest.StashKey[set[str] | None]()


def _untracked_and_changed() -> set[str] | None:
    """`git status` of the checkout: files changed or new (not ignored); None outside git."""
    import subprocess

    try:
        done = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"],
                              cwd=ROOT, capture_output=True, text=True, check=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return {line[3:] for line in done.stdout.splitlines()}


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_BEFORE] = _untracked_and_changed()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Tests write only under their tmp paths: a file that appeared in the checkout during the
    run (an ONNX Runtime profile, a report written to the working directory) fails it."""
    before = session.config.stash.get(_BEFORE, None)
    after = _untracked_and_changed()
    if before is None or after is None:
        return
    appeared = sorted(after - before)
    if appeared:
        print(f"\nthe tests left files in the checkout: {', '.join(appeared)}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """GPU tests skip themselves where ONNX Runtime cannot create a CUDA session."""
    if not any("gpu" in item.keywords for item in items):
        return
    from onnx_parity.backends import probe_cuda

    if not probe_cuda()[0]:  # ONNX Runtime really runs a session on CUDA (listed is not enough)
        skip = pytest.mark.skip(reason="needs a CUDA GPU usable by onnxruntime-gpu")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)


@pytest.fixture
def write_spec(tmp_path: Path) -> Callable[[str], Path]:
    """Write a spec next to a copy of the fixture models, as a user's repository has them."""
    shutil.copy(FIXTURES / "models.py", tmp_path / "models.py")

    def write(text: str) -> Path:
        path = tmp_path / "parity.yaml"
        path.write_text(textwrap.dedent(text).lstrip())
        return path

    return write


@pytest.fixture
def run_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Callable[..., Any]:
    """Run `onnx-parity run` in-process; return exit code, stdout, stderr and the JSON report."""

    def run(spec: Path, *args: str) -> tuple[int, str, str, dict[str, Any]]:
        report = tmp_path / "report.json"
        code = main(["run", str(spec), "--json", str(report), *args])
        out, err = capsys.readouterr()
        data = json.loads(report.read_text()) if report.exists() else {}
        return code, out, err, data

    return run


def _runtime(name: str) -> Path:
    from runtimes import Unreachable, python_of

    try:
        return python_of(name)
    except Unreachable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def openvino_python() -> Path:
    """The interpreter of an environment with onnxruntime-openvino (tests/runtimes.py)."""
    return _runtime("openvino")


@pytest.fixture(scope="session")
def older_python() -> Path:
    """The interpreter of an environment with an older onnxruntime (tests/runtimes.py)."""
    return _runtime("older")
