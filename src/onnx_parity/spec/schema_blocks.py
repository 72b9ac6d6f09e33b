"""Parts of the spec's JSON Schema that several places of it share: the tolerance keys and
shapes, the settings a model and `defaults` both take, and a dataset. Their defaults and allowed
values are model.py's."""

from __future__ import annotations

from typing import Any

from onnx_parity.literals import EXPORTERS, PRECISIONS
from onnx_parity.metrics.registry import METRICS
from onnx_parity.spec.model import (
    DATASET_KINDS,
    DEFAULT_DATASETS,
    DEFAULT_DISTRIBUTION,
    DEFAULT_EXPORTER,
    DEFAULT_FLOOR_ULPS,
    DEFAULT_OPSETS,
    DEFAULT_PRECISIONS,
    DEFAULT_RANDOM_BATCHES,
    DEFAULT_RANDOM_SAMPLES,
    DEFAULT_REGRESSION,
    DEFAULT_SEED,
    DEFAULT_TARGETS,
    DEFAULT_TIMEOUT,
    DEFAULT_TOLERANCE,
    DISTRIBUTIONS,
    REDUCED,
)

NAME_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"
DIM_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
TORCH_PATTERN = rf"^(?:[^:]+\.py|{_IDENT}(?:\.{_IDENT})*):{_IDENT}(?:\.{_IDENT})*$"
OP_PATTERN = r"^[A-Za-z][A-Za-z0-9_]*$"
MIN_OPSET, MAX_OPSET = 7, 25

DATASET_KEYS: dict[str, tuple[str, ...]] = {
    "random": ("kind", "seed", "samples", "batch_sizes", "distribution", "low", "high", "dims"),
    "npz": ("kind", "path", "samples", "batch_sizes"),
    "onnx-test-data": ("kind", "path", "samples", "batch_sizes"),
}


def tolerance_values() -> dict[str, Any]:
    """atol, rtol and the metrics (each metric's own schema): the keys every tolerance takes."""
    ratio = {"type": "number", "minimum": 0}
    return {
        "atol": {**ratio, "title": "Absolute tolerance", "default": DEFAULT_TOLERANCE.atol},
        "rtol": {**ratio, "title": "Relative tolerance", "default": DEFAULT_TOLERANCE.rtol},
        **{metric.key: metric.schema() for metric in METRICS},
    }


def common_settings() -> dict[str, Any]:
    """The settings a model takes and `defaults` gives every model."""
    return {
        "opsets": {
            "title": "ONNX opsets to export with",
            "description": "One case per opset. Applies only to models that are exported.",
            "type": "array",
            "minItems": 1,
            "uniqueItems": True,
            "items": {"type": "integer", "minimum": MIN_OPSET, "maximum": MAX_OPSET},
            "default": list(DEFAULT_OPSETS),
        },
        "exporter": {
            "title": "PyTorch ONNX exporter",
            "description": "torch.onnx.export(dynamo=True) or the TorchScript-based exporter.",
            "type": "string",
            "enum": list(EXPORTERS),
            "default": DEFAULT_EXPORTER,
        },
        "exporters": {
            "title": "PyTorch ONNX exporters",
            "description": "Several exporters: one case per opset and exporter, the exporter in "
            "the case id. Instead of `exporter`.",
            "type": "array",
            "minItems": 1,
            "uniqueItems": True,
            "items": {"type": "string", "enum": list(EXPORTERS)},
        },
        "targets": {
            "title": "ONNX Runtime targets",
            "description": "Names from `targets` or the predefined `cpu`, `cuda` and "
            "`tensorrt`.",
            "type": "array",
            "minItems": 1,
            "uniqueItems": True,
            "items": {"type": "string"},
            "default": list(DEFAULT_TARGETS),
        },
        "datasets": {
            "title": "Datasets",
            "description": "Names from `datasets` or the predefined `random`.",
            "type": "array",
            "minItems": 1,
            "uniqueItems": True,
            "items": {"type": "string"},
            "default": list(DEFAULT_DATASETS),
        },
        "precisions": {
            "title": "Precisions to check",
            "description": "fp32: the model as exported; fp16, int8-dynamic, int8: variants made "
            "from it with ONNX Runtime's tools, checked against the float32 reference.",
            "type": "array",
            "minItems": 1,
            "uniqueItems": True,
            "items": {"type": "string", "enum": list(PRECISIONS)},
            "default": list(DEFAULT_PRECISIONS),
        },
        "timeout": {
            "title": "Timeout in seconds",
            "description": "Wall-clock limit for all cases of one model.",
            "type": "number",
            "exclusiveMinimum": 0,
            "default": DEFAULT_TIMEOUT,
        },
        "regression": {
            "title": "Regression check against a baseline",
            "description": "With `run --baseline BASE.json`: a case whose max abs error grew "
            "by at least `factor` since the baseline, and beyond `floor`, fails even within "
            "tolerance. `floor` defaults to "
            f"{DEFAULT_FLOOR_ULPS} ulps of the output's dtype at the output's largest |value|, "
            "so float noise never counts. `latency` (off unless set) fails a case whose ONNX "
            "Runtime median time per call grew by that factor, beyond the measured spread and "
            "1 ms. `off` (or false) turns the check off.",
            "anyOf": [
                {"const": "off"},
                {"const": False},
                {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "factor": {"type": "number", "exclusiveMinimum": 1,
                                   "default": DEFAULT_REGRESSION.factor},
                        "floor": {"type": "number", "minimum": 0},
                        "latency": {"type": "number", "exclusiveMinimum": 1},
                    },
                },
            ],
        },
        "memory_limit": {
            "title": "Memory limit in MiB",
            "description": "Address-space limit of the model's worker process (RLIMIT_AS); "
                           "an allocation beyond it fails that model only. Unset: no limit. "
                           "Not for CUDA targets, which reserve far more address space.",
            "type": "number",
            "minimum": 256,
        },
    }


def tolerance_defs(values: dict[str, Any]) -> dict[str, Any]:
    """The tolerance shapes, for $defs: plain, per output, per target, per precision, the
    defaults' and a model's."""
    return {
        "tolerance": {
            "title": "Tolerance",
            "description": "An element passes when |actual - expected| <= atol + rtol*|expected|.",
            "type": "object",
            "additionalProperties": False,
            "properties": values,
        },
        "outputs_tolerance": {
            "title": "Per-output tolerances",
            "description": "Output name -> atol and/or rtol; unset values come from the "
            "tolerance around it.",
            "type": "object",
            "propertyNames": {"$ref": "#/$defs/name"},
            "additionalProperties": {"$ref": "#/$defs/tolerance"},
        },
        "target_tolerance": {
            "title": "Tolerance on this target",
            "description": "atol/rtol for the cases on one target, with per-output overrides. "
            "A model's own tolerance beats a target's; see docs/spec.md for the precedence.",
            "type": "object",
            "additionalProperties": False,
            "properties": {**values, "outputs": {"$ref": "#/$defs/outputs_tolerance"}},
        },
        "precision_tolerance": {
            "title": "Tolerance of one reduced precision",
            "description": "Replaces the model's tolerance for cases of that precision; atol "
            "and rtol check elements only where given.",
            "type": "object",
            "additionalProperties": False,
            "properties": {**values, "outputs": {"$ref": "#/$defs/outputs_tolerance"}},
        },
        "precisions_tolerance": {
            "title": "Tolerances per reduced precision",
            "type": "object",
            "propertyNames": {"enum": list(REDUCED)},
            "additionalProperties": {"$ref": "#/$defs/precision_tolerance"},
        },
        "defaults_tolerance": {
            "title": "Tolerance",
            "description": "The tolerance every model starts from.",
            "type": "object",
            "additionalProperties": False,
            "properties": {**values,
                           "precisions": {"$ref": "#/$defs/precisions_tolerance"}},
        },
        "model_tolerance": {
            "title": "Tolerance",
            "description": "atol/rtol and metrics for every output, with per-output, "
            "per-target and per-precision overrides.",
            "type": "object",
            "additionalProperties": False,
            "properties": {
                **values,
                "outputs": {"$ref": "#/$defs/outputs_tolerance"},
                "precisions": {"$ref": "#/$defs/precisions_tolerance"},
                "targets": {
                    "title": "This model's tolerance per target",
                    "description": "Target name -> atol, rtol and per-output tolerances for "
                    "this model's cases on that target.",
                    "type": "object",
                    "propertyNames": {"$ref": "#/$defs/name"},
                    "additionalProperties": {"$ref": "#/$defs/target_tolerance"},
                },
            },
        },
    }


def dataset_schema() -> dict[str, Any]:
    positive = {"type": "integer", "minimum": 1}
    kinds = [
        {
            "if": {"properties": {"kind": {"const": kind}}, "required": ["kind"]},
            "then": {
                "propertyNames": {"enum": list(keys)},
                **({"required": ["path"]} if "path" in keys else {}),
            },
        }
        for kind, keys in DATASET_KEYS.items()
    ]
    return {
        "title": "Dataset",
        "type": "object",
        "required": ["kind"],
        "additionalProperties": False,
        "properties": {
            "kind": {
                "title": "Kind",
                "description": "random: generated from the inputs' shapes; npz: arrays saved "
                "with numpy.savez; onnx-test-data: an ONNX test_data_set_* folder with "
                "reference outputs.",
                "enum": list(DATASET_KINDS),
            },
            "seed": {
                "title": "Random seed",
                "type": "integer",
                "minimum": 0,
                "maximum": 2**32 - 1,
                "default": DEFAULT_SEED,
            },
            "samples": {"title": "Samples per case", **positive, "default": DEFAULT_RANDOM_SAMPLES},
            "batch_sizes": {
                "title": "Batch sizes",
                "description": "One case per batch size. Recorded data without batch sizes is "
                "fed as recorded: each npz array whole, each test-data set as it is; with them, "
                "npz arrays are cut into batches along their first axis and test-data sets of "
                "other batch sizes are left out.",
                "type": "array",
                "minItems": 1,
                "uniqueItems": True,
                "items": positive,
                "default": list(DEFAULT_RANDOM_BATCHES),
            },
            "distribution": {
                "title": "Distribution of float inputs",
                "enum": list(DISTRIBUTIONS),
                "default": DEFAULT_DISTRIBUTION,
            },
            "low": {"title": "Uniform lower bound", "type": "number"},
            "high": {"title": "Uniform upper bound", "type": "number"},
            "path": {"title": "Path, relative to the spec", "type": "string", "minLength": 1},
            "dims": {
                "title": "Sizes of named dimensions",
                "description": "A dimension named batch is the batch wherever it stands (else "
                "a named first dimension is); any other, such as seq in [batch, seq], takes "
                "its size from here. A list of sizes, {seq: [1, 7, 64]}, gives one case per "
                "size (per combination, with several lists), the sizes in the case id "
                "(-seq7), all from one export traced at each list's first size of 2 or more.",
                "type": "object",
                "propertyNames": {"type": "string", "pattern": DIM_PATTERN},
                "additionalProperties": {"anyOf": [positive, {
                    "type": "array", "minItems": 1, "uniqueItems": True, "items": positive}]},
            },
        },
        "allOf": kinds,
    }
