"""Tiny encoder-decoders for examples/seq2seq.yaml: T5, BART and Whisper, each built from a
config with random weights (nothing is downloaded). A real project returns its own model here,
e.g. AutoModelForSeq2SeqLM.from_pretrained(...) or
WhisperForConditionalGeneration.from_pretrained(...)."""

from __future__ import annotations

from typing import Any

VOCAB = 64
MEL_BINS, FRAMES = 8, 32  # Whisper's encoder takes exactly 2 x max_source_positions frames


def make_tiny_t5() -> Any:
    from transformers import T5Config, T5ForConditionalGeneration

    return T5ForConditionalGeneration(T5Config(
        vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
        num_heads=4, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)).eval()


def make_tiny_bart() -> Any:
    from transformers import BartConfig, BartForConditionalGeneration

    return BartForConditionalGeneration(BartConfig(
        vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_position_embeddings=64, pad_token_id=1, bos_token_id=0,
        eos_token_id=2, decoder_start_token_id=2, forced_bos_token_id=None)).eval()


def make_tiny_whisper() -> Any:
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    return WhisperForConditionalGeneration(WhisperConfig(
        vocab_size=VOCAB, num_mel_bins=MEL_BINS, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
        decoder_ffn_dim=64, max_source_positions=FRAMES // 2, max_target_positions=32,
        pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=3,
        suppress_tokens=None, begin_suppress_tokens=None)).eval()
