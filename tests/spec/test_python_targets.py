"""A target's `python:` and a model's `reference:` in the spec: located errors for an
interpreter that is missing, not runnable or without onnxruntime, and for a reference that names
no target or leaves nothing to compare."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from onnx_parity.errors import SpecError
from onnx_parity.spec.load import parse_spec


def _problems(text: str, folder: Path) -> list[tuple[int, str]]:
    with pytest.raises(SpecError) as caught:
        parse_spec(textwrap.dedent(text), folder / "parity.yaml")
    assert all(p.file == str(folder / "parity.yaml") for p in caught.value.problems)
    return [(p.line, p.message) for p in caught.value.problems]


def test_a_bad_python_or_reference_is_a_located_error(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")],
                   check=True)
    (tmp_path / "not-exec").write_text("")
    (tmp_path / "m.onnx").write_bytes(b"")
    found = _problems("""\
        version: 1
        targets:
          gone: {python: .venv-gone/bin/python, providers: [CPUExecutionProvider]}
          bare: {python: bare/bin/python, providers: [CPUExecutionProvider]}
          flat: {python: not-exec, providers: [CPUExecutionProvider]}
          away: {python: ../elsewhere/python, providers: [CPUExecutionProvider]}
        models:
          - name: m
            onnx: m.onnx
            reference: olde
            targets: [cpu]
          - name: n
            onnx: m.onnx
            reference: cpu
            targets: [cpu]
        """, tmp_path)
    said = dict(found)
    assert said[3].startswith("target 'gone': python ") and said[3].endswith(
        "/.venv-gone/bin/python does not exist: name the interpreter of the environment that "
        "holds the target's onnxruntime (e.g. .venv-ov/bin/python)")
    assert "bare/bin/python has no onnxruntime: install the target's onnxruntime" in said[4]
    assert "not-exec is not an executable file" in said[5]
    assert "is outside the spec's folder" in said[6] and "--allow-outside-repo" in said[6]
    assert "reference names undefined target 'olde'" in said[10]
    assert "reference 'cpu' is the model's only target" in said[14]
    # With a reference, an ONNX file needs no recorded outputs: random data is enough.
    assert not any("kind random" in message for _, message in found)


def test_the_check_runs_a_file_by_path_in_that_interpreter(tmp_path: Path,
                                                             older_python: Path) -> None:
    from onnx_parity.spec.targets import HAS_ONNXRUNTIME

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")],
                   check=True)
    said = {name: subprocess.run([str(python), "-I", str(HAS_ONNXRUNTIME)], check=False,
                                 capture_output=True).returncode
            for name, python in {"older": older_python,
                                 "bare": tmp_path / "bare" / "bin" / "python"}.items()}
    assert said == {"older": 0, "bare": 1}
    # An interpreter that fails otherwise is named with its last words.
    broken = tmp_path / "broken-python"
    broken.write_text("#!/bin/sh\necho 'Fatal Python error: init failed' >&2\nexit 3\n")
    broken.chmod(0o755)
    (tmp_path / "m.onnx").write_bytes(b"")
    said_of = dict(_problems("""\
        version: 1
        targets:
          broken: {python: broken-python, providers: [CPUExecutionProvider]}
        models:
          - name: m
            onnx: m.onnx
            targets: [broken]
        """, tmp_path))
    message = said_of[3]
    assert message.endswith(
        "broken-python has no onnxruntime (Fatal Python error: init failed): install the "
        "target's onnxruntime build and numpy there (pip install onnxruntime-openvino numpy, "
        "say)"), message
