"""Which tolerance applies to one output of one case: the spec's layers, most specific first.

For each key (atol, rtol) the most specific layer that sets it wins, key by key:

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
"""

from __future__ import annotations

from collections.abc import Iterable

from onnx_parity.results import Tolerance
from onnx_parity.spec.model import DEFAULT_TOLERANCE, ToleranceLayer, ToleranceRules

_NONE = ToleranceLayer()


def layers(rules: ToleranceRules, target: str | None, output: str | None) -> list[ToleranceLayer]:
    """The layers that apply, most specific first."""
    on_target = rules.model_targets.get(target, _NONE) if target is not None else _NONE
    target_layer = rules.targets.get(target, _NONE) if target is not None else _NONE
    if output is None:
        return [on_target, rules.model, target_layer, rules.defaults]
    return [on_target.output(output), rules.model.output(output), on_target, rules.model,
            target_layer.output(output), target_layer, rules.defaults]


def resolve(rules: ToleranceRules, target: str | None, output: str | None) -> Tolerance:
    """The tolerance of `output` (None: any output) on `target` (None: on no target)."""
    chain = layers(rules, target, output)
    return Tolerance(
        atol=_first((layer.atol for layer in chain), DEFAULT_TOLERANCE.atol),
        rtol=_first((layer.rtol for layer in chain), DEFAULT_TOLERANCE.rtol),
    )


def _first(values: Iterable[float | None], default: float) -> float:
    return next((value for value in values if value is not None), default)
