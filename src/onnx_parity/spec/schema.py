"""The spec's JSON Schema, published by `onnx-parity schema` and enforced by the loader.

Its defaults and allowed values are model.py's: the schema never states one of its own.
"""

from __future__ import annotations

from typing import Any

from onnx_parity.findings import EXPECTED_STATUSES
from onnx_parity.literals import STAGES
from onnx_parity.spec import schema_blocks as blocks
from onnx_parity.spec.model import (
    ADAPTERS,
    DEFAULT_DECODE_STEPS,
    DEFAULT_DTYPE,
    DEFAULT_IOU,
    DTYPES,
    MAX_ROLLOUT_STEPS,
)
from onnx_parity.spec.schema_blocks import (
    DATASET_KEYS,
    DIM_PATTERN,
    MAX_OPSET,
    MIN_OPSET,
    NAME_PATTERN,
    OP_PATTERN,
    TORCH_PATTERN,
)
from onnx_parity.spec.schema_targets import session_options_schema, target_schema

__all__ = ["DATASET_KEYS", "DIM_PATTERN", "MAX_OPSET", "MIN_OPSET", "NAME_PATTERN",
           "OP_PATTERN", "TORCH_PATTERN", "spec_schema"]


def spec_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a spec file; a fresh copy on every call."""
    name = {"type": "string", "pattern": NAME_PATTERN}
    tolerance_values = blocks.tolerance_values()
    common = blocks.common_settings()
    defs: dict[str, Any] = {
        "name": {
            **name,
            "description": "Letters, digits, '_', '.', '-'; used in case ids.",
        },
        **blocks.tolerance_defs(tolerance_values),
        "shape": {
            "title": "Shape",
            "description": "Positive sizes or dimension names; a named dimension is dynamic in "
            "the export.",
            "type": "array",
            "items": {
                "anyOf": [
                    {"type": "integer", "minimum": 1},
                    {"type": "string", "pattern": DIM_PATTERN},
                ]
            },
        },
        "input": {
            "title": "Model input",
            "description": "Its shape, as a list (`x: [batch, 10]`, float32), or a mapping with "
            "`shape` and the dtype and range. Inputs named after forward()'s parameters are "
            "passed by name; otherwise positionally, in the order listed.",
            "anyOf": [
                {"$ref": "#/$defs/shape"},
                {
                    "type": "object",
                    "required": ["shape"],
                    "additionalProperties": False,
                    "properties": {
                        "shape": {"$ref": "#/$defs/shape"},
                        "dtype": {"title": "Element type", "enum": list(DTYPES),
                                  "default": DEFAULT_DTYPE},
                        "low": {
                            "title": "Lowest value",
                            "description": "Integers: inclusive lower bound (default 0). "
                            "Floats: the range of a uniform dataset.",
                            "type": "number",
                        },
                        "high": {
                            "title": "Upper bound",
                            "description": "Integers: exclusive upper bound, required. "
                            "Floats: the range of a uniform dataset.",
                            "type": "number",
                        },
                    },
                },
            ],
        },
        "target": target_schema(),
        "session_options": session_options_schema(),
        "dataset": blocks.dataset_schema(),
        "defaults": {
            "title": "Defaults",
            "description": "Settings for every model; each may be set again per model.",
            "type": ["object", "null"],
            "additionalProperties": False,
            "properties": {**common, "tolerance": {"$ref": "#/$defs/defaults_tolerance"}},
        },
        "model": {
            "title": "Model",
            "description": "A PyTorch model to export, an ONNX file to check against its "
            "PyTorch model, or an ONNX file with reference outputs in its dataset.",
            "type": "object",
            "required": ["name"],
            "additionalProperties": False,
            "properties": {
                "name": {"$ref": "#/$defs/name", "title": "Model name"},
                "torch": {
                    "title": "PyTorch model factory",
                    "description": "'file.py:callable' (relative to the spec) or "
                    "'package.module:callable'; called with `args`.",
                    "type": "string",
                    "pattern": TORCH_PATTERN,
                },
                "args": {"title": "Keyword arguments for the factory", "type": "object"},
                "calibration": {
                    "$ref": "#/$defs/name",
                    "title": "Calibration dataset",
                    "description": "The dataset whose samples calibrate static int8 (default: "
                    "the model's first dataset).",
                },
                "forward_args": {
                    "title": "Keyword arguments for forward()",
                    "description": "Passed to forward() in the reference run and in the export, "
                    "e.g. {use_cache: false} for a model that would return a cache object.",
                    "type": "object",
                },
                "ignore_outputs": {
                    "title": "Outputs not compared",
                    "description": "Output names left out of the comparison; the reports list "
                    "them as not compared.",
                    "type": "array",
                    "minItems": 1,
                    "uniqueItems": True,
                    "items": {"$ref": "#/$defs/name"},
                },
                "constant_outputs": {
                    "title": "Outputs constant by design",
                    "description": "Output names whose reference may be all zero, or the same "
                    "for every sample (a mask), and still count as checked.",
                    "type": "array",
                    "minItems": 1,
                    "uniqueItems": True,
                    "items": {"$ref": "#/$defs/name"},
                },
                "compare": {
                    "title": "How outputs are compared",
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"detections": {
                        "title": "Detections compared as sets",
                        "description": "A detector's boxes ([N, 4], x1 y1 x2 y2), scores and "
                        "labels, by output name (or the last part of dotted names: `boxes` is "
                        "each image's `output_0.boxes`, `output_1.boxes`, ...): boxes are "
                        "matched one to one by label and IoU >= iou, highest scores first; "
                        "matched boxes and scores are held to the tolerance, and a box on one "
                        "side only fails the boxes output.",
                        "type": "object",
                        "required": ["boxes", "scores"],
                        "additionalProperties": False,
                        "properties": {
                            "boxes": {"$ref": "#/$defs/name", "title": "Boxes output"},
                            "scores": {"$ref": "#/$defs/name", "title": "Scores output"},
                            "labels": {"$ref": "#/$defs/name", "title": "Labels output"},
                            "iou": {"title": "IoU two matched boxes reach at least",
                                    "type": "number", "exclusiveMinimum": 0, "maximum": 1,
                                    "default": DEFAULT_IOU},
                        },
                    }},
                },
                "adapter": {
                    "title": "How the model is called",
                    "description": "causal-lm: a decoder with a key-value cache (a Hugging Face "
                    "causal LM: GPT-2, Llama and the like), exported with its cache as flat "
                    "tensors and checked over a greedy rollout: prefill on input_ids, then "
                    f"rollout.steps (default {DEFAULT_DECODE_STEPS}) tokens, logits and tokens "
                    "compared at every step. Its only input is input_ids. seq2seq-lm: an "
                    "encoder-decoder (T5, BART, Whisper and the like), exported as two files, "
                    "the encoder (with the cross-attention cache it makes) and the decoder with "
                    "its caches, and checked the same way: the encoder once, then rollout.steps"
                    " greedy decoder steps from the generation config's start token. Its only "
                    "input is input_ids (text) or input_features (speech, [batch, mel bins, "
                    "frames]).",
                    "enum": list(ADAPTERS),
                },
                "onnx": {
                    "title": "ONNX file",
                    "description": "An existing ONNX file, relative to the spec.",
                    "type": "string",
                    "minLength": 1,
                },
                "inputs": {
                    "title": "Inputs",
                    "description": "Input name -> shape and dtype, in forward() order.",
                    "type": "object",
                    "propertyNames": {"$ref": "#/$defs/name"},
                    "additionalProperties": {"$ref": "#/$defs/input"},
                },
                "outputs": {
                    "title": "Output names",
                    "description": "Names given to the exported outputs, in order.",
                    "type": "array",
                    "uniqueItems": True,
                    "items": {"$ref": "#/$defs/name"},
                },
                **common,
                "tolerance": {"$ref": "#/$defs/model_tolerance"},
                "rollout": {"$ref": "#/$defs/rollout"},
                "reference": {
                    "title": "Reference target",
                    "description": "A target whose outputs the model's other targets are "
                    "compared against, in place of PyTorch's or the recorded outputs: an older "
                    "onnxruntime against the one deployed (the runtime upgrade). No case is "
                    "made on it; random data is then enough for an ONNX file.",
                    "type": "string",
                    "minLength": 1,
                },
                "expect": {
                    "title": "Known failures",
                    "description": "Cases known to fail, on record: one expectation for every "
                    "case of the model, or a list of them, each for the cases its `cases` glob "
                    "matches (the first that matches a case is its). A case that ends as "
                    "expected does not fail the gate; one that passes does.",
                    "anyOf": [
                        {"$ref": "#/$defs/expectation"},
                        {"type": "array", "minItems": 1,
                         "items": {"$ref": "#/$defs/expectation"}},
                    ],
                },
            },
        },
        "rollout": {
            "title": "Rollout",
            "description": "Several calls per sample, each side's outputs fed back as its own "
            "next inputs; every output is compared at every step.",
            "type": "object",
            "required": ["steps"],
            "additionalProperties": False,
            "properties": {
                "steps": {"title": "Calls per sample", "description": "The first takes the "
                          "dataset's inputs. Every step's outputs are kept on both sides, and a "
                          "decoder's cache grows with each step, so the memory grows with the "
                          f"square of the steps: at most {MAX_ROLLOUT_STEPS}.",
                          "type": "integer", "minimum": 1, "maximum": MAX_ROLLOUT_STEPS},
                "left_padding": {
                    "title": "Left padding (adapter: causal-lm)",
                    "description": "Pad tokens left of the prompt in each row of a batch, "
                    "cycled over the rows (row i takes item i mod n), masked out as a served "
                    "batch is: [0, 3] makes a batch of 2 prompts of unequal lengths.",
                    "type": "array",
                    "minItems": 1,
                    "items": {"type": "integer", "minimum": 0},
                },
                "feedback": {
                    "title": "Outputs fed back",
                    "description": "Output name -> the input it becomes at the next step.",
                    "type": "object",
                    "minProperties": 1,
                    "propertyNames": {"$ref": "#/$defs/name"},
                    "additionalProperties": {"$ref": "#/$defs/name"},
                },
            },
        },
        "expectation": {
            "title": "Known failure",
            "type": "object",
            "required": ["status", "reason"],
            "additionalProperties": False,
            "properties": {
                "status": {"title": "How the cases end", "enum": list(EXPECTED_STATUSES),
                           "description": "`failed`: outputs beyond tolerance; `error`: "
                           "load, export, check or run fails."},
                "reason": {"title": "Why", "type": "string", "minLength": 1,
                           "description": "Shown with every expected failure, e.g. an issue "
                           "link."},
                "cases": {"title": "Case ids", "type": "string", "minLength": 1,
                          "default": "*", "description": "A glob on the case id, or on its "
                          "part in brackets, e.g. `opset17-*` (default: every case)."},
                "stage": {"title": "Where the error happens", "enum": list(STAGES),
                          "description": "With `status: error`: the stage the cases fail at "
                          "(an error at another stage does not match); any stage if not given."},
                "until": {"title": "Expires after", "type": "string",
                          "pattern": r"^\d{4}-\d{2}-\d{2}$", "description": "YYYY-MM-DD: "
                          "the last day the expectation holds; after it the cases are judged "
                          "as usual, with a note that it expired."},
            },
        },
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "onnx-parity spec",
        "description": "Which PyTorch models and ONNX files to compare, where and on what data.",
        "type": "object",
        "required": ["version", "models"],
        "additionalProperties": False,
        "patternProperties": {
            "^x-": {"description": "Free-form extension keys, e.g. to hold YAML anchors for reuse."}
        },
        "properties": {
            "version": {"title": "Spec format version", "const": 1, "default": 1},
            "defaults": {"$ref": "#/$defs/defaults"},
            "targets": {
                "title": "ONNX Runtime targets",
                "description": "Name -> providers and session options; `cpu`, `cuda` and "
                "`tensorrt` are predefined.",
                "type": ["object", "null"],
                "propertyNames": {"$ref": "#/$defs/name"},
                "additionalProperties": {"$ref": "#/$defs/target"},
            },
            "datasets": {
                "title": "Datasets",
                "description": "Name -> where inputs come from; `random` is predefined.",
                "type": ["object", "null"],
                "propertyNames": {"$ref": "#/$defs/name"},
                "additionalProperties": {"$ref": "#/$defs/dataset"},
            },
            "models": {
                "title": "Models",
                "type": "array",
                "minItems": 1,
                "items": {"$ref": "#/$defs/model"},
            },
        },
        "$defs": defs,
    }
