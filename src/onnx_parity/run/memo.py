"""One model's cache in a worker, behind each case's resolution (prepared.py): each value its
cases share (keys.py names them) made once and handed to every case that needs it. A value whose
making failed is remembered and raised again for the next case that needs it, not retried: the
first case that ends with the failure says it in full, each later one points to that case.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import numpy as np

from onnx_parity.errors import StageError
from onnx_parity.run.keys import ExportKey, Key, Made, made_once
from onnx_parity.run.protocol import WorkerTask

T = TypeVar("T")
CalibrationFeeds = list[dict[str, np.ndarray]]  # the rows a static int8 variant is calibrated on
# --cache: taken from it, made and kept there, made again over an entry it rejected, or made
# without it (the key cannot vouch for what the model's code read)
CacheState = Literal["hit", "miss", "rebuilt", "uncached"]


@dataclass
class ModelMemo:
    """The cases of one model, in one worker, with what they share."""

    task: WorkerTask
    values: dict[Key[Any], Any] = field(default_factory=dict)
    export_logs: dict[ExportKey, str] = field(default_factory=dict)
    calibration: dict[str, CalibrationFeeds] = field(default_factory=dict)  # by precision
    ended: dict[StageError, str] = field(default_factory=dict)  # each failure's first case
    reads: Any = None  # --cache: what its factory and first forward() read (prepare/reads.py)
    cached: dict[Key[Any], CacheState] = field(default_factory=dict)  # --cache: what it did
    cache_why: dict[Key[Any], str] = field(default_factory=dict)  # why rebuilt or uncached
    # What the model's files are made of (making.py): its module, program, exports, checks and
    # variants, shared by its files, held below the memo's entry of each file (FileKey) as a
    # file's own values are (Made): a case that makes its file looks into the memo once.
    files: Made = field(init=False)

    def __post_init__(self) -> None:
        self.files = Made(self.told)

    def get(self, key: Key[T], make: Callable[[], T], case_id: str | None = None) -> T:
        """The value of `key`, made once; a StageError `make` raised is raised again to every
        case that needs the value, as `case_id` reads it (told)."""
        return made_once(self.values, key, make, lambda exc: self.told(exc, case_id))

    def told(self, error: StageError, case_id: str | None) -> StageError:
        """A failure as `case_id`'s case reads it: in full until a case has ended with it (and
        again for that case), then a pointer to that case, so a long message (an exporter's
        guard, 4,000 characters) is said once per model. A case that only met the failure in a
        follow-up (a cause's re-run with the other exporter) did not end with it, so a later
        case is never pointed to a case that failed otherwise."""
        original = error.original
        first = self.ended.get(original)
        return original if first is None or first == case_id else original.again(first)

    def end_with(self, error: StageError, case_id: str) -> None:
        """`case_id`'s case ended with `error`: later cases that meet it point here."""
        self.ended.setdefault(error.original, case_id)
