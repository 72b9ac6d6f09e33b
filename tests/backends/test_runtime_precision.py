"""The precision each runtime is set to compute in, read from the target's own settings; the
setting that switches it back for a second run; and `cannot be known` where nothing says."""

from __future__ import annotations

import json
from typing import Any

from onnx_parity.backends.precision import full_precision, runtime_precision
from onnx_parity.spec import TargetSpec


def _target(provider: str, **options: Any) -> TargetSpec:
    return TargetSpec(name="t", providers=(provider, "CPUExecutionProvider"),
                      provider_options={provider: options} if options else {})


def test_each_runtime_says_its_precision_or_that_it_cannot_be_known() -> None:
    said = {key: runtime_precision(target) for key, target in {
        "ov-cpu": _target("OpenVINOExecutionProvider", device_type="CPU"),
        "ov-gpu": _target("OpenVINOExecutionProvider", device_type="GPU"),
        "ov-asked": _target("OpenVINOExecutionProvider", device_type="GPU", precision="fp32"),
        "ov-hint": _target("OpenVINOExecutionProvider", device_type="CPU", load_config=json.dumps(
            {"CPU": {"INFERENCE_PRECISION_HINT": "bf16", "NUM_STREAMS": 1}})),
        "qnn": _target("QNNExecutionProvider", backend_type="htp"),
        "qnn-off": _target("QNNExecutionProvider", enable_htp_fp16_precision="0"),
        "qnn-cpu": _target("QNNExecutionProvider", backend_type="cpu"),
        "coreml": _target("CoreMLExecutionProvider"),
        "coreml-gpu": _target("CoreMLExecutionProvider", MLComputeUnits="CPUAndGPU",
                              AllowLowPrecisionAccumulationOnGPU="1"),
        "dml": _target("DmlExecutionProvider"),
        "webgpu": _target("WebGpuExecutionProvider"),
        "trt": _target("TensorrtExecutionProvider", trt_fp16_enable=True),
        "cpu": TargetSpec(name="cpu", providers=("CPUExecutionProvider",)),
        "cuda": _target("CUDAExecutionProvider"),
    }.items()}
    assert {k: (v.precision, v.reduced) if v else None for k, v in said.items()} == {
        "ov-cpu": ("FP32", False), "ov-gpu": ("FP16", True), "ov-asked": ("FP32", False),
        "ov-hint": ("BF16", True), "qnn": ("FP16", True), "qnn-off": ("FP32", False),
        "qnn-cpu": ("FP32", False), "coreml": (None, False), "coreml-gpu": ("FP16", True),
        "dml": (None, False), "webgpu": (None, False), "trt": ("FP16", True),
        "cpu": None, "cuda": None}  # CUDA's TF32 is read from its session (explain/causes.py)
    assert said["dml"] is not None and said["dml"].text.startswith(
        "DmlExecutionProvider's precision cannot be known: the provider exposes no precision")
    assert said["ov-gpu"] is not None and said["ov-gpu"].text == (
        "OpenVINOExecutionProvider's precision is FP16, by the OpenVINO provider's default on "
        "GPU: a failure is re-run in full precision to see whether it is the cause")
    # The second run: the hint taken out of load_config (the rest kept), precision ACCURACY.
    hint = said["ov-hint"]
    assert hint is not None
    switched = full_precision(_target("OpenVINOExecutionProvider", device_type="CPU",
                                      load_config={"CPU": {"INFERENCE_PRECISION_HINT": "bf16",
                                                           "NUM_STREAMS": 1}}), hint)
    options = switched.provider_options["OpenVINOExecutionProvider"]
    assert options["precision"] == "ACCURACY" and json.loads(options["load_config"]) == {
        "CPU": {"NUM_STREAMS": 1}}
    assert switched.name == "t (precision=ACCURACY)"
