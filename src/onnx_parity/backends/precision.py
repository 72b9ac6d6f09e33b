"""The precision each runtime computes a float32 model in, read from the target's own settings
where its execution provider has one (OpenVINO's precision and INFERENCE_PRECISION_HINT, QNN's
HTP float16, CoreML's compute units and float16 accumulation, TensorRT's float16), the setting
that switches it back to float32 for a second run, and `cannot be known` said where a provider
exposes none (DirectML, WebGPU). TF32 on CUDA is explain/causes.py's, as before."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import field
from typing import Any

from onnx_parity.frozen import frozen
from onnx_parity.literals import COREML, DIRECTML, OPENVINO, QNN, TENSORRT, WEBGPU
from onnx_parity.spec import TargetSpec

FULL = frozenset({"FP32", "ACCURACY", "F32"})
# OpenVINO EP's precision when none is asked, per device_type (its documentation's defaults).
_OPENVINO_DEFAULTS = {"CPU": "FP32", "GPU": "FP16", "NPU": "FP16"}


@frozen
class RuntimePrecision:
    """What a target's first provider computes in: `precision` (FP32, FP16, BF16, ...) or None
    where it cannot be known; `source` says where that was read; `switch` the provider options
    that run it in full precision for a second run (empty: none can be switched)."""

    provider: str
    precision: str | None
    source: str
    switch: Mapping[str, str] = field(default_factory=dict)

    @property
    def reduced(self) -> bool:
        return self.precision is not None and self.precision.upper() not in FULL

    @property
    def text(self) -> str:
        """In words, as a setting, not a fact: a device may not have the precision asked for
        (OpenVINO's CPU plugin computes a bf16 hint in float32 where the CPU has no bfloat16),
        so only a second run in full precision proves it changes the numbers."""
        if self.precision is None:
            return f"{self.provider}'s precision cannot be known: {self.source}"
        proof = (": a failure is re-run in full precision to see whether it is the cause"
                 if self.reduced and self.switch else "")
        return f"{self.provider}'s precision is {self.precision}, by {self.source}{proof}"


def runtime_precision(target: TargetSpec) -> RuntimePrecision | None:
    """The precision of the target's first provider by its settings; None for the CPU and CUDA
    providers (float32 as asked; CUDA's TF32 is read from its session, explain/causes.py)."""
    provider = target.providers[0] if target.providers else ""
    options = {str(k): v for k, v in target.provider_options.get(provider, {}).items()}
    reader = _READERS.get(provider)
    if reader is not None:
        return reader(options)
    if provider in (DIRECTML, WEBGPU):
        return RuntimePrecision(provider, None, "the provider exposes no precision setting and "
                                "reports none; a float32 model may still run some kernels in "
                                "float16 on some GPUs")
    return None


def full_precision(target: TargetSpec, found: RuntimePrecision) -> TargetSpec:
    """The target again with its first provider switched to full precision."""
    import dataclasses

    options = {p: dict(o) for p, o in target.provider_options.items()}
    own = {**options.get(found.provider, {}), **found.switch}
    if found.provider == OPENVINO and _hint(own.get("load_config")):
        own["load_config"] = json.dumps(_without_hint(own["load_config"]))
    options[found.provider] = own
    said = ", ".join(f"{k}={v}" for k, v in found.switch.items())
    return dataclasses.replace(target, name=f"{target.name} ({said})", provider_options=options)


def _openvino(options: Mapping[str, Any]) -> RuntimePrecision:
    device = str(options.get("device_type", "CPU")).split(".")[0].split(":")[-1].upper()
    switch = {"precision": "ACCURACY"}
    hint = _hint(options.get("load_config"))
    if hint:
        return RuntimePrecision(OPENVINO, hint.upper(), "load_config's INFERENCE_PRECISION_HINT",
                                switch)
    if options.get("precision"):
        return RuntimePrecision(OPENVINO, str(options["precision"]).upper(),
                                "its precision option", switch)
    default = _OPENVINO_DEFAULTS.get(device)
    if default is None:
        return RuntimePrecision(OPENVINO, None, f"no default is documented for device_type "
                                f"{device}; set precision: ACCURACY to keep the model's own",
                                switch)
    return RuntimePrecision(OPENVINO, default, f"the OpenVINO provider's default on {device}",
                            switch)


def _hint(config: Any) -> str:
    """INFERENCE_PRECISION_HINT from OpenVINO's load_config (a JSON text or a mapping of device
    -> properties), for any device."""
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except ValueError:
            return ""
    if not isinstance(config, Mapping):
        return ""
    for properties in config.values():
        if isinstance(properties, Mapping) and properties.get("INFERENCE_PRECISION_HINT"):
            return str(properties["INFERENCE_PRECISION_HINT"])
    return ""


def _without_hint(config: Any) -> dict[str, Any]:
    """OpenVINO's load_config without its INFERENCE_PRECISION_HINT, the rest kept."""
    if isinstance(config, str):
        config = json.loads(config)
    return {device: {k: v for k, v in properties.items() if k != "INFERENCE_PRECISION_HINT"}
            if isinstance(properties, Mapping) else properties
            for device, properties in config.items()}


def _qnn(options: Mapping[str, Any]) -> RuntimePrecision:
    backend = str(options.get("backend_type") or options.get("backend_path") or "htp").lower()
    if "htp" not in backend:
        return RuntimePrecision(QNN, "FP32", f"the {backend} backend")
    on = str(options.get("enable_htp_fp16_precision", "1")) not in ("0", "false", "False")
    return RuntimePrecision(QNN, "FP16" if on else "FP32",
                            "enable_htp_fp16_precision on the HTP backend (its default: 1)",
                            {"enable_htp_fp16_precision": "0"})


def _coreml(options: Mapping[str, Any]) -> RuntimePrecision:
    units = str(options.get("MLComputeUnits", "ALL"))
    switch = {"MLComputeUnits": "CPUOnly"}
    if units == "CPUOnly":
        return RuntimePrecision(COREML, "FP32", "MLComputeUnits: CPUOnly")
    if str(options.get("AllowLowPrecisionAccumulationOnGPU", "0")) in ("1", "true", "True"):
        return RuntimePrecision(COREML, "FP16", "AllowLowPrecisionAccumulationOnGPU: 1", switch)
    if units in ("ALL", "CPUAndNeuralEngine"):
        return RuntimePrecision(COREML, None, f"MLComputeUnits: {units} lets Core ML run nodes "
                                "on the Neural Engine, which computes in float16, and Core ML "
                                "does not say which ran there", switch)
    return RuntimePrecision(COREML, "FP32", f"MLComputeUnits: {units}")


def _tensorrt(options: Mapping[str, Any]) -> RuntimePrecision:
    on = str(options.get("trt_fp16_enable", "0")) in ("1", "true", "True")
    bf16 = str(options.get("trt_bf16_enable", "0")) in ("1", "true", "True")
    precision = "FP16" if on else "BF16" if bf16 else "FP32"
    return RuntimePrecision(TENSORRT, precision, "trt_fp16_enable and trt_bf16_enable",
                            {"trt_fp16_enable": "0", "trt_bf16_enable": "0"} if on or bf16
                            else {})


_READERS = {OPENVINO: _openvino, QNN: _qnn, COREML: _coreml, TENSORRT: _tensorrt}
