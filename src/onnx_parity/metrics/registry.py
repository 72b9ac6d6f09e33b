"""Every metric, in the order reports list them: the one list the spec's tolerance keys, the
comparison, the words, the charts and the ranking read. A new metric is one module and one
entry here."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from onnx_parity.metrics.base import Metric
from onnx_parity.metrics.cosine import COSINE
from onnx_parity.metrics.sqnr import SQNR
from onnx_parity.metrics.topk import TOPK
from onnx_parity.metrics.ulp import ULP

METRICS: tuple[Metric, ...] = (COSINE, SQNR, TOPK, ULP)
KEYS: tuple[str, ...] = tuple(metric.key for metric in METRICS)


def named(name: str) -> Metric | None:
    """The metric a recorded name is ("top5": topk's); None for a name no metric owns."""
    return next((metric for metric in METRICS if metric.owns(name)), None)


def gating(settings: Mapping[str, Any]) -> Iterator[tuple[Metric, Any]]:
    """The metrics a tolerance's settings (tolerance key -> setting) give, in METRICS' order."""
    for metric in METRICS:
        setting = settings.get(metric.key)
        if setting is not None:
            yield metric, setting
