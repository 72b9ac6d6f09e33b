"""The spec's checks of a model's `adapter`: what `adapter: causal-lm` and `adapter: seq2seq-lm`
need of the rest of the model's entry (a PyTorch factory, a prompt of token ids, or speech
features for seq2seq-lm, and nothing the adapter makes itself)."""

from __future__ import annotations

from typing import Any

from onnx_parity.spec.entries import Checker
from onnx_parity.spec.model import ADAPTERS, FEATURES, PROMPT, Adapter
from onnx_parity.spec.values import choice, items, mapping, strings
from onnx_parity.spec.yamlnodes import NodePath

_MADE = ("attention_mask", "past_key_values", "decoder_input_ids", "encoder_attention_mask",
         "encoder_outputs")  # inputs the adapter feeds itself
_INTEGERS = ("int64", "int32")


def adapter_of(checks: Checker, base: NodePath, entry: dict[str, Any],
             defaults: dict[str, Any]) -> Adapter | None:
    """The model's adapter, checked against the rest of its entry; None without one."""
    if "adapter" not in entry:
        return None
    adapter = choice(entry.get("adapter"), ADAPTERS, ADAPTERS[0])
    place = checks.place(base)
    key = (*base, "adapter")
    if "torch" not in entry:
        checks.report(key, f"{place}: adapter: {adapter} runs the PyTorch model step by step "
                    "beside ONNX Runtime, and this model has no 'torch': give its factory "
                    "(and, for causal-lm, 'onnx' too, to check a shipped decoder)", at_key=True)
    if adapter == "seq2seq-lm" and "onnx" in entry:
        checks.report((*base, "onnx"), f"{place}: adapter: seq2seq-lm exports the encoder and "
                    "the decoder itself, as two files; a shipped pair cannot be checked yet: "
                    "leave 'onnx' out (or check each shipped half as a model of its own, "
                    "without the adapter)", at_key=True)
    if adapter == "seq2seq-lm" and FEATURES in mapping(entry.get("inputs")):
        _check_features(checks, base, mapping(entry.get("inputs")))
    else:
        _check_prompt(checks, base, mapping(entry.get("inputs")), adapter)
    if "outputs" in entry:
        checks.report((*base, "outputs"), f"{place}: with adapter: {adapter} the outputs are "
                    "named by the adapter (logits, present.N.key, present.N.value); leave "
                    "'outputs' out", at_key=True)
    if "feedback" in mapping(entry.get("rollout")):
        checks.report((*base, "rollout", "feedback"), f"{place}: adapter: {adapter} feeds "
                    "each step's token and cache back itself; give rollout: {steps: N} "
                    "only", at_key=True)
    precisions = strings(entry["precisions"] if "precisions" in entry
                         else defaults.get("precisions"))
    reduced = [p for p in precisions if p != "fp32"]
    if reduced:
        where = (*base, "precisions") if "precisions" in entry else key
        checks.report(where, f"{place}: adapter: {adapter} checks the float32 export only; "
                    f"{', '.join(reduced)} cannot be checked over a rollout yet: leave "
                    "precisions out of this model", at_key=True)
    return adapter


def _check_prompt(checks: Checker, base: NodePath, inputs: dict[str, Any], adapter: str) -> None:
    """The only input is the prompt, `input_ids`: [batch, seq] of token ids below the
    vocabulary's size."""
    place = checks.place(base)
    for name in inputs:
        if name in _MADE or name.startswith("past_key_values"):
            checks.report((*base, "inputs", name), f"{place}: adapter: {adapter} feeds "
                        f"{name} itself (a mask of ones, the cache from the step before); "
                        "give input_ids only", at_key=True)
        elif name != PROMPT:
            speech = " or input_features (speech)" if adapter == "seq2seq-lm" else ""
            checks.report((*base, "inputs", name), f"{place}: adapter: {adapter} takes one "
                        f"input, input_ids (the prompt){speech}, not '{name}'", at_key=True)
    if PROMPT not in inputs:
        checks.report((*base, "inputs") if inputs else base,
                    f"{place}: adapter: {adapter} needs the prompt as an input: inputs: "
                    "{input_ids: {shape: [batch, seq], dtype: int64, high: VOCAB_SIZE}}",
                    at_key=bool(inputs))
        return
    prompt = inputs[PROMPT]
    shape = items(prompt.get("shape") if isinstance(prompt, dict) else prompt)
    dtype = prompt.get("dtype", "float32") if isinstance(prompt, dict) else "float32"
    path = (*base, "inputs", PROMPT)
    if len(shape) != 2 or dtype not in _INTEGERS:
        checks.report(path, f"{place}: input_ids under adapter: {adapter} are token ids, "
                    "[batch, seq] of int64: {shape: [batch, seq], dtype: int64, high: "
                    "VOCAB_SIZE}")


def _check_features(checks: Checker, base: NodePath, inputs: dict[str, Any]) -> None:
    """A speech model's only input, `input_features`: [batch, mel bins, frames] of floats."""
    place = checks.place(base)
    for name in inputs:
        if name != FEATURES:
            checks.report((*base, "inputs", name), f"{place}: adapter: seq2seq-lm takes one "
                        f"input, input_features (speech) or input_ids (text), not '{name}'",
                        at_key=True)
    features = inputs[FEATURES]
    shape = items(features.get("shape") if isinstance(features, dict) else features)
    dtype = features.get("dtype", "float32") if isinstance(features, dict) else "float32"
    if len(shape) != 3 or dtype not in ("float32",):
        checks.report((*base, "inputs", FEATURES), f"{place}: input_features under adapter: "
                    "seq2seq-lm are a spectrogram, [batch, mel bins, frames] of float32: "
                    "{shape: [batch, 80, 3000]}, the bins and frames the model's encoder takes")
