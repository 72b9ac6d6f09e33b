"""top-k agreement: the share of rows, along the last axis (every leading axis flattened into
rows), whose k largest values sit at the same indices in both; among equal values the lower
index ranks first, on both sides. A row with a NaN never agrees. Recorded as "top<k>"."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from onnx_parity.frozen import frozen
from onnx_parity.metrics.base import Array, Samples, Share, number, samples, whole


@frozen
class TopK:
    """The share of rows whose k largest values sit at the same indices must reach `agreement`."""

    k: int
    agreement: float


def top_indices(rows: Array, k: int) -> Array:
    """Per row, the indices of the k largest values, sorted; among equal values the lower
    index ranks first (a stable sort of the negated values)."""
    import numpy as np

    order = np.argsort(-rows, axis=-1, kind="stable")[..., :k]
    return np.sort(order, axis=-1)


def of(pairs: Sequence[tuple[Array, Array]], k: int) -> float:
    """The share of rows (along the last axis) whose top-k indices agree."""
    return measure(samples(pairs), k)


def measure(wide: Samples, k: int) -> float:
    import numpy as np

    agree = total = 0
    for r, a in wide.pairs:
        if r.shape != a.shape:
            return math.nan
        if not r.size:
            continue
        rows_r = r.reshape(-1, r.shape[-1]) if r.ndim else r.reshape(1, 1)
        rows_a = a.reshape(-1, a.shape[-1]) if a.ndim else a.reshape(1, 1)
        if wide.clean and k == 1:
            # The top one is the first largest value, as argmax finds it (no NaN here).
            same = rows_r.argmax(axis=-1) == rows_a.argmax(axis=-1)
        else:
            clean = ~(np.isnan(rows_r).any(axis=1) | np.isnan(rows_a).any(axis=1))
            same = (top_indices(rows_r, k) == top_indices(rows_a, k)).all(axis=1) & clean
        agree += int(np.count_nonzero(same))
        total += rows_r.shape[0]
    return agree / total if total else math.nan


class TopKAgreement(Share):
    key = "topk"

    def schema(self) -> dict[str, Any]:
        return {
            "title": "Top-k agreement",
            "description": "The share of rows (along the last axis) whose k largest values sit "
            "at the same indices must be at least `agreement`.",
            "type": "object",
            "required": ["k", "agreement"],
            "additionalProperties": False,
            "properties": {
                "k": {"type": "integer", "minimum": 1},
                "agreement": {"type": "number", "minimum": 0, "maximum": 1},
            },
        }

    def read(self, raw: Any) -> Any | None:
        given = raw if isinstance(raw, dict) else {}
        k, agreement = whole(given.get("k")), number(given.get("agreement"))
        return TopK(k, agreement) if k is not None and agreement is not None else None

    def written(self, setting: Any) -> Any:
        return {"k": setting.k, "agreement": setting.agreement}

    def name(self, setting: Any | None) -> str:
        return f"top{setting.k if setting is not None else 1}"

    def owns(self, name: str) -> bool:
        return name.startswith("top") and name[3:].isdigit()

    def threshold(self, setting: Any) -> float:
        return float(setting.agreement)

    def measure(self, samples: Samples, setting: Any | None) -> float:
        # A scalar output has no rows to rank: NaN.
        if not samples.pairs[0][0].ndim:
            return math.nan
        return measure(samples, setting.k if setting is not None else 1)

    def words(self, name: str) -> str:
        return f"top-{name[3:]} agreement"


TOPK = TopKAgreement()
