"""An encoder-decoder (`adapter: seq2seq-lm`: T5, BART, Whisper and the models built like them)
wrapped as it is served, in two halves, each exported to its own file:

- the encoder, run once per input: `input_ids` and `attention_mask` (text) or `input_features`
  (speech, [batch, mel bins, frames]) in; its `last_hidden_state` and every decoder layer's
  cross-attention keys and values (`present.N.encoder.key`/`.value`), computed once from it, out;
- the decoder with its cache, run once per token: the token (`input_ids`), the encoder's mask
  (text), its self-attention cache (`past_key_values.N.decoder.key`/`.value`, growing by one
  a step) and the cross-attention cache the encoder made (`past_key_values.N.encoder.*`) in;
  `logits` and the grown self-attention cache (`present.N.decoder.*`) out.

That is optimum's decoder-with-past layout, with the cross-attention cache made by the encoder's
file, as onnxruntime-genai ships Whisper: no third file for the first step, and no `If` node
that switches between two decoders. The wrappers hand transformers an `EncoderDecoderCache` of
two `DynamicCache`s under the keyword forward() names (`past_key_values` up to transformers
5.23, `cache` from 5.24: flat_cache.CACHE_KEYWORDS), so the model runs the code it runs
in `generate()`. The start token, the pad and end tokens come from its generation config.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, NoReturn

import numpy as np

from onnx_parity.errors import LoadError
from onnx_parity.frozen import frozen
from onnx_parity.run.adapters.flat_cache import (
    CACHE_KEYWORDS,
    EXPORT_NEW,
    EXPORT_PAST,
    cache_keyword,
    forward_parameters,
    returned_cache,
)
from onnx_parity.run.adapters.greedy import LOGITS, MASK
from onnx_parity.spec import InputSpec
from onnx_parity.spec.model import FEATURES, PROMPT

HIDDEN = "last_hidden_state"
ENCODER_MASK = "encoder_attention_mask"
EXPORT_SOURCE = 4  # the source length an export of a text model is traced at


def past_names(layers: int, half: str) -> tuple[str, ...]:
    return tuple(f"past_key_values.{i}.{half}.{part}" for i in range(layers)
                 for part in ("key", "value"))


def present_names(layers: int, half: str) -> tuple[str, ...]:
    return tuple(f"present.{i}.{half}.{part}" for i in range(layers)
                 for part in ("key", "value"))


@frozen
class Seq2SeqLayout:
    """One encoder-decoder's two halves: what each takes and gives, and its decoding tokens."""

    layers: int  # decoder layers, each with a self- and a cross-attention cache
    heads: int
    head_dim: int
    hidden: int  # the encoder's output width (d_model)
    speech: bool  # input_features in (Whisper), else input_ids and a mask
    start: int  # decoder_start_token_id
    keyword: str = CACHE_KEYWORDS[-1]
    features: tuple[int, int] = (0, 0)  # speech: mel bins and frames, which the encoder fixes

    @property
    def encoder_inputs(self) -> tuple[InputSpec, ...]:
        if self.speech:
            return (InputSpec(FEATURES, ("batch", *self.features), "float32"),)
        return (InputSpec(PROMPT, ("batch", "source"), "int64"),
                InputSpec(MASK, ("batch", "source"), "int64"))

    @property
    def encoder_outputs(self) -> tuple[str, ...]:
        return (HIDDEN, *present_names(self.layers, "encoder"))

    @property
    def inputs(self) -> tuple[InputSpec, ...]:
        """The decoder's inputs: the new token, the encoder's mask (text), both caches."""
        kv = ("batch", self.heads, "past", self.head_dim)
        cross = ("batch", self.heads, "source", self.head_dim)
        mask = () if self.speech else (InputSpec(ENCODER_MASK, ("batch", "source"), "int64"),)
        return (InputSpec(PROMPT, ("batch", "seq"), "int64"), *mask,
                *(InputSpec(n, kv, "float32") for n in past_names(self.layers, "decoder")),
                *(InputSpec(n, cross, "float32") for n in past_names(self.layers, "encoder")))

    @property
    def outputs(self) -> tuple[str, ...]:
        return (LOGITS, *present_names(self.layers, "decoder"))


def refusal(module: Any) -> str | None:
    """Why `module` cannot go through `adapter: seq2seq-lm` before it runs, or None."""
    config = getattr(module, "config", None)
    name = type(module).__name__
    if config is None or not getattr(config, "is_encoder_decoder", False):
        return (f"{name} is not an encoder-decoder model (its config has no "
                "is_encoder_decoder); adapter: seq2seq-lm takes T5, BART, Whisper and the like:"
                " use adapter: causal-lm for a decoder-only model")
    if not callable(getattr(module, "get_encoder", None)):
        return (f"{name} has no get_encoder(): adapter: seq2seq-lm needs a Hugging Face "
                "model for conditional generation (…ForConditionalGeneration), not its bare "
                "encoder-decoder; or leave the adapter out and check each half as a model of "
                "its own")
    if cache_keyword(module) is None:
        return (f"{name}.forward() takes no past_key_values or cache: adapter: seq2seq-lm "
                "needs the Hugging Face contract, forward(input_ids or input_features, "
                "attention_mask, decoder_input_ids, encoder_outputs, past_key_values (or cache"
                "), use_cache, …); or leave the adapter out and check each half as a model of "
                "its own")
    return None


def _refused(name: str, why: str, cause: Exception | None = None) -> NoReturn:
    raise LoadError(f"{name} {why}; adapter: seq2seq-lm supports encoder-decoders whose cache is"
                    " an EncoderDecoderCache of full-length layers (tested: T5, BART, Whisper): "
                    "export its encoder and its decoder with wrappers of your own and check each"
                    " as a model, or leave the adapter out") from cause


def layout_of_model(lm: Any) -> Seq2SeqLayout:
    """The model's two halves, from its config and one decoder call on a tiny input; a
    LoadError, with what to do, for a model the adapter cannot run."""
    problem = refusal(lm)
    if problem:
        raise LoadError(problem)
    name = type(lm).__name__
    config = lm.config
    start = _start_token(lm)
    speech = FEATURES in forward_parameters(lm)
    features = (0, 0)
    if speech:
        bins, positions = (getattr(config, k, None) for k in ("num_mel_bins",
                                                               "max_source_positions"))
        if not isinstance(bins, int) or not isinstance(positions, int):
            _refused(name, "takes input_features but its config names no num_mel_bins and "
                     "max_source_positions")
        features = (bins, 2 * positions)  # Whisper's two convolutions, the second of stride 2
    keyword = cache_keyword(lm) or CACHE_KEYWORDS[-1]
    layout = Seq2SeqLayout(0, 0, 0, int(config.d_model), speech, start, keyword, features)
    import torch

    try:
        example = encoder_example(layout, 1)
        with torch.no_grad():
            hidden = encoder_module(lm, layout)(*example)[0]  # the hidden state alone
            cross = _cross(lm, layout, hidden, None if speech else example[1])
    except LoadError:
        raise
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        _refused(name, f"raised {type(exc).__name__} ({first}) when run with an "
                 "EncoderDecoderCache", exc)
    keys = [layer.keys for layer in cross.layers]
    if not keys or any(k is None or k.dim() != 4 for k in keys):
        _refused(name, "keeps cross-attention tensors that are not [batch, heads, source, "
                 "head_dim]")
    shapes = {(int(k.shape[1]), int(k.shape[3])) for k in keys}
    if len(shapes) != 1:
        _refused(name, "keeps cache layers of different shapes")
    heads, head_dim = shapes.pop()
    return Seq2SeqLayout(len(keys), heads, head_dim, layout.hidden, speech, start, keyword,
                         features)


def _start_token(lm: Any) -> int:
    generation = getattr(lm, "generation_config", None)
    for source in (generation, lm.config):
        token = getattr(source, "decoder_start_token_id", None)
        if isinstance(token, int) and token >= 0:
            return token
    raise LoadError(f"{type(lm).__name__} has no decoder_start_token_id in its generation "
                    "config or its config: set generation_config.decoder_start_token_id "
                    "(the token its decoder starts from) in the factory")


def _call(lm: Any, layout: Seq2SeqLayout, ids: Any, hidden: Any, mask: Any,
          cache: Any) -> Any:
    keywords: dict[str, Any] = {layout.keyword: cache}
    if mask is not None:
        keywords[MASK] = mask
    return lm(decoder_input_ids=ids, encoder_outputs=(hidden,), use_cache=True,
              return_dict=True, **keywords)


def _cross(lm: Any, layout: Seq2SeqLayout, hidden: Any, mask: Any) -> Any:
    """The cross-attention cache of `hidden`: the decoder run once on the start token with an
    empty cache fills it (its self-attention half and its logits are left unused)."""
    import torch
    from transformers import DynamicCache, EncoderDecoderCache

    ids = torch.full((hidden.shape[0], 1), layout.start, dtype=torch.int64)
    cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
    out = _call(lm, layout, ids, hidden, mask, cache)
    found = returned_cache(out)
    if not isinstance(found, EncoderDecoderCache):
        _refused(type(lm).__name__, f"returned {type(found).__name__} as its cache, not the "
                 "EncoderDecoderCache it was given")
    return found.cross_attention_cache


def encoder_module(lm: Any, layout: Seq2SeqLayout) -> Any:
    """The encoder's half: forward(input_ids, attention_mask) or forward(input_features) →
    (last_hidden_state, the cross-attention keys and values layer by layer)."""
    import torch

    names = (FEATURES,) if layout.speech else (PROMPT, MASK)
    parameters = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                  for n in ("self", *names)]

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            # The encoder first, so that its layers are named as the export's scopes name
            # them (encoder.layers.1), which localization matches its activations by.
            self.encoder = lm.get_encoder()
            self.lm = lm

        def forward(self, *tensors: Any) -> tuple[Any, ...]:
            mask = None if layout.speech else tensors[1]
            encoded = self.encoder(*tensors, return_dict=True)
            hidden = encoded[HIDDEN] if isinstance(encoded, Mapping) else encoded[0]
            if not layout.layers:  # asked for the hidden state alone (layout_of_model)
                return (hidden,)
            cross = _cross(self.lm, layout, hidden, mask)
            return (hidden, *(t for layer in cross.layers for t in (layer.keys, layer.values)))

    Encoder.forward.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    return Encoder().eval()


def decoder_module(lm: Any, layout: Seq2SeqLayout) -> Any:
    """The decoder's half: forward(input_ids, [encoder_attention_mask,] past self keys and
    values…, cross keys and values…) → (logits, the self-attention cache grown by the new
    tokens). The encoder's output is not an input: the cross-attention cache holds all the
    decoder reads of it, and a placeholder of its shape stands in for it."""
    import torch
    from transformers import DynamicCache, EncoderDecoderCache

    n = layout.layers
    names = (PROMPT, *(() if layout.speech else (ENCODER_MASK,)),
             *past_names(n, "decoder"), *past_names(n, "encoder"))
    parameters = [inspect.Parameter(p.replace(".", "_"), inspect.Parameter.POSITIONAL_OR_KEYWORD)
                  for p in ("self", *names)]

    class Decoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lm = lm

        def forward(self, *tensors: Any) -> tuple[Any, ...]:
            ids, rest = tensors[0], list(tensors[1:])
            mask = None if layout.speech else rest.pop(0)
            own, cross = rest[:2 * n], rest[2 * n:]
            cache = EncoderDecoderCache(
                DynamicCache([(own[2 * i], own[2 * i + 1]) for i in range(n)]),
                DynamicCache([(cross[2 * i], cross[2 * i + 1]) for i in range(n)]))
            key = cross[0]
            hidden = key.new_zeros((key.shape[0], key.shape[2], layout.hidden))
            out = _call(self.lm, layout, ids, hidden, mask, cache)
            grown = returned_cache(out).self_attention_cache
            logits = out[LOGITS] if isinstance(out, Mapping) else out.logits
            return (logits, *(t for layer in grown.layers for t in (layer.keys, layer.values)))

    Decoder.forward.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    return Decoder().eval()


def encoder_example(layout: Seq2SeqLayout, batch: int, vocab: int = 2) -> list[Any]:
    """Tensors to trace the encoder at, in `layout.encoder_inputs`' order."""
    import torch

    generator = torch.Generator().manual_seed(0)
    if layout.speech:
        return [torch.randn((batch, *layout.features), generator=generator)]
    ids = torch.randint(0, max(vocab, 1), (batch, EXPORT_SOURCE), generator=generator)
    return [ids, torch.ones_like(ids)]


def decoder_example(layout: Seq2SeqLayout, batch: int, vocab: int) -> list[Any]:
    """Tensors to trace the decoder at, in `layout.inputs`' order: a past and new tokens of 2
    or more, so that neither is specialised."""
    import torch

    generator = torch.Generator().manual_seed(0)
    source = layout.features[1] // 2 if layout.speech else EXPORT_SOURCE
    ids = torch.randint(0, max(vocab, 1), (batch, EXPORT_NEW), generator=generator)
    mask = [] if layout.speech else [torch.ones((batch, source), dtype=torch.int64)]
    own = [torch.randn((batch, layout.heads, EXPORT_PAST, layout.head_dim), generator=generator)
           for _ in past_names(layout.layers, "decoder")]
    cross = [torch.randn((batch, layout.heads, source, layout.head_dim), generator=generator)
             for _ in past_names(layout.layers, "encoder")]
    return [ids, *mask, *own, *cross]


def encoder_feed(layout: Seq2SeqLayout, inputs: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """The encoder's feed from a sample: input_features as float32, or input_ids (int64) and
    a mask of ones."""
    if layout.speech:
        return {FEATURES: np.asarray(inputs[FEATURES], dtype=np.float32)}
    ids = np.asarray(inputs[PROMPT]).astype(np.int64)
    return {PROMPT: ids, MASK: np.ones(ids.shape, dtype=np.int64)}

