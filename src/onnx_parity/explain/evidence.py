"""What a compared case leaves to explain it, in one value: the case, the model it ran (and
the float32 model a variant was made from, with what calibrated it), each sample's feeds, the
outputs' names, the reference's and the target's values, and their comparisons. The cause
re-runs, the localization and the bundle all read it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from onnx_parity.compare.outputs import compare_case, compared_positions
from onnx_parity.frozen import frozen

if TYPE_CHECKING:
    from onnx_parity.backends.pytorch import Binding
    from onnx_parity.plan.cases import Case
    from onnx_parity.results import OutputComparison

Array = np.ndarray[Any, Any]


@frozen
class Evidence:
    case: Case
    model_path: Path
    inputs: Sequence[Mapping[str, Array]]
    names: Sequence[str]
    expected: Sequence[Sequence[Any]]
    actual: Sequence[Sequence[Any]]
    comparisons: Sequence[OutputComparison] = ()
    float32_path: Path | None = None  # a reduced-precision case's source model
    calibration: Sequence[Mapping[str, Array]] = ()  # what calibrated static int8
    binding: Binding | None = None  # how the inputs reach the PyTorch module's forward()

    def rerun(self, session: Any) -> list[list[Any]]:
        """The case's samples through another session of the same model (a cause's second
        run), each sample's outputs as the case compared them: those `ignore_outputs` left out
        are left out here too."""
        ran = list(self.case.model.outputs or session.output_names())
        kept = compared_positions(ran, self.case.model.ignore_outputs)
        outputs = []
        for feeds in self.inputs:
            values = session.run(feeds)
            outputs.append([values[k] for k in kept] if len(values) == len(ran) else values)
        return outputs

    def compared(self, session: Any) -> tuple[OutputComparison, ...]:
        """A second run (rerun) judged as the case's own run was: the same reference, the
        same tolerances, detections compared as sets where the model says so."""
        return compare_case(self.names, self.expected, self.rerun(session),
                            self.case.tolerance_for, detections=self.case.model.detections)
