"""A decoder's greedy tokens judged, pure numpy: PyTorch's and ONNX Runtime's picks step by
step, and at the first step they differ, whether that is drift or a near tie.

Two logits that are each within their tolerance of the reference (|a - e| <= atol + rtol·|e|)
can swap order only when the reference's gap between them is at most the sum of their two
allowances. A divergence within that is a near tie: both sides are right to the tolerance asked
for, and greedy decoding broke the tie differently; it does not fail the case. A wider gap means
one of the two logits is out of its tolerance: drift, which fails it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from onnx_parity.findings import TokenRecord
from onnx_parity.results import Tolerance
from onnx_parity.wording import fmt_measured, fmt_setting

Steps = Sequence[np.ndarray]  # one sample's logits at each step, [batch, seq, vocab]


def judge_tokens(expected: Sequence[Steps], actual: Sequence[Steps],
                 tolerance: Tolerance) -> TokenRecord:
    """The tokens' verdict over every sample: the first drift where there is one (the
    earliest step), else the earliest near tie, else agreement at every step."""
    steps = max((len(s) for s in expected), default=0)
    found: list[TokenRecord] = []
    for sample, (reference, observed) in enumerate(zip(expected, actual, strict=True)):
        divergence = _first_divergence(sample, reference, observed, tolerance, steps)
        if divergence is not None:
            found.append(divergence)
    if not found:
        return TokenRecord(steps=steps, agreed=steps, comparable=steps)
    drift = [d for d in found if not d.near_tie]
    first = min(drift or found, key=lambda d: (d.step or 0, d.sample or 0, d.row or 0))
    # After a row's first different token, its two sides decode different text: no step after
    # the earliest one, in any sample, compares like with like.
    return dataclasses.replace(first, comparable=min(d.step or steps for d in found))


def _first_divergence(sample: int, reference: Steps, observed: Steps, tolerance: Tolerance,
                      steps: int) -> TokenRecord | None:
    for index, (e, a) in enumerate(zip(reference, observed, strict=True)):
        e_last = np.asarray(e, dtype=np.float64)[:, -1, :]
        a_last = np.asarray(a, dtype=np.float64)[:, -1, :]
        e_tok, a_tok = np.argmax(e_last, axis=-1), np.argmax(a_last, axis=-1)
        rows = np.flatnonzero(e_tok != a_tok)
        if rows.size == 0:
            continue
        verdicts = []
        for row in rows:
            mine, theirs = e_last[row, e_tok[row]], e_last[row, a_tok[row]]
            allowed = sum(tolerance.atol + tolerance.rtol * abs(v) for v in (mine, theirs))
            gap = float(mine - theirs)
            verdicts.append(TokenRecord(
                steps=steps, agreed=index, comparable=index + 1, step=index + 1,
                sample=sample, row=int(row), expected=int(e_tok[row]),
                actual=int(a_tok[row]), gap=gap, allowed=float(allowed),
                near_tie=bool(gap <= allowed)))
        return next((v for v in verdicts if not v.near_tie), verdicts[0])
    return None


def tokens_sentence(record: TokenRecord) -> str:
    """"greedy tokens agree for 16 of 16 steps", or "tokens diverge at step 5: 1321 vs 877
    (logit gap 2.0e-6 within the tolerance 2.0e-4: a near tie, not drift)"."""
    if record.step is None:
        return f"greedy tokens agree for {record.agreed} of {record.steps} steps"
    where = f" (sample {record.sample}, row {record.row})" if record.sample or record.row else ""
    gap, allowed = fmt_measured(record.gap or 0.0), fmt_setting(record.allowed or 0.0)
    judged = (f"within the tolerance {allowed}: a near tie, not drift; steps after it decode "
              "different tokens and are not compared" if record.near_tie
              else f"> the tolerance {allowed}: drift")
    return (f"tokens diverge at step {record.step} of {record.steps}{where}: {record.expected} "
            f"vs {record.actual} (PyTorch vs ONNX Runtime; the reference's logit gap between "
            f"them was {gap}, {judged})")
