"""A tiny decoder for examples/decoder.yaml: a Llama with grouped-query attention, built from a
config with random weights (nothing is downloaded). A real project returns its own model here,
e.g. AutoModelForCausalLM.from_pretrained(...)."""

from __future__ import annotations

from typing import Any


def make_tiny_llama() -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=64)
    return LlamaForCausalLM(config).eval()
