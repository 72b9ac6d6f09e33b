"""The spec's checks of a model's `rollout`: steps, the outputs fed back as inputs, named
where the model names them (else checked when it runs), and a decoder's left padding."""

from __future__ import annotations

from typing import Any

from onnx_parity.spec.entries import Checker
from onnx_parity.spec.model import RolloutSpec
from onnx_parity.spec.values import integers, mapping, whole
from onnx_parity.spec.violations import did_you_mean, quoted
from onnx_parity.spec.yamlnodes import NodePath


def rollout_of(checks: Checker, base: NodePath, entry: dict[str, Any],
               outputs: tuple[str, ...]) -> RolloutSpec | None:
    raw = entry.get("rollout")
    if not isinstance(raw, dict):
        return None
    path, place = (*base, "rollout"), checks.place(base)
    if "torch" not in entry:
        checks.report(path, f"{place}: a rollout compares every step with PyTorch's own "
                          "steps, but this model has no 'torch'", at_key=True)
    steps = whole(raw.get("steps"))
    feedback = {str(k): v for k, v in mapping(raw.get("feedback")).items()
                if isinstance(v, str)}
    if "feedback" not in raw and "adapter" not in entry:
        checks.report(path, f"{place}: a rollout needs 'feedback', the outputs each step "
                          "feeds to the next as inputs, e.g. feedback: {state_out: state}")
    inputs = list(mapping(entry.get("inputs")))
    fed: dict[str, str] = {}
    for output, name in feedback.items():
        where = (*path, "feedback", output)
        if outputs and output not in outputs:
            checks.report(where, f"{place}: rollout feedback names output {quoted(output)}, "
                               f"which is not among its outputs ({', '.join(outputs)})"
                               f"{did_you_mean(output, outputs)}", at_key=True)
        if inputs and name not in inputs:
            checks.report(where, f"{place}: rollout feedback feeds {quoted(output)} to input "
                               f"{quoted(name)}, which is not among its inputs "
                               f"({', '.join(inputs)}){did_you_mean(name, inputs)}")
        if name in fed:
            checks.report(where, f"{place}: rollout feedback feeds input {quoted(name)} "
                               f"twice ({quoted(fed[name])} and {quoted(output)})")
        fed.setdefault(name, output)
    padding = integers(raw.get("left_padding"))
    if "left_padding" in raw and entry.get("adapter") != "causal-lm":
        checks.report((*path, "left_padding"), f"{place}: rollout.left_padding pads the "
                    "prompts of adapter: causal-lm, and this model has "
                    f"{'no adapter' if 'adapter' not in entry else 'another one'}: leave it "
                    "out",
                    at_key=True)
    if steps is None:
        return None  # the schema pass said what is wrong with it
    return RolloutSpec(steps=steps, feedback=feedback,
                       line=checks.doc.value_mark(path).line, left_padding=padding)
