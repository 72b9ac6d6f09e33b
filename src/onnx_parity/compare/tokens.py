"""A decoder's greedy tokens judged, pure numpy: PyTorch's and ONNX Runtime's picks step by
step, and wherever they differ, whether that is drift or a near tie.

Two logits that are each within their tolerance of the reference (|a - e| <= atol + rtol·|e|)
can swap order only when the reference's gap between them is at most the sum of their two
allowances. A divergence within that is a near tie: both sides are right to the tolerance asked
for, and greedy decoding broke the tie differently; it does not fail the case. A wider gap means
one of the two logits is out of its tolerance: drift, which fails it. ONNX Runtime's side is fed
PyTorch's token at every step (run/adapters/greedy.py), so the two sides decode the same
text after a near tie, and every step is judged: drift at a later step fails there.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from onnx_parity.findings import TokenRecord
from onnx_parity.results import Tolerance
from onnx_parity.wording import counted, fmt_measured

Steps = Sequence[np.ndarray]  # one sample's logits at each step, [batch, seq, vocab]


def judge_tokens(expected: Sequence[Steps], actual: Sequence[Steps],
                 tolerance: Tolerance) -> TokenRecord:
    """The tokens' verdict over every sample and step: the earliest drift where there is
    one, else the earliest near tie, else agreement at every step; `agreed` counts the steps
    whose tokens agree in every sample and row, `diverged` those where some differ."""
    steps = max((len(s) for s in expected), default=0)
    found: list[TokenRecord] = []
    diverged: set[int] = set()
    for sample, (reference, observed) in enumerate(zip(expected, actual, strict=True)):
        for record in _divergences(sample, reference, observed, tolerance, steps):
            found.append(record)
            diverged.add(record.step or 0)
    agreed = steps - len(diverged)
    if not found:
        return TokenRecord(steps=steps, agreed=steps, comparable=steps)
    drift = [d for d in found if not d.near_tie]
    first = min(drift or found, key=lambda d: (d.step or 0, d.sample or 0, d.row or 0))
    return TokenRecord(steps=steps, agreed=agreed, comparable=steps, step=first.step,
                       sample=first.sample, row=first.row, expected=first.expected,
                       actual=first.actual, gap=first.gap, allowed=first.allowed,
                       near_tie=first.near_tie, diverged=len(diverged))


def _divergences(sample: int, reference: Steps, observed: Steps, tolerance: Tolerance,
                 steps: int) -> list[TokenRecord]:
    """Every step and row where the two sides' greedy tokens differ, each judged."""
    found = []
    for index, (e, a) in enumerate(zip(reference, observed, strict=True)):
        e_last = np.asarray(e, dtype=np.float64)[:, -1, :]
        a_last = np.asarray(a, dtype=np.float64)[:, -1, :]
        e_tok, a_tok = np.argmax(e_last, axis=-1), np.argmax(a_last, axis=-1)
        for row in np.flatnonzero(e_tok != a_tok):
            mine, theirs = e_last[row, e_tok[row]], e_last[row, a_tok[row]]
            allowed = sum(tolerance.atol + tolerance.rtol * abs(v) for v in (mine, theirs))
            gap = float(mine - theirs)
            found.append(TokenRecord(
                steps=steps, agreed=index, comparable=steps, step=index + 1,
                sample=sample, row=int(row), expected=int(e_tok[row]),
                actual=int(a_tok[row]), gap=gap, allowed=float(allowed),
                near_tie=bool(gap <= allowed)))
    return found


def tokens_sentence(record: TokenRecord) -> str:
    """"greedy tokens agree for 16 of 16 steps", or "tokens diverge at step 5 of 16: 1321 vs
    877 (… logit gap 2.0e-6, within the tolerance 2.0e-4: a near tie, not drift; …)", the
    figures to two digits."""
    if record.step is None:
        return f"greedy tokens agree for {record.agreed} of {record.steps} steps"
    where = f" (sample {record.sample}, row {record.row})" if record.sample or record.row else ""
    # `allowed` is figured from the logits (atol + rtol·|e| for each), not written: measured
    gap, allowed = fmt_measured(record.gap or 0.0), fmt_measured(record.allowed or 0.0)
    others = max(record.diverged - 1, 0)
    also = f" ({counted(others, 'other step')} with a near tie too)" if others else ""
    judged = (f"within the tolerance {allowed}: a near tie, not drift{also}; ONNX Runtime was "
              "fed PyTorch's token from there, and every later step compared" if record.near_tie
              else f"> the tolerance {allowed}: drift")
    return (f"tokens diverge at step {record.step} of {record.steps}{where}: {record.expected} "
            f"vs {record.actual} (PyTorch vs ONNX Runtime; the reference's logit gap between "
            f"them was {gap}, {judged})")
