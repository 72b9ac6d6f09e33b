"""Whether an output that passed could have seen anything before it: a reference that is all
zero for every sample (a zero-initialised head: torchvision's ViT, random-init) or the same
for samples whose inputs differ checks nothing upstream, so a fault there would pass too.

Only floating outputs are judged, and only where the evidence is there: the same value across
samples counts only when those samples' inputs differ, and an all-zero reference of a single
sample only when it came from a model with weights (a factory), not from recorded data, where
zero is often the op's right answer (a reduction over an empty set in the ONNX node suite).
An output constant by design (a mask) is named in the model's `constant_outputs`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from onnx_parity.frozen import frozen

Blindness = Literal["zero", "constant"]


@frozen
class Watch:
    """What the blindness rule needs to know of a case besides its outputs."""

    distinct: bool = False  # at least two samples, and their inputs differ
    from_model: bool = False  # the reference is a PyTorch model's, not recorded
    constant: frozenset[str] = frozenset()  # outputs constant by design (constant_outputs)


def blindness(name: str, expected: Sequence[Any], watch: Watch) -> Blindness | None:
    """"zero", "constant", or None when the output's reference can see its inputs."""
    if name in watch.constant or not expected:
        return None
    arrays = [np.asarray(e) for e in expected]
    if not all(a.dtype.kind == "f" and a.size for a in arrays):
        return None
    if all(not np.any(a) for a in arrays):
        return "zero" if watch.distinct or watch.from_model else None
    first = arrays[0]
    if watch.distinct and all(a.shape == first.shape and np.array_equal(a, first, equal_nan=True)
                              for a in arrays[1:]):
        return "constant"
    return None


def distinct_inputs(feeds: Sequence[Any]) -> bool:
    """Whether there are two samples or more and no two have the same inputs."""
    if len(feeds) < 2:
        return False
    first = feeds[0]
    return all(any(not np.array_equal(np.asarray(feed[k]), np.asarray(first[k]))
                   for k in first) for feed in feeds[1:])
