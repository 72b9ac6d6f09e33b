"""Report files that land while a run goes on, at a cost per case that does not grow with the run.

Each write replaces the files atomically, so a reader (or a job killed mid-run) always finds
whole, valid files. Writing the whole report after every case would cost the square of the
number of cases; instead the files are written once `interval` seconds have passed and a case
has ended, then at most once per `interval` (and never for more than a tenth of the run's time,
however large they grow), and once more at the end. A run that goes quiet (one long export,
one hung model) still gets the cases that finished before it written out: the run loop calls
`tick`. A run shorter than `interval` writes its files once, at the end.

What a write needs beside the results (the placeholders of the cases not yet ended, and their
parts of the files) is made `ahead` once the write is due, for the cases not ended then, a
piece a tick while the run loop waits for its workers, not all at once: 1,884 placeholders took
0.3 to 0.5 s, during which the loop took in no result. The write waits for it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence

from onnx_parity.results import CaseResult, RunReport

INTERVAL = 5.0  # seconds before the first write, and between writes, at least
SHARE = 0.1  # of the wall time, at most, spent writing mid-run


class LiveReports:
    def __init__(self, write: Callable[[RunReport], None],
                 make: Callable[[Sequence[CaseResult]], RunReport],
                 interval: float = INTERVAL, clock: Callable[[], float] = time.monotonic,
                 ahead: Callable[[Sequence[CaseResult]], Iterable[Callable[[], object]]]
                 = lambda results: ()) -> None:
        """`ahead(results)`: the pieces of work a write needs beside `results` (the results so
        far) that are not done yet, asked for once a write comes due."""
        self.write, self.make, self.interval, self.clock = write, make, interval, clock
        self.ahead = ahead
        self.pieces: deque[Callable[[], object]] = deque()  # of the write that is due
        self.asked = False  # whether the due write's pieces were asked for
        self.results: list[CaseResult] = []
        self.due = self.clock() + interval
        self.writes = 0
        self.pending = False  # results since the last write

    def add(self, result: CaseResult) -> None:
        self.results.append(result)
        self.pending = True
        if not self.pieces:
            self._due()

    def tick(self) -> float:
        """Write if results wait and the time has come; the seconds until a write is due
        (infinity when nothing waits, none while work `ahead` of the due write is left: one
        piece is done, the run loop's results taken in between)."""
        if self.pieces:
            self.pieces.popleft()()
            return 0.0
        return self._due()

    def _due(self) -> float:
        if not self.pending:
            return float("inf")
        now = self.clock()
        if now < self.due:
            return self.due - now
        if not self.asked:
            self.asked = True
            self.pieces.extend(self.ahead(self.results))
            if self.pieces:
                return 0.0
        self.flush()
        return float("inf")

    def flush(self) -> None:
        """Write what has finished so far, now."""
        started = self.clock()
        self.write(self.make(self.results))
        took = self.clock() - started
        self.writes += 1
        self.pending = self.asked = False
        self.due = self.clock() + max(self.interval, took / SHARE)
