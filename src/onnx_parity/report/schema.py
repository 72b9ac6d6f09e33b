"""The JSON report's JSON Schema: what every reader of a report accepts (`merge`, `--baseline`,
`--durations`, publishing), checked before any value is used (report/untrusted.py).

It says what jsonfile.to_dict writes, loosely where older files may lack a key (reports written
before a key existed still read) and strictly where a value is computed with: counts are whole
and not negative, times are finite and not negative, enums are the words this version writes.
Objects stay open, so a report from a newer onnx-parity with keys this one does not know reads.

The check against it is the package's one schema check, spec/conforms.py's `violation`.
"""

from __future__ import annotations

from typing import Any

from onnx_parity.literals import STAGES, STATUSES
from onnx_parity.metrics.sqnr import KEY as SQNR_KEY
from onnx_parity.results import OUTPUT_KINDS
from onnx_parity.spec.conforms import NUMBER


def _or_null(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema`, or null: "null" added to its types (the other keywords ignore a null)."""
    if "enum" in schema:
        return {**schema, "enum": [*schema["enum"], None]}
    types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
    return {**schema, "type": [*types, "null"]}


def _object(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required)}


def _array(items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": items}


_STR = {"type": "string"}
_STRS = _array(_STR)
_OPT_STR = {"type": ["string", "null"]}
_INT = {"type": "integer"}
_OPT_INT = {"type": ["integer", "null"]}
_COUNT = {"type": "integer", "minimum": 0}
_BOOL = {"type": "boolean"}
_OBJ = {"type": "object"}
_NUM = NUMBER
_OPT_NUM = _or_null(_NUM)
_NUMS = {"type": "object", "additionalProperties": _NUM}
_MS = {"type": "number", "minimum": 0}  # written as measured: finite
_SHA256 = {"type": "string", "pattern": "^[0-9a-f]{64}$"}

_OUTPUT = _object({
    "name": _STR, "passed": _BOOL, "max_abs": _NUM, "max_rel": _NUM, "mean_abs": _NUM,
    "mismatches": _COUNT, "elements": _COUNT, "mismatch_share": _NUM, "atol": _NUM,
    "rtol": _NUM, "required_atol": _OPT_NUM,
    "worst_index": _or_null({**_array(_INT), "minItems": 1}),  # (sample, *index)
    "worst_expected": _OPT_NUM, "worst_actual": _OPT_NUM,
    "expected_shape": _or_null(_array(_INT)), "actual_shape": _or_null(_array(_INT)),
    "expected_dtype": _OPT_STR, "actual_dtype": _OPT_STR, "message": _STR, "powerless": _BOOL,
    "metrics": _NUMS, "criteria": _STRS, "scale": _OPT_NUM,
    "histogram": _or_null(_object({"edges": _array(_NUM), "counts": _array(_COUNT),
                                   "nonfinite": _COUNT}, ("edges",))),
    "kind": _or_null({"enum": list(OUTPUT_KINDS)}), "samples": _COUNT, "placement": _COUNT,
    "finite": _or_null(_COUNT), "thresholds": _NUMS, "failed": _STRS,
    "quoted": _or_null({**_STRS, "minItems": 2, "maxItems": 2}), "sample": _or_null(_COUNT),
    "where": _STR, "actual_scale": _OPT_NUM,
    "matching": _or_null(_object({
        "iou": _NUM, "matched": _COUNT, "only_expected": _COUNT, "only_actual": _COUNT,
        "best_expected": _OPT_NUM, "best_actual": _OPT_NUM, "reference": _STR,
    }, ("iou", "matched"))),
}, ("name", "passed", "atol", "rtol"))

_STEP = _object({"tensor": _STR, "node": _OPT_STR, "op_type": _OPT_STR, "module": _OPT_STR,
                 "within": _BOOL, "max_abs": _OPT_NUM, SQNR_KEY: _OPT_NUM,
                 "nonfinite": _OPT_STR})
_DRIFT = _object({
    "verdict": _STR, "headline": _STR, "summary": _STR, "reference": _STR,
    "sample": _OPT_INT, "compared": _COUNT, "node": _OPT_STR, "op_type": _OPT_STR,
    "module": _OPT_STR, "module_type": _OPT_STR, "tensor": _OPT_STR, "max_abs": _OPT_NUM,
    "path": _array(_STEP), "segment": _STRS, "other_origins": _COUNT,
    "threshold_db": _OPT_NUM, SQNR_KEY: _OPT_NUM, "worst": _array(_STEP),
    "seconds": _or_null({"type": "number"}),
}, ("verdict",))
_CAUSE = _object({"kind": _STR, "proven": _BOOL, "message": _STR, "setting": _STR,
                  "output": _OPT_STR, "before": _OBJ, "after": _OBJ,
                  "provider_options": _OBJ}, ("kind", "proven"))
_RANGE = _object({"tensor": _STR, "kind": _STR, "max_abs": _NUM, "node": _OPT_STR,
                  "op_type": _OPT_STR, "module": _OPT_STR}, ("tensor", "kind", "max_abs"))
_TIMES = _or_null(_object({"median_ms": {"type": "number", "exclusiveMinimum": 0},
                           "q1_ms": _MS, "q3_ms": _MS, "repeats": {"type": "integer",
                                                                   "minimum": 1},
                           "device": _STR}, ("median_ms", "q1_ms", "q3_ms", "repeats")))
_EXPECTATION = _object({"model": _STR, "cases": _STR, "status": _STR, "reason": _STR,
                        "until": _OPT_STR, "line": _OPT_INT, "stage": _OPT_STR,
                        "verdict": _STR, "ended": _STR}, ("status",))

_DETAILS = _object({
    "divergence": _or_null(_DRIFT), "cause": _or_null(_CAUSE),
    "causes_ruled_out": _array(_CAUSE),
    "numerics": _or_null(_object({"provider_options": _OBJ, "gpu": _OPT_STR,
                                  "compute_capability": _OPT_STR,
                                  "session_options": _OBJ, "tf32_override": _OPT_STR})),
    "providers": _or_null(_OBJ),
    "bundle": _or_null(_object({"path": _OPT_STR, "command": _OPT_STR, "error": _OPT_STR})),
    "float16": _or_null(_object({"nodes": _or_null(_COUNT), "float16_nodes": _or_null(_COUNT),
                                 "range_checked": _BOOL, "leaving": _COUNT,
                                 "ranges": _array(_RANGE), "failing": _or_null(_RANGE),
                                 "reference_overflow": _STRS})),
    "not_compared": _STRS, "export_log": _OPT_STR, "worker_log": _STRS,
    "rollout": _or_null(_object({
        "steps": _COUNT, "feedback": {"type": "object", "additionalProperties": _STR},
        "first_failing": _OPT_INT, "judged": _OPT_INT, "output": _OPT_STR,
        "growth": _OPT_NUM, "growth_from": _OPT_INT, "floor": _NUM,
        "per_step": _array(_object({"step": _INT, "passed": _BOOL, "max_abs": _NUMS,
                                    "failing": _STRS}, ("step", "passed"))),
    }, ("steps",))),
    "expectation": _or_null(_EXPECTATION),
    "latency": _or_null(_object({
        "onnxruntime": _TIMES, "pytorch": _TIMES, "cpu": _TIMES, "ratio": _OPT_NUM,
        "seconds": _MS, "baseline_ms": _or_null({"type": "number", "exclusiveMinimum": 0}),
        "regressed": _BOOL, "profile": _OPT_STR, "per": {"enum": ["call", "step"]},
        "costliest": _array(_object({"node": _STR, "op_type": _STR, "provider": _STR,
                                     "ms": _MS}, ("node", "op_type", "provider", "ms"))),
    }, ("onnxruntime",))),
    "tokens": _or_null(_object({
        "steps": _COUNT, "agreed": _COUNT, "comparable": _COUNT, "step": _OPT_INT,
        "sample": _OPT_INT, "row": _OPT_INT, "expected": _OPT_INT, "actual": _OPT_INT,
        "gap": _OPT_NUM, "allowed": _OPT_NUM, "near_tie": _BOOL,
    }, ("steps", "agreed", "comparable"))),
    "cache": _or_null({"type": "object", "additionalProperties": _STR}),
})

_OUTPUT_TREND = _object({"max_abs": _NUM, "required_atol": _OPT_NUM, "ratio": _NUM,
                         "floor": _NUM, "trend": _STR, "regressed": _BOOL, "metrics": _NUMS},
                        ("max_abs", "ratio"))
_TREND = _object({
    "status": {"enum": ["new", "compared", "not compared"]}, "reason": _STR,
    "check": _OPT_STR, "factor": _OPT_NUM, "output": _OPT_STR, "max_abs": _OPT_NUM,
    "required_atol": _OPT_NUM, "ratio": _OPT_NUM, "trend": _OPT_STR, "regressed": _BOOL,
    "outputs": {"type": "object", "additionalProperties": _OUTPUT_TREND}, "notes": _STRS,
    "before": _OPT_STR,
    "settings": _array(_object({"setting": _STR, "output": _OPT_STR, "before": _STR,
                                "after": _STR,
                                "direction": {"enum": ["tightened", "loosened", "changed"]}},
                               ("setting", "before", "after"))),
}, ("status",))

_CASE = _object({
    "id": _STR, "model": _STR, "opset": _OPT_INT, "exporter": _OPT_STR, "target": _STR,
    "dataset": _STR, "batch_size": _OPT_INT, "precision": _STR,
    "status": {"enum": list(STATUSES)}, "stage": _or_null({"enum": list(STAGES)}),
    "message": _STR, "seconds": _NUM, "line": _OPT_INT, "notes": _STRS, "details": _DETAILS,
    "outputs": _array(_OUTPUT), "baseline": _or_null(_TREND),
    "settings": {"type": "object", "additionalProperties": _STR}, "tolerance_line": _OPT_INT,
}, ("id", "model", "target", "dataset", "status"))

_PREFLIGHT = _object({"usable": _BOOL, "findings": _array(_OBJ), "seconds": _MS,
                      "gpu_cases": _COUNT, "skipped_cases": _COUNT, "facts": _OBJ})

_PLAN = _object({
    "spec_sha256": _SHA256, "onnx_parity": _STR, "split": {"enum": ["count", "durations"]},
    "durations_sha256": _or_null(_SHA256),
    "shard": _or_null(_object({"index": {"type": "integer", "minimum": 1},
                               "count": {"type": "integer", "minimum": 1}},
                              ("index", "count"))),
    "cases": _STRS,
}, ("spec_sha256", "onnx_parity", "split", "cases"))

_BASELINE_RUN = _object({
    "path": _STR, "done": _BOOL, "problem": _STR, "spec": _OPT_STR,
    "environment": _array({"type": "array", "items": _OPT_STR, "minItems": 3, "maxItems": 3}),
    "gone": _STRS,
})


def report_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the JSON report, version 1."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "onnx-parity JSON report",
        **_object({
            "version": _INT, "spec": _STR, "seconds": _NUM, "complete": _BOOL,
            "environment": _object({"preflight": _or_null(_PREFLIGHT), "shard": _OPT_STR}),
            "summary": _OBJ, "baseline": _or_null(_BASELINE_RUN),
            "unmatched_expectations": _array(_EXPECTATION), "plan": _or_null(_PLAN),
            "cases": _array(_CASE),
        }, ("version", "spec", "environment", "cases")),
    }
