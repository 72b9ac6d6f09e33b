"""Where a reduced-precision model loses quality: its intermediate tensors against the float32
ONNX model's own, on the same sample, in the same session configuration.

Both graphs run once with every intermediate tensor kept; tensors are matched by name, as
onnxruntime.quantization.qdq_loss_debug matches them (a QDQ graph keeps each activation's
float name before its QuantizeLinear; the float16 converter and the dynamic quantizer keep the
names of the tensors they convert). For each matched float tensor, in the float32 graph's
order: its SQNR against the float32 tensor. The verdict names the first tensor below the
case's threshold and the five worst; a NaN or infinity the float32 model does not have is
named where it first appears (float16 overflow).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from onnx_parity.explain.localize.graph import (
    Array,
    GraphInfo,
    GraphNode,
    mark_intermediates,
    run_marked,
)
from onnx_parity.explain.localize.verdict import module_text
from onnx_parity.findings import DriftRecord, PathStep
from onnx_parity.frozen import frozen
from onnx_parity.metrics import sqnr
from onnx_parity.metrics.cosine import COSINE
from onnx_parity.metrics.sqnr import SQNR
from onnx_parity.wording import fmt_metric

if TYPE_CHECKING:
    from onnx_parity.literals import Precision
    from onnx_parity.plan.cases import Case
    from onnx_parity.results import Tolerance

WORST = 5
DEFAULT_THRESHOLD_DB = 20.0


@frozen
class Layer:
    tensor: str
    node: GraphNode | None
    sqnr: float  # in dB
    nonfinite: str = ""  # "inf", "NaN" or "NaN/Inf" here, where the float32 tensor is finite

    def as_step(self, threshold_db: float) -> PathStep:
        node = self.node
        return PathStep(tensor=self.tensor, node=node.label if node else None,
                        op_type=node.op_type if node else None,
                        module=node.module if node else None, sqnr=self.sqnr,
                        within=self.sqnr >= threshold_db and not self.nonfinite,
                        nonfinite=self.nonfinite)


@frozen
class QualityLoss:
    """The verdict: the first layer below the threshold (or first non-finite), the worst."""

    precision: Precision
    threshold_db: float
    compared: int
    first: Layer | None
    worst: tuple[Layer, ...] = field(default_factory=tuple)
    overflow: Layer | None = None
    root_type: str | None = None

    def as_record(self, sample: int) -> DriftRecord:
        """The case's record of it (results.py), which the reports read."""
        origin = self.overflow or self.first
        node = origin.node if origin else None
        worst = tuple(layer.as_step(self.threshold_db) for layer in self.worst)
        return DriftRecord(
            verdict="quality" if origin else "none", headline=self.headline,
            summary=self.summary, reference="the float32 ONNX model", sample=sample,
            threshold_db=self.threshold_db, node=node.label if node else None,
            op_type=node.op_type if node else None, module=node.module if node else None,
            tensor=origin.tensor if origin else None,
            sqnr=origin.sqnr if origin else None, compared=self.compared, worst=worst,
            path=tuple(dataclasses.replace(step, node=step.node or step.tensor)
                       for step in worst),
        )

    def _where(self, layer: Layer) -> str:
        node = layer.node
        if node is None:
            return f"'{layer.tensor}'"
        return f"{node.op_type} '{node.label}'" + module_text(node.module, node.module_type,
                                                             self.root_type)

    @property
    def headline(self) -> str:
        if self.overflow is not None:
            return (f"{self.precision} overflow: {self.overflow.nonfinite} first at "
                    f"{self._where(self.overflow)}, where the float32 model is finite")
        if self.first is None:
            return (f"no layer of the {self.precision} model falls below SQNR "
                    f"{fmt_metric(SQNR.key, self.threshold_db)} against the float32 model")
        return (f"{self.precision} loses quality first at {self._where(self.first)}: SQNR "
                f"{fmt_metric(SQNR.key, self.first.sqnr)} < "
                f"{fmt_metric(SQNR.key, self.threshold_db)} against the float32 model")

    @property
    def summary(self) -> str:
        worst = ", ".join(f"{self._where(layer)} {fmt_metric(SQNR.key, layer.sqnr)}"
                          for layer in self.worst)
        return (f"{self.headline}; {self.compared} tensors compared; the worst: {worst}"
                if worst else self.headline)


def threshold_db(tolerance: Tolerance) -> float:
    """The SQNR a layer should keep: the case's own SQNR threshold, else the one its cosine
    implies (for small noise, 1 - cos ≈ 1 / (2·SNR)), else 20 dB."""
    own, cosine = tolerance.metrics.get(SQNR.key), tolerance.metrics.get(COSINE.key)
    if own is not None:
        return float(own)
    if cosine is not None and cosine < 1.0:
        return 10.0 * math.log10(1.0 / (2.0 * (1.0 - cosine)))
    return DEFAULT_THRESHOLD_DB


def locate(case: Case, float32: Path, reduced: Path, feeds: Mapping[str, Array],
           threads: int = 0, root_type: str | None = None) -> QualityLoss:
    """Run both graphs on `feeds` with every tensor kept and judge each shared tensor."""
    full = mark_intermediates(float32)
    values32, _ = run_marked(full, case.target, feeds, threads)
    values, _ = run_marked(mark_intermediates(reduced), case.target, feeds, threads)
    layers = _layers(full.graph, values32, values)
    limit = threshold_db(case.tolerance_for())
    overflow = next((layer for layer in layers if layer.nonfinite), None)
    first = next((layer for layer in layers if layer.sqnr < limit), None)
    worst = tuple(sorted((layer for layer in layers if not layer.nonfinite),
                         key=lambda layer: layer.sqnr)[:WORST])
    return QualityLoss(case.precision, limit, len(layers), first, worst, overflow, root_type)


def _layers(graph: GraphInfo, reference: Mapping[str, Array],
            actual: Mapping[str, Array]) -> list[Layer]:
    found = []
    for node in graph.nodes:
        for tensor in node.outputs:
            if tensor not in reference or tensor not in actual or tensor not in graph.dynamic:
                continue
            r, a = np.asarray(reference[tensor]), np.asarray(actual[tensor])
            if r.shape != a.shape or r.dtype.kind != "f" or a.dtype.kind != "f":
                continue
            r64, a64 = r.astype(np.float64), a.astype(np.float64)
            if np.isfinite(r64).all() and not np.isfinite(a64).all():
                nan, inf = bool(np.isnan(a64).any()), bool(np.isinf(a64).any())
                kind = "NaN/Inf" if nan and inf else ("NaN" if nan else "inf")
                found.append(Layer(tensor, node, math.nan, nonfinite=kind))
                continue
            found.append(Layer(tensor, node, sqnr.of([(r64, a64)])))
    return found
