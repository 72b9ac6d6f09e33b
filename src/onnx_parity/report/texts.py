"""Each case's part of a report file, made once per result.

A run writes its JSON and JUnit reports several times while it goes (report/live.py), each time
with every planned case, and once more at the end. A result never changes (a frozen value), so
its line of JSON and its JUnit testcase are made the first time a write, or the run as the
result comes in, asks for them; a later write makes the parts of the results new since, and
joins the rest. Writing a report of 1,884 cases took about 0.4 s each time, the run's loop held
up meanwhile; its final write, after the workers' last result, came on top of the run's time.

A part is found by the result's identity, and kept with the result itself: a new result with
the same id (the case run again, a placeholder replaced by its outcome) is a new part.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

from onnx_parity.results import CaseResult

T = TypeVar("T")

__all__ = ["CaseTexts"]


class CaseTexts:
    """The parts made so far, by the kind of file (and whatever else the part depends on, such
    as the spec's path in a JUnit testcase) and the results they are made of."""

    def __init__(self) -> None:
        # By kind and the results' ids. Each entry holds its results: while it is here, no
        # other object has one of those ids.
        self._made: dict[tuple[Hashable, tuple[int, ...]], tuple[tuple[CaseResult, ...],
                                                                 Any]] = {}

    def part(self, kind: Hashable, case: CaseResult, make: Callable[[CaseResult], T]) -> T:
        """`make(case)`, made once for this result and kind (a case's JSON line, its JUnit
        testcase)."""
        return self.joined(kind, (case,), lambda _: make(case))

    def joined(self, kind: Hashable, cases: Sequence[CaseResult],
               make: Callable[[Sequence[CaseResult]], T]) -> T:
        """`make(cases)`, made once for these results, in this order, and kind (a model's
        JUnit testsuite, whose kind holds what else it says: the spec, the environment)."""
        key = (kind, tuple(map(id, cases)))
        found = self._made.get(key)
        if found is None:
            found = self._made[key] = (tuple(cases), make(cases))
        made: T = found[1]
        return made

    def keep(self, cases: Sequence[CaseResult]) -> None:
        """Forget the parts of results no longer in the report (placeholders of cases that
        have ended since, results replaced): what is kept is one report's worth."""
        current = {id(case) for case in cases}
        self._made = {key: value for key, value in self._made.items()
                      if current.issuperset(key[1])}
