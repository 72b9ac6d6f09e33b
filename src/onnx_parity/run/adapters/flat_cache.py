"""A decoder with a key-value cache (`adapter: causal-lm`), wrapped so that its export takes and
returns the cache as flat tensors (`past_key_values.N.key`/`.value` in, `present.N.key`/`.value`
out) with a dynamic batch and past length, and refused with what to do where it cannot be.

The wrapper builds a transformers `DynamicCache` from the flat tensors on every call, as
transformers' own export helpers do, so the model runs exactly the code it runs in `generate()`.
It hands the cache over under the keyword forward() names: `past_key_values` up to transformers
5.23, `cache` from 5.24 on (`CACHE_KEYWORDS`), and reads it back from the output's field of the
same name.
What it supports is decided by what the model does, not by its name: a decoder-only model whose
cache comes back as a `DynamicCache` of full-length layers (GPT-2, Llama with grouped-query
attention, and the many models built the same way). Sliding-window attention (Mistral, Gemma2)
is among them: given an empty `DynamicCache`, such a model keeps every past token and applies its
window in the attention mask, decoding as `generate()` does with its windowed cache. Models
that keep other cache layers or another cache, encoder-decoder models and state-space models
are refused before any export.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import numpy as np

from onnx_parity.errors import LoadError
from onnx_parity.frozen import frozen
from onnx_parity.run.adapters.greedy import LOGITS, MASK
from onnx_parity.spec import InputSpec
from onnx_parity.spec.model import PROMPT

# The sizes the export is traced at: torch.export specialises 0 and 1, so both the past and the
# new tokens are 2 or more there; the graph then serves a past of 0 (the prefill) and 1 new token.
EXPORT_PAST, EXPORT_NEW = 3, 2


# The keyword forward() takes the cache by, newest first: transformers 5.24 renamed
# `past_key_values` to `cache` in every model's forward() and output (the old name still
# works there, deprecated, but is no longer in the signature).
CACHE_KEYWORDS = ("cache", "past_key_values")


def past_names(layers: int) -> tuple[str, ...]:
    return tuple(f"past_key_values.{i}.{part}" for i in range(layers) for part in ("key", "value"))


def present_names(layers: int) -> tuple[str, ...]:
    return tuple(f"present.{i}.{part}" for i in range(layers) for part in ("key", "value"))


@frozen
class CacheLayout:
    """The flat cache of one model: `layers` key/value pairs of [batch, heads, past, head_dim]."""

    layers: int
    heads: int  # key-value heads: fewer than the attention heads under grouped-query attention
    head_dim: int
    dtype: str = "float32"
    keyword: str = CACHE_KEYWORDS[-1]  # the one forward() takes the cache by

    @property
    def inputs(self) -> tuple[InputSpec, ...]:
        """The export's inputs: the prompt, its mask over past and new tokens, the past."""
        cache = tuple(InputSpec(name, ("batch", self.heads, "past", self.head_dim), self.dtype)
                      for name in past_names(self.layers))
        return (InputSpec(PROMPT, ("batch", "seq"), "int64"),
                InputSpec(MASK, ("batch", "total"), "int64"), *cache)

    @property
    def outputs(self) -> tuple[str, ...]:
        return (LOGITS, *present_names(self.layers))

    def empty_past(self, batch: int) -> dict[str, np.ndarray]:
        """The past of a prefill: every layer's keys and values with length 0."""
        shape = (batch, self.heads, 0, self.head_dim)
        return {name: np.zeros(shape, dtype=self.dtype) for name in past_names(self.layers)}




def cache_keyword(module: Any) -> str | None:
    """The keyword `module`'s forward() takes its cache by, read from its signature; None
    where it names neither (or has no signature Python can read)."""
    parameters = forward_parameters(module)
    return next((k for k in CACHE_KEYWORDS if k in parameters), None)


def refusal(module: Any) -> str | None:
    """Why `module` cannot go through `adapter: causal-lm` before it runs, or None."""
    config = getattr(module, "config", None)
    name = type(module).__name__
    if config is not None and getattr(config, "is_encoder_decoder", False):
        return (f"{name} is an encoder-decoder model; adapter: causal-lm takes decoder-only "
                "models (GPT-2, Llama and the like): use adapter: seq2seq-lm, which checks "
                "an encoder-decoder (T5, BART, Whisper) as it is served, in two halves")
    parameters = forward_parameters(module)
    if PROMPT not in parameters and any(p.kind == inspect.Parameter.VAR_KEYWORD
                                        for p in parameters.values()):
        return None  # a wrapper's forward(*args, **kwargs): its first call tells
    missing = [p for p in (PROMPT, MASK) if p not in parameters]
    if cache_keyword(module) is None:
        missing.append(" or ".join(reversed(CACHE_KEYWORDS)))
    if missing:
        return (f"{name}.forward() takes no {', '.join(missing)}: adapter: causal-lm needs the "
                "Hugging Face causal-LM contract, forward(input_ids, attention_mask, "
                "past_key_values (or cache, from transformers 5.24 on), use_cache, …), "
                "returning logits and the cache; or leave the adapter out and pass "
                "forward_args: {use_cache: false} to check it one call at a time")
    return None


def flat_cache_module(lm: Any, layers: int, forward_args: Mapping[str, Any] | None = None,
                      keyword: str | None = None) -> Any:
    """A module around `lm` whose forward(input_ids, attention_mask, past_key_values_0_key,
    past_key_values_0_value, …) returns (logits, present keys and values, layer by layer):
    tensors only, which both exporters take; `forward_args` go to `lm` on every call. Its
    forward's signature names every parameter, so the exporters' dynamic shapes and the
    reference bind to it as to a hand-written one."""
    import torch

    fixed = dict(forward_args or {})
    name: str = keyword or cache_keyword(lm) or CACHE_KEYWORDS[-1]
    positioned = "position_ids" in forward_parameters(lm) and "position_ids" not in fixed
    parameters = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                  for n in ("self", PROMPT, MASK, *(p.replace(".", "_")
                                                    for p in past_names(layers)))]

    class FlatCacheLM(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lm = lm

        def forward(self, *tensors: Any) -> tuple[Any, ...]:
            input_ids, attention_mask, *past = tensors
            keywords: dict[str, Any] = {name: _cache(layers, past), **fixed}
            if positioned:
                keywords["position_ids"] = _positions(attention_mask, input_ids.shape[1])
            return _step(self.lm, input_ids, attention_mask, keywords)

    FlatCacheLM.forward.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    return FlatCacheLM().eval()


def forward_parameters(module: Any) -> Mapping[str, Any]:
    """`module.forward`'s parameters by name; none where Python cannot read its signature."""
    try:
        return inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return {}


def _positions(attention_mask: Any, new: int) -> Any:
    """The new tokens' positions as generate() computes them from the mask: each real token's
    count of real tokens before it, so a left-padded row starts at 0 after its pads (which
    take 0)."""
    positions = attention_mask.long().cumsum(-1) - 1
    positions = positions.masked_fill(attention_mask == 0, 0)
    return positions[:, positions.shape[1] - new:]


def _cache(layers: int, past: Sequence[Any]) -> Any:
    from transformers import DynamicCache

    return DynamicCache([(past[2 * i], past[2 * i + 1]) for i in range(layers)])


def _step(lm: Any, input_ids: Any, attention_mask: Any,
          keywords: Mapping[str, Any]) -> tuple[Any, ...]:
    out = lm(input_ids=input_ids, attention_mask=attention_mask, use_cache=True,
             return_dict=True, **keywords)
    present = returned_cache(out)
    flat = [tensor for layer in present.layers for tensor in (layer.keys, layer.values)]
    return (out[LOGITS] if isinstance(out, Mapping) else out.logits, *flat)


def returned_cache(out: Any) -> Any:
    """The cache a forward() returned: its output's `cache` (transformers 5.24 on) or
    `past_key_values` (before; 5.24 still answers to it, with a deprecation warning)."""
    for name in CACHE_KEYWORDS:
        found = out.get(name) if isinstance(out, Mapping) else getattr(out, name, None)
        if found is not None:
            return found
    return None


def cache_layout(lm: Any, forward_args: Mapping[str, Any] | None = None) -> CacheLayout:
    """The model's flat cache, from one call on two tokens with an empty cache; a LoadError,
    with what to do, for a model whose cache is not a DynamicCache of full-length layers."""

    name = type(lm).__name__
    problem = refusal(lm)
    if problem:
        raise LoadError(problem)
    try:
        from transformers import DynamicCache
        from transformers.cache_utils import DynamicLayer
    except ImportError as exc:
        raise LoadError("adapter: causal-lm needs transformers (5.x), which is not installed "
                        "here") from exc
    keyword, cache = _first_call(lm, forward_args)
    if not isinstance(cache, DynamicCache):
        _refused(name, f"returned {type(cache).__name__} as its cache, not the "
                              "DynamicCache it was given")
    kinds = sorted({type(layer).__name__ for layer in cache.layers
                    if type(layer) is not DynamicLayer})
    if kinds:
        _refused(name, f"keeps {', '.join(kinds)} layers in its cache (a sliding window"
                              ", a hybrid or a state-space cache), whose length is not the past's")
    keys: list[Any] = [getattr(layer, "keys", None) for layer in cache.layers]
    if not keys or any(k is None or k.dim() != 4 for k in keys):
        _refused(name, "keeps cache tensors that are not [batch, heads, past, head_dim]")
    shapes = {(int(k.shape[1]), int(k.shape[3]), str(k.dtype).removeprefix("torch."))
              for k in keys}
    if len(shapes) != 1:
        _refused(name, "keeps cache layers of different shapes")
    heads, head_dim, dtype = shapes.pop()
    return CacheLayout(len(keys), heads, head_dim, dtype, keyword)


def _first_call(lm: Any, forward_args: Mapping[str, Any] | None) -> tuple[str, Any]:
    """The keyword the model takes its cache by and the cache it returns, from one call on
    two tokens with an empty DynamicCache. A forward() that names neither keyword but takes
    **kwargs (a wrapper) is asked under each, newest first: the one whose call returns the
    very cache it was given."""
    import torch
    from transformers import DynamicCache

    ids = torch.zeros((1, 2), dtype=torch.int64)
    named = cache_keyword(lm)
    failure: Exception | None = None
    for keyword in (named,) if named else CACHE_KEYWORDS:
        given = DynamicCache()
        with torch.no_grad():
            try:
                out = lm(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True,
                         return_dict=True, **{keyword: given}, **dict(forward_args or {}))
            except Exception as exc:
                failure = exc
                continue
        cache = returned_cache(out)
        if named or cache is given:
            return keyword, cache
    name = type(lm).__name__
    if failure is not None:
        first = str(failure).strip().splitlines()[0] if str(failure).strip() else ""
        _refused(name, f"raised {type(failure).__name__} ({first}) when given a DynamicCache "
                 "(a state-space or hybrid model keeps a cache of its own)", failure)
    _refused(name, "returned another cache than the DynamicCache it was given under "
             f"{' and under '.join(CACHE_KEYWORDS)}")


def _refused(name: str, why: str, cause: Exception | None = None) -> NoReturn:
    raise LoadError(f"{name} {why}; adapter: causal-lm supports decoder-only models whose cache "
                    "is a DynamicCache of full-length layers (tested: GPT-2, Llama, Mistral, "
                    "Gemma2): check this one with its own flat-cache wrapper, or "
                    "leave the adapter out and pass forward_args: {use_cache: false}") from cause


def export_example(layout: CacheLayout, vocab: int, batch: int) -> list[Any]:
    """Tensors to trace the export at, in `layout.inputs`' order: a past and new tokens of 2
    or more, so that neither is specialised; the mask covers both."""
    import torch

    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, max(vocab, 1), (batch, EXPORT_NEW), generator=generator)
    mask = torch.ones((batch, EXPORT_PAST + EXPORT_NEW), dtype=torch.int64)
    shape = (batch, layout.heads, EXPORT_PAST, layout.head_dim)
    past = [torch.randn(shape, generator=generator).to(getattr(torch, layout.dtype))
            for _ in past_names(layout.layers)]
    return [ids, mask, *past]
