"""Which tolerance applies to one output of one case: the spec's layers, most specific first.

For float32 cases, each key (atol, rtol and each metric's, onnx_parity/metrics/registry.py) comes
from the most specific layer that sets it, key by key:

    1. the model's `tolerance.targets.<target>.outputs.<output>`
    2. the model's `tolerance.outputs.<output>`
    3. the model's `tolerance.targets.<target>`
    4. the model's `tolerance`
    5. the target's `tolerance.outputs.<output>`
    6. the target's `tolerance`
    7. `defaults.tolerance`
    8. the built-in default (atol 1e-4, rtol 1e-3)

A model's own setting beats a target's because whoever wrote it knows that model's outputs; a
target's beats `defaults` because it says what that hardware's arithmetic needs of every model.

A reduced precision (fp16, int8-dynamic, int8) replaces all of that with its own layers, key by
key: the model's `tolerance.precisions.<p>.outputs.<output>`, the model's
`tolerance.precisions.<p>`, then the same two in `defaults.tolerance`. Where none of them is
given, the precision's built-in defaults apply (spec/model.py, PRECISION_DEFAULTS) and the
tolerance says so. atol and rtol check elements only where one of them is given.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from onnx_parity.literals import Precision
from onnx_parity.metrics.registry import KEYS
from onnx_parity.results import Tolerance
from onnx_parity.spec.model import (
    DEFAULT_TOLERANCE,
    PRECISION_DEFAULTS,
    ToleranceLayer,
    ToleranceRules,
)

_NONE = ToleranceLayer()


def layers(rules: ToleranceRules, target: str | None, output: str | None,
           precision: Precision = "fp32") -> list[ToleranceLayer]:
    """The layers that apply, most specific first."""
    if precision != "fp32":
        found = [layer for layer in (rules.model.precision(precision),
                                     rules.defaults.precision(precision)) if layer is not None]
        chain = [layer.output(output) if output is not None else _NONE for layer in found]
        return [item for pair in zip(chain, found, strict=True) for item in pair]
    on_target = rules.model_targets.get(target, _NONE) if target is not None else _NONE
    target_layer = rules.targets.get(target, _NONE) if target is not None else _NONE
    if output is None:
        return [on_target, rules.model, target_layer, rules.defaults]
    return [on_target.output(output), rules.model.output(output), on_target, rules.model,
            target_layer.output(output), target_layer, rules.defaults]


def resolve(rules: ToleranceRules, target: str | None, output: str | None,
            precision: Precision = "fp32") -> Tolerance:
    """The tolerance of `output` (None: any output) on `target` (None: on no target), for
    cases of `precision`."""
    chain = layers(rules, target, output, precision)
    defaults: Precision | Literal[""] = ""
    if precision != "fp32" and not chain:
        chain, defaults = [PRECISION_DEFAULTS[precision]], precision
    found = {key: _first(layer.metrics.get(key) for layer in chain) for key in KEYS}
    metrics = {key: setting for key, setting in found.items() if setting is not None}
    atol = _first(layer.atol for layer in chain)
    rtol = _first(layer.rtol for layer in chain)
    if precision == "fp32":
        return Tolerance(atol=DEFAULT_TOLERANCE.atol if atol is None else atol,
                         rtol=DEFAULT_TOLERANCE.rtol if rtol is None else rtol, metrics=metrics)
    return Tolerance(atol=atol or 0.0, rtol=rtol or 0.0,
                     elementwise=atol is not None or rtol is not None, defaults=defaults,
                     metrics=metrics)


def _first(values: Iterable[Any]) -> Any:
    return next((value for value in values if value is not None), None)
