"""Time per call: a warm-up call first, none where the calls were just made on the session; as
many timed calls as asked for."""

from __future__ import annotations

from onnx_parity.backends.timing import FEW_REPEATS, MAX_REPEATS, time_calls


def _counted() -> tuple[list[int], list[object]]:
    made: list[int] = []
    return made, [lambda k=k: made.append(k) for k in range(3)]


def test_a_warm_up_call_comes_first_and_is_not_timed() -> None:
    made, calls = _counted()
    times = time_calls(calls)
    assert times.repeats == MAX_REPEATS
    assert len(made) == MAX_REPEATS + 1 and made[:2] == [0, 0]  # the warm-up, then sample 0


def test_calls_just_made_on_the_session_are_timed_without_a_warm_up() -> None:
    made, calls = _counted()
    times = time_calls(calls, warm=True)
    assert times.repeats == MAX_REPEATS
    assert made == [k % 3 for k in range(MAX_REPEATS)]  # the samples in turn, nothing more


def test_as_many_timed_calls_as_asked_for() -> None:
    made, calls = _counted()
    times = time_calls(calls, warm=True, repeats=FEW_REPEATS)
    assert times.repeats == FEW_REPEATS < MAX_REPEATS
    assert made == [k % 3 for k in range(FEW_REPEATS)]
