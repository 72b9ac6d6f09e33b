"""Reduced-precision variants of a float32 ONNX model, made with ONNX Runtime's own tools:

    fp16          onnxruntime.transformers.float16.convert_float_to_float16(keep_io_types=True):
                  float16 weights and compute, float32 inputs and outputs kept, so the case
                  feeds and compares exactly what the float32 model does. ONNX Runtime's own
                  converter, because it ships with the runtime that runs the result (no other
                  package to pin) and knows which of its ops need to stay float32.
    int8-dynamic  onnxruntime.quantization.quantize_dynamic: int8 weights, activations
                  quantized at run time.
    int8          onnxruntime.quantization.quantize_static in the QDQ format, int8 weights and
                  activations, calibrated (MinMax) on the calibration dataset's samples.

The reference of every precision stays the float32 source (PyTorch, or recorded outputs).
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from onnx_parity.capture import native_output
from onnx_parity.errors import ExportError
from onnx_parity.literals import Precision

logger = logging.getLogger(__name__)


def convert(source: Path, precision: Precision, target: Path,
            calibration: Sequence[Mapping[str, np.ndarray]] = (),
            reduce_range: bool = False) -> Path:
    """The `precision` variant of the float32 model at `source`, written to `target`.
    A tool that fails is this precision's error, with what it said. `reduce_range` quantizes
    int8 weights to 7 bits, as ONNX Runtime advises for CPUs without VNNI (the cause ladder
    remakes a failed int8 variant that way to prove saturation)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    printed = io.StringIO()
    try:
        with native_output((1, 2)), contextlib.redirect_stdout(printed), \
                contextlib.redirect_stderr(printed):
            if precision == "fp16":
                _to_float16(source, target)
            elif precision == "int8-dynamic":
                from onnxruntime.quantization import QuantType, quantize_dynamic

                quantize_dynamic(_plain(source), str(target), weight_type=QuantType.QInt8,
                                 reduce_range=reduce_range)
            elif precision == "int8":
                _quantize_static(_plain(source), target, calibration, reduce_range)
            else:
                raise ValueError(f"no conversion to {precision}")
    except Exception as exc:
        logger.debug("conversion to %s failed:\n%s", precision, printed.getvalue())
        raise ExportError(f"converting the float32 model to {precision} failed: "
                          f"{type(exc).__name__}: {_first_line(exc)}", printed.getvalue()) from exc
    return target


def _plain(source: Path) -> Any:
    """The model without the exporter's recorded intermediate shapes: the quantizers infer
    them again, and the dynamo exporter's (a MatMul's weight recorded before its transpose
    was folded) can contradict what they infer."""
    import onnx

    model = onnx.load(str(source))
    del model.graph.value_info[:]
    return model


def _to_float16(source: Path, target: Path) -> None:
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16
    from onnxruntime.transformers.onnx_model import OnnxModel

    converted = OnnxModel(convert_float_to_float16(onnx.load(str(source)), keep_io_types=True))
    converted.topological_sort()  # the converter appends its Cast nodes at the end
    onnx.save(converted.model, str(target))


def _quantize_static(source: Any, target: Path,
                     calibration: Sequence[Mapping[str, np.ndarray]],
                     reduce_range: bool = False) -> None:
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    if not calibration:
        raise ValueError("static int8 needs calibration samples, and the calibration dataset "
                         "gave none")

    class Samples(CalibrationDataReader):  # type: ignore[misc]  # untyped base class
        def __init__(self) -> None:
            self.feeds: Iterator[Mapping[str, np.ndarray]] = iter(calibration)

        def get_next(self) -> dict[str, np.ndarray] | None:
            feeds = next(self.feeds, None)
            return None if feeds is None else dict(feeds)

    quantize_static(source, str(target), Samples(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                    reduce_range=reduce_range)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else ""


def calibration_feeds(samples: Sequence[Any]) -> list[dict[str, np.ndarray]]:
    """The feeds of a dataset's samples, as the calibrator reads them."""
    return [dict(sample.inputs) for sample in samples]
