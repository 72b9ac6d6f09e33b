"""The spec: YAML → a validated, frozen Spec. Imports neither torch nor onnxruntime.

    model.py      the value types and every default (a leaf: schema and resolver read it)
    schema.py     the JSON Schema, published and enforced
    explain.py    schema violations in words, located
    resolve.py    semantic checks and defaults → the Spec
    tolerance.py  which tolerance applies to a case's output
    load.py       reading a file or text through all of the above
"""

from onnx_parity.spec.load import load_spec, parse_spec
from onnx_parity.spec.model import (
    DEFAULT_OPSETS,
    DEFAULT_TOLERANCE,
    DTYPES,
    PREDEFINED_DATASETS,
    PREDEFINED_TARGETS,
    DatasetSpec,
    InputSpec,
    ModelSpec,
    Spec,
    TargetSpec,
    ToleranceLayer,
    ToleranceRules,
)
from onnx_parity.spec.schema import spec_schema

__all__ = [
    "DEFAULT_OPSETS",
    "DEFAULT_TOLERANCE",
    "DTYPES",
    "PREDEFINED_DATASETS",
    "PREDEFINED_TARGETS",
    "DatasetSpec",
    "InputSpec",
    "ModelSpec",
    "Spec",
    "TargetSpec",
    "ToleranceLayer",
    "ToleranceRules",
    "load_spec",
    "parse_spec",
    "spec_schema",
]
