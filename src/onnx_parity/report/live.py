"""Report files that land while a run goes on, at a cost per case that does not grow with the run.

Each write replaces the files atomically, so a reader (or a job killed mid-run) always finds
whole, valid files. Writing the whole report after every case would cost the square of the
number of cases; instead the files are written after the first case, then at most once per
`interval` seconds (and never for more than a tenth of the run's time, however large they
grow), and once more at the end. A run that goes quiet (one long export, one hung model)
still gets the cases that finished before it written out: the run loop calls `tick`.

What the first write needs beside the first result (a run's placeholders for the cases not yet
ended, and their parts of the files) is made `ahead`, a piece a tick while the run loop waits
for its workers, not all at once when the first result comes: 1,884 placeholders took 0.3 to
0.5 s, during which the loop took in no result. The first write waits for it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence

from onnx_parity.results import CaseResult, RunReport

INTERVAL = 2.0  # seconds between writes, at least
SHARE = 0.1  # of the wall time, at most, spent writing mid-run


class LiveReports:
    def __init__(self, write: Callable[[RunReport], None],
                 make: Callable[[Sequence[CaseResult]], RunReport],
                 interval: float = INTERVAL, clock: Callable[[], float] = time.monotonic,
                 ahead: Iterable[Callable[[], object]] = ()) -> None:
        self.write, self.make, self.interval, self.clock = write, make, interval, clock
        self.ahead = deque(ahead)  # empty once all done
        self.results: list[CaseResult] = []
        self.due = -float("inf")
        self.writes = 0
        self.pending = False  # results since the last write

    def add(self, result: CaseResult) -> None:
        self.results.append(result)
        self.pending = True
        if not self.ahead:
            self._due()

    def tick(self) -> float:
        """Write if results wait and the time has come; the seconds until a write is due
        (infinity when nothing waits, none while work `ahead` is left: one piece is done, the
        run loop's results taken in between)."""
        if self.ahead:
            self.ahead.popleft()()
            return 0.0
        return self._due()

    def _due(self) -> float:
        if not self.pending:
            return float("inf")
        now = self.clock()
        if now >= self.due:
            self.flush()
            return float("inf")
        return self.due - now

    def flush(self) -> None:
        """Write what has finished so far, now."""
        started = self.clock()
        self.write(self.make(self.results))
        took = self.clock() - started
        self.writes += 1
        self.pending = False
        self.due = self.clock() + max(self.interval, took / SHARE)
