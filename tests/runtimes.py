"""Small environments with other ONNX Runtime builds, for the tests of `python:` targets: the
classic OpenVINO build and an older onnxruntime, each with numpy and nothing else.

Each is made once, in `.venv-runtimes/<name>` at the repository's root (ignored by git), and
kept for later runs; making both takes about 15 seconds of CPU. CI makes them before the tests
(`python tests/runtimes.py`, in .ci/run), so that the tests only find them. Where the package
registry cannot be reached (a user's machine offline) the tests that need them skip; where it
can, a failed install fails them.
"""

from __future__ import annotations

import contextlib
import fcntl
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDER = ROOT / ".venv-runtimes"
# name -> the onnxruntime build it holds; numpy is the one constraints.txt pins.
ENVIRONMENTS = {
    "openvino": "onnxruntime-openvino==1.24.1",
    "older": "onnxruntime==1.23.2",
}


class Unreachable(Exception):
    """The package registry cannot be reached: the tests that need an environment skip."""


def _numpy_pin() -> str:
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.startswith("numpy=="):
            return line.strip()
    return "numpy"


def python_of(name: str) -> Path:
    """The interpreter of environment `name`, made first if it is not there yet (under a lock,
    so that two test processes make it once)."""
    folder = FOLDER / name
    python = folder / "bin" / "python"
    ready = folder / "ready"
    wanted = f"{ENVIRONMENTS[name]} {_numpy_pin()} --no-deps"
    FOLDER.mkdir(exist_ok=True)
    with open(FOLDER / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ready.is_file() and ready.read_text() == wanted and python.is_file():
            return python
        _reachable(ENVIRONMENTS[name].split("==")[0])
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(folder)
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
        # Without the builds' other dependencies (sympy, protobuf, coloredlogs: for their
        # tools, not for running a session): half the install's time.
        subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                        "--disable-pip-version-check", *wanted.split()],
                       check=True, timeout=600)
        ready.write_text(wanted)
    return python


def _reachable(package: str) -> None:
    """One look-up of the package the environment installs; raise Unreachable if it fails."""
    done = subprocess.run([sys.executable, "-m", "pip", "index", "versions", package],
                          capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise Unreachable(f"the package registry cannot be reached for {package}: "
                          f"{(done.stderr.strip().splitlines() or ['?'])[-1]}")


if __name__ == "__main__":  # CI: make them before the tests
    for each in ENVIRONMENTS:
        print(f"{each}: {python_of(each)}")
