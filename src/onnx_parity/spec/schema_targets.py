"""The spec's JSON Schema of a target: its providers and their options, the fall-back keys, the
session options and custom op libraries its sessions are made with. Defaults and allowed values
are model.py's."""

from __future__ import annotations

from typing import Any

from onnx_parity.spec.model import (
    DEFAULT_FALLBACK,
    FALLBACKS,
    SESSION_OPTIONS,
)
from onnx_parity.spec.schema_blocks import OP_PATTERN

# Each session option's words for editors; its values come from model.SESSION_OPTIONS.
_SESSION_WORDS: dict[str, tuple[str, str, Any]] = {
    "graph_optimization_level": (
        "Graph optimizations",
        "How far ONNX Runtime rewrites the graph before running it (fusions change the "
        "arithmetic): disable_all runs the graph as written; layout needs an ONNX Runtime that "
        "has ORT_ENABLE_LAYOUT.", "all"),
    "execution_mode": ("Execution mode", "Nodes one after another, or independent branches "
                       "side by side (then inter_op_num_threads applies).", "sequential"),
    "execution_order": ("Execution order", "The order ONNX Runtime runs the nodes in.",
                        "default"),
    "intra_op_num_threads": (
        "Threads inside one node", "Unset: onnx-parity's one thread per worker, so that the "
        "numbers do not depend on the machine; set, it wins for this target (and the case says "
        "so). 0: ONNX Runtime's default, one per core.", None),
    "inter_op_num_threads": ("Threads across nodes", "For execution_mode: parallel; 0: "
                             "ONNX Runtime's default.", None),
    "enable_mem_pattern": ("Memory pattern", "Plan allocations from the first run.", True),
    "enable_mem_reuse": ("Memory reuse", "Let tensors share buffers.", True),
    "enable_cpu_mem_arena": ("CPU memory arena", "Allocate CPU memory from an arena.", True),
    "use_deterministic_compute": ("Deterministic compute", "Prefer deterministic kernels where "
                                  "a provider has both.", False),
}


def session_options_schema() -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for key, kind in SESSION_OPTIONS.items():
        title, description, default = _SESSION_WORDS[key]
        if isinstance(kind, tuple):
            value: dict[str, Any] = {"enum": list(kind)}
        elif kind is bool:
            value = {"type": "boolean"}
        else:
            value = {"type": "integer", "minimum": 0}
        properties[key] = {"title": title, "description": description, **value,
                           **({"default": default} if default is not None else {})}
    properties["config_entries"] = {
        "title": "Session config entries",
        "description": "Keys and values for SessionOptions.add_session_config_entry, e.g. "
        "{session.set_denormal_as_zero: 1}; true and false are written 1 and 0. ONNX Runtime "
        "ignores a key it does not know.",
        "type": "object",
        "additionalProperties": {"type": ["string", "number", "boolean"]},
    }
    return {
        "title": "Session options",
        "description": "onnxruntime.SessionOptions attributes this target's sessions are made "
        "with, as a deployment makes them.",
        "type": "object",
        "additionalProperties": False,
        "properties": properties,
    }


def target_schema() -> dict[str, Any]:
    op_types = {"type": "array", "uniqueItems": True, "items": {"type": "string",
                                                                "pattern": OP_PATTERN}}
    return {
        "title": "ONNX Runtime target",
        "type": "object",
        "required": ["providers"],
        "additionalProperties": False,
        "properties": {
            "providers": {
                "title": "Execution providers",
                "description": "In order of preference, e.g. [CUDAExecutionProvider, "
                "CPUExecutionProvider].",
                "type": "array",
                "minItems": 1,
                "uniqueItems": True,
                "items": {"type": "string", "minLength": 1},
            },
            "provider_options": {
                "title": "Provider options",
                "description": "Provider name -> its options, e.g. {device_id: 1}; an option "
                "named for a path (trt_engine_cache_path, cache_dir, ...) is relative to the "
                "spec and must stay inside the repository.",
                "type": "object",
                "additionalProperties": {"type": "object"},
            },
            "fallback": {
                "title": "Fallback policy",
                "description": "What to do when ONNX Runtime assigns nodes to a later "
                "provider than the first: fail the case, warn, or allow it.",
                "enum": list(FALLBACKS),
                "default": DEFAULT_FALLBACK,
            },
            "allow_cpu_ops": {
                "title": "Op types allowed on the CPU",
                "description": "Op types that ONNX Runtime places on the CPU on purpose "
                "(shape computations), e.g. [Shape, Gather]; their nodes on the CPU are "
                "not a fall-back.",
                **op_types,
            },
            "allow_cuda_ops": {
                "title": "Op types allowed on CUDA",
                "description": "On a TensorRT target: op types whose nodes TensorRT may leave "
                "to CUDAExecutionProvider without it counting as a fall-back.",
                **op_types,
            },
            "tolerance": {"$ref": "#/$defs/target_tolerance"},
            "disable_cpu_ep_fallback": {
                "title": "Disable CPU fall-back",
                "description": "Set ONNX Runtime's session.disable_cpu_ep_fallback: the "
                "session fails to start if any node would run on the CPU. The providers "
                "must then not list CPUExecutionProvider.",
                "type": "boolean",
                "default": False,
            },
            "session_options": {"$ref": "#/$defs/session_options"},
            "python": {
                "title": "Interpreter",
                "description": "Another Python whose own onnxruntime build (onnxruntime-openvino, "
                "an older onnxruntime, ...) and numpy run this target's ONNX side, e.g. "
                ".venv-ov/bin/python, relative to the spec. It needs neither torch nor "
                "onnx-parity: a small runner is run there by path.",
                "type": "string",
                "minLength": 1,
            },
            "custom_op_libraries": {
                "title": "Custom op libraries",
                "description": "Shared libraries of custom ops, relative to the spec, "
                "registered with SessionOptions.register_custom_ops_library before each session "
                "is made.",
                "type": "array",
                "minItems": 1,
                "uniqueItems": True,
                "items": {"type": "string", "minLength": 1},
            },
        },
    }
