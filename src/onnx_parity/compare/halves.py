"""Which half of an encoder-decoder drifted (adapter: seq2seq-lm), in words: the encoder's
output, compared once per sample before any decoder step, or the decoder's steps, rolled out on
each side's own encoder output. Pure: figures and verdicts in, sentences out."""

from __future__ import annotations

from collections.abc import Sequence

from onnx_parity.results import OutputComparison
from onnx_parity.wording import counted


def encoder_failure(comparisons: Sequence[OutputComparison]) -> str:
    """The sentence that leads an encoder's failure: its outputs out of tolerance, and that
    the decoder was not rolled out on them."""
    failed = [c.name for c in comparisons if not c.passed]
    return (f"the encoder drifted: its output ({', '.join(failed)}) is out of tolerance before "
            "any decoder step, so the decoder was not rolled out on it")


def decoder_failure(step: int | None, steps: int) -> str:
    """The sentence that leads a decoder's failure: the encoder's output was within tolerance,
    the decoder's steps drifted from `step`."""
    at = f"at step {step} of {steps}" if step is not None else f"over {counted(steps, 'step')}"
    return (f"the decoder drifted {at} (the encoder's output within tolerance; the decoder "
            "fed each side's own cross-attention cache)")


def encoder_note(comparisons: Sequence[OutputComparison]) -> str:
    """A passing encoder, said once beside the decoder's verdict."""
    return (f"the encoder's output within tolerance ({counted(len(comparisons), 'output')}: "
            "last_hidden_state and the cross-attention cache), then the decoder rolled out on"
            " each side's own")
