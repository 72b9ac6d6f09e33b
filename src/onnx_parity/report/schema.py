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
from onnx_parity.report.jsonvalues import (
    BOOL,
    COUNT,
    INT,
    MS,
    NUMBER,
    NUMS,
    OBJ,
    OPT_INT,
    OPT_NUM,
    OPT_STR,
    STR,
    STRS,
    list_of,
    object_of,
    or_null,
)
from onnx_parity.report.records import DETAILS_SCHEMA, EXPECTATION_SCHEMA
from onnx_parity.results import OUTPUT_KINDS

_SHA256 = {"type": "string", "pattern": "^[0-9a-f]{64}$"}

_OUTPUT = object_of({
    "name": STR, "passed": BOOL, "max_abs": NUMBER, "max_rel": NUMBER, "mean_abs": NUMBER,
    "mismatches": COUNT, "elements": COUNT, "mismatch_share": NUMBER, "atol": NUMBER,
    "rtol": NUMBER, "required_atol": OPT_NUM,
    "worst_index": or_null({**list_of(INT), "minItems": 1}),  # (sample, *index)
    "worst_expected": OPT_NUM, "worst_actual": OPT_NUM,
    "expected_shape": or_null(list_of(INT)), "actual_shape": or_null(list_of(INT)),
    "expected_dtype": OPT_STR, "actual_dtype": OPT_STR, "message": STR, "powerless": BOOL,
    "metrics": NUMS, "criteria": STRS, "scale": OPT_NUM,
    "histogram": or_null(object_of({"edges": list_of(NUMBER), "counts": list_of(COUNT),
                                    "nonfinite": COUNT}, ("edges",))),
    "kind": or_null({"enum": list(OUTPUT_KINDS)}), "samples": COUNT, "placement": COUNT,
    "finite": or_null(COUNT), "thresholds": NUMS, "failed": STRS,
    "quoted": or_null({**STRS, "minItems": 2, "maxItems": 2}), "sample": or_null(COUNT),
    "where": STR, "actual_scale": OPT_NUM,
    "matching": or_null(object_of({
        "iou": NUMBER, "matched": COUNT, "only_expected": COUNT, "only_actual": COUNT,
        "best_expected": OPT_NUM, "best_actual": OPT_NUM, "reference": STR,
    }, ("iou", "matched"))),
}, ("name", "passed", "atol", "rtol"))

_OUTPUT_TREND = object_of({"max_abs": NUMBER, "required_atol": OPT_NUM, "ratio": NUMBER,
                           "floor": NUMBER, "trend": STR, "regressed": BOOL, "metrics": NUMS},
                          ("max_abs", "ratio"))
_TREND = object_of({
    "status": {"enum": ["new", "compared", "not compared"]}, "reason": STR,
    "check": OPT_STR, "factor": OPT_NUM, "output": OPT_STR, "max_abs": OPT_NUM,
    "required_atol": OPT_NUM, "ratio": OPT_NUM, "trend": OPT_STR, "regressed": BOOL,
    "outputs": {"type": "object", "additionalProperties": _OUTPUT_TREND}, "notes": STRS,
    "before": OPT_STR,
    "settings": list_of(object_of({"setting": STR, "output": OPT_STR, "before": STR,
                                   "after": STR,
                                   "direction": {"enum": ["tightened", "loosened", "changed"]}},
                                  ("setting", "before", "after"))),
}, ("status",))

_CASE = object_of({
    "id": STR, "model": STR, "opset": OPT_INT, "exporter": OPT_STR, "target": STR,
    "dataset": STR, "batch_size": OPT_INT, "precision": STR,
    "status": {"enum": list(STATUSES)}, "stage": or_null({"enum": list(STAGES)}),
    "message": STR, "seconds": NUMBER, "line": OPT_INT, "notes": STRS, "details": DETAILS_SCHEMA,
    "outputs": list_of(_OUTPUT), "baseline": or_null(_TREND),
    "settings": {"type": "object", "additionalProperties": STR}, "tolerance_line": OPT_INT,
}, ("id", "model", "target", "dataset", "status"))

_PREFLIGHT = object_of({"usable": BOOL, "findings": list_of(OBJ), "seconds": MS,
                        "gpu_cases": COUNT, "skipped_cases": COUNT, "facts": OBJ})

_PLAN = object_of({
    "spec_sha256": _SHA256, "onnx_parity": STR, "split": {"enum": ["count", "durations"]},
    "durations_sha256": or_null(_SHA256),
    "shard": or_null(object_of({"index": {"type": "integer", "minimum": 1},
                                "count": {"type": "integer", "minimum": 1}},
                               ("index", "count"))),
    "cases": STRS,
}, ("spec_sha256", "onnx_parity", "split", "cases"))

_BASELINE_RUN = object_of({
    "path": STR, "done": BOOL, "problem": STR, "spec": OPT_STR,
    "environment": list_of({"type": "array", "items": OPT_STR, "minItems": 3, "maxItems": 3}),
    "gone": STRS,
})


def report_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the JSON report, version 1."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "onnx-parity JSON report",
        **object_of({
            "version": INT, "spec": STR, "seconds": NUMBER, "complete": BOOL,
            "environment": object_of({"preflight": or_null(_PREFLIGHT), "shard": OPT_STR}),
            "summary": OBJ, "baseline": or_null(_BASELINE_RUN),
            "unmatched_expectations": list_of(EXPECTATION_SCHEMA), "plan": or_null(_PLAN),
            "cases": list_of(_CASE),
        }, ("version", "spec", "environment", "cases")),
    }
