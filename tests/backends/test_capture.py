"""What native code writes to the process's descriptors is collected, capture by capture: each
gets its own lines, whether the one before wrote some or none (capture.py keeps its file)."""

from __future__ import annotations

import os

from onnx_parity.capture import native_output


def test_each_capture_gets_its_own_lines_after_one_that_wrote_or_did_not() -> None:
    found = []
    for text in (b"first\nsecond\n", b"", b"third\n", b"", b""):
        with native_output() as lines:
            if text:
                os.write(2, text)
        found.append(lines)
    assert found == [["first", "second"], [], ["third"], [], []]


def test_stdout_and_stderr_together_and_the_descriptors_given_back(capfd) -> None:
    with native_output((1, 2)) as lines:
        os.write(1, b"out\n")
        os.write(2, b"err\n")
    assert lines == ["out", "err"]
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"
