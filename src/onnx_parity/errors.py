"""The package's error types: one base, one subclass per stage that can fail."""

from __future__ import annotations

import copy
from typing import ClassVar

from onnx_parity.escape import visible
from onnx_parity.frozen import frozen
from onnx_parity.literals import Stage


def user_frame(exc: BaseException) -> str:
    """' (at models.py:65, in forward)': the innermost frame of the user's own code in the
    exception's traceback, outside site-packages and this package; '' when there is none."""
    import os
    import traceback

    here = os.path.dirname(os.path.abspath(__file__))
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__)
              if "site-packages" not in frame.filename and "dist-packages" not in frame.filename
              and not frame.filename.startswith(("<", here))]
    if not frames:
        return ""
    frame = frames[-1]
    return f" (at {os.path.basename(frame.filename)}:{frame.lineno}, in {frame.name})"


class ParityError(Exception):
    """Base of every error onnx-parity raises on purpose."""


@frozen
class SpecProblem:
    """One thing wrong with a spec, located in its file. The message is one line: whatever user
    text it quotes (a name, a path), newlines and control characters are shown escaped."""

    file: str
    line: int
    column: int
    message: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "message", visible(self.message))

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}: {self.message}"


class SpecError(ParityError):
    """The spec cannot be used; carries every problem found, not just the first."""

    def __init__(self, problems: list[SpecProblem]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


POINTER_LIMIT = 200  # the characters of the first case's message a later case repeats


class StageError(ParityError):
    """A case could not produce outputs to compare; `stage` says where it stopped."""

    stage: ClassVar[Stage] = "run"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.original: StageError = self  # the error said in full, when this one points to it

    def again(self, case_id: str) -> StageError:
        """This failure as a later case that shares it reads it: the same type (so the same
        stage, and an export's log), with a short message that points to `case_id`, the case
        that carries the full one."""
        original = self.original
        lines = original.message.strip().splitlines()
        head = " ".join(lines[0].split()) if lines else ""
        if len(head) > POINTER_LIMIT:
            head = head[:POINTER_LIMIT - 1].rstrip() + "…"
        repeated = copy.copy(original)
        # Every report puts the stage before the message ("export: the same failure as …").
        repeated.message = f"the same failure as in case {case_id}: {head}"
        repeated.args = (repeated.message,)
        repeated.original = original
        return repeated


class LoadError(StageError):
    stage = "load"


class ExportError(StageError):
    stage = "export"

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.log = log  # what the exporter printed; kept with --artifacts


class CheckError(StageError):
    stage = "check"


class RunError(StageError):
    stage = "run"


class CompareError(StageError):
    stage = "compare"
