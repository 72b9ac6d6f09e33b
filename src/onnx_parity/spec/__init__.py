"""The spec: YAML → a validated, frozen Spec. Imports neither torch nor onnxruntime.

    model.py      the value types and every default (a leaf: schema and resolver read it)
    schema.py     the JSON Schema, published and enforced (schema_*.py: its parts)
    violations.py schema violations in words, located
    resolve.py    semantic checks and defaults → the Spec (entries.py, targets.py, inputs.py:
                  the checks it is made of)
    tolerance.py  which tolerance applies to a case's output
    load.py       reading a file or text through all of the above
"""

from typing import TYPE_CHECKING, Any

from onnx_parity.spec.model import (
    DEFAULT_OPSETS,
    DEFAULT_TOLERANCE,
    DTYPES,
    PREDEFINED_DATASETS,
    PREDEFINED_TARGETS,
    DatasetSpec,
    InputSpec,
    ModelSpec,
    RolloutSpec,
    Spec,
    TargetSpec,
    ToleranceLayer,
    ToleranceRules,
)

if TYPE_CHECKING:
    from onnx_parity.spec.load import load_spec, parse_spec
    from onnx_parity.spec.schema import spec_schema

# The loader (YAML, JSON Schema) is imported when it is first asked for: a worker process needs
# the value types only.
_LAZY = {"load_spec": "onnx_parity.spec.load", "parse_spec": "onnx_parity.spec.load",
         "spec_schema": "onnx_parity.spec.schema"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'onnx_parity.spec' has no attribute {name!r}")


__all__ = [
    "DEFAULT_OPSETS",
    "DEFAULT_TOLERANCE",
    "DTYPES",
    "PREDEFINED_DATASETS",
    "PREDEFINED_TARGETS",
    "DatasetSpec",
    "InputSpec",
    "ModelSpec",
    "RolloutSpec",
    "Spec",
    "TargetSpec",
    "ToleranceLayer",
    "ToleranceRules",
    "load_spec",
    "parse_spec",
    "spec_schema",
]
