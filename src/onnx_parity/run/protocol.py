"""The contract between the run's process and its workers: what a worker is given (a model's
cases and how to check them), where it says it is (its progress in shared memory), and the
messages it sends back.

A leaf of run/: the scheduler, the pool and the worker all read it, and it reads none of them,
so the parent and the child share one definition without importing each other.
"""

from __future__ import annotations

import datetime
import time
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from onnx_parity.frozen import frozen
from onnx_parity.literals import STAGES, Causes, Localize

if TYPE_CHECKING:
    from onnx_parity.compare.baseline import Baseline
    from onnx_parity.compare.chain import Rules  # numpy: the workers', not the run's process's
    from onnx_parity.findings import Gpu
    from onnx_parity.literals import Stage
    from onnx_parity.plan.cases import Case
    from onnx_parity.prepare.cache import ExportCache
    from onnx_parity.spec import ModelSpec

# What a worker sends: ("result", CaseResult) as each case ends; ("log", level, logger, text)
# under -v; ("done",) when its batch is checked.
RESULT, LOG, DONE = "result", "log", "done"


@frozen
class WorkerTask:
    """One model's cases for a worker, with what the worker needs to check them."""

    spec_root: Path
    model: ModelSpec
    cases: tuple[Case, ...]
    work_dir: Path
    localize: Localize = "failed"  # where the drift starts (explain/localize/)
    causes: Causes = "failed"  # the cause ladder (explain/ladder.py)
    artifacts: Path | None = None  # a repro bundle per failed case goes here
    threads: int = 1  # compute threads in torch and ONNX Runtime alike
    verbose: bool = False  # the worker's log lines go to the parent, which prints them (-v)
    gpus: tuple[Gpu, ...] = ()  # as the preflight found them: which GPU a case ran on
    # The baseline run's results for these cases (compare/baseline.py), judged in the worker
    # by the verdict chain after the follow-ups, which a growth within tolerance does not get.
    baseline: Baseline | None = None
    profile: bool = False  # --profile: ONNX Runtime's profile per case, its costliest nodes
    cache: ExportCache | None = None  # --cache: exports and variants kept between runs
    today: datetime.date = field(default_factory=datetime.date.today)  # expectations' `until`

    def rules_for(self, case: Case) -> Rules:
        """What the verdict chain judges the case by beyond its comparisons."""
        from onnx_parity.compare.chain import Rules  # numpy: the workers', not the run's process's

        return Rules(baseline=self.baseline, regression=case.model.regression,
                     expectations=tuple(case.model.expect), today=self.today)

    @property
    def cap(self) -> int:
        """The bytes a case's inputs may take, recorded ones too: the run's (--max-input-mb)."""
        return self.cases[0].input_budget


class Progress:
    """Where a worker is, in shared memory the parent reads when the worker dies or hangs: the
    model of its batch, the case of that model, the stage, and when the model started. Writing
    it costs no message, so the stages of thousands of small cases cost the parent nothing.

    `slots` is a RawArray of 4 doubles shared with the parent ([] in a plain test: no one reads).
    """

    def __init__(self, slots: Any = None) -> None:
        self.slots = slots if slots is not None else [-1.0, -1.0, 0.0, 0.0]

    def model(self, index: int) -> None:
        self.slots[1] = -1.0
        self.slots[3] = time.monotonic()  # system-wide on Linux: the parent's clock too
        self.slots[0] = float(index)

    def case(self, index: int, stage: Stage) -> None:
        self.slots[2] = float(STAGES.index(stage))
        self.slots[1] = float(index)

    @staticmethod
    def read(slots: Any) -> tuple[int, int, Stage, float]:
        """(model index or -1, case index or -1, stage, the model's start)."""
        return int(slots[0]), int(slots[1]), STAGES[int(slots[2])], float(slots[3])
