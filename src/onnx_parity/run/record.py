"""What one case's flow gathers as it goes: the stage it is in (for the parent's progress and
-v), its notes and details. Owned by one call of `flow.run_case`, never shared between cases.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from onnx_parity.findings import CaseDetails
from onnx_parity.run.protocol import Progress

if TYPE_CHECKING:
    from onnx_parity.explain.causes import Numerics
    from onnx_parity.literals import Stage
    from onnx_parity.plan.cases import Case

logger = logging.getLogger(__name__)


class CaseLog(Protocol):
    """Where the worker's log lines go under -v; `case` leads each line (worker.py)."""

    case: str


_STAGE_WORDS = {"load": "loading the model", "export": "exporting",
                "check": "checking the ONNX file", "run": "running", "compare": "comparing"}


@dataclass
class CaseRecord:
    """One case in flight: `enter` a stage before its work, so a crash, a hang or a stage's
    exception is reported at the right stage."""

    case: Case
    index: int = -1  # the case's place in its model's cases, for the progress
    progress: Progress = field(default_factory=Progress)
    log: CaseLog | None = None
    stage: Stage = "load"
    notes: list[str] = field(default_factory=list)
    details: CaseDetails = field(default_factory=CaseDetails)
    numerics: Numerics | None = None  # a GPU case's arithmetic, in effect
    opset: int | None = None  # the case's, or a shipped file's own once it is read
    said: set[Stage] = field(default_factory=set)  # the stages -v has named for this case

    def enter(self, stage: Stage) -> None:
        # -v names each stage once per case: the flow goes back to a stage it has been in
        # (a forward pass that names the outputs before the export, a re-run while explaining),
        # and a line per return would read as the case doing its work twice.
        if self.log is not None and stage not in self.said:
            self.said.add(stage)
            self.log.case = self.case.id
            logger.debug("%s: %s", self.case.id, _STAGE_WORDS[stage])
        self.stage = stage
        self.progress.case(self.index, stage)

    def note(self, text: str) -> None:
        self.notes.append(text)

    def found(self, **details: Any) -> None:
        """Add to what the case found (CaseDetails' fields)."""
        self.details = dataclasses.replace(self.details, **details)

    def found_all(self, more: CaseDetails) -> None:
        """Add what a follow-up found: its fields that are set."""
        empty = CaseDetails()
        self.found(**{f.name: getattr(more, f.name) for f in dataclasses.fields(more)
                      if getattr(more, f.name) != getattr(empty, f.name)})
