"""The adapters' home: how each kind of model is wrapped, exported, served and rolled out,
behind the protocols of base.py. `adapters` is the one registration: the spec's `adapter:`
name (spec/model.ADAPTERS) to its adapter; `adapter_for` gives the plain model for a model
without one."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from onnx_parity.run.adapters.base import Adapter
from onnx_parity.run.adapters.plain import Plain

if TYPE_CHECKING:
    from onnx_parity.spec import ModelSpec

PLAIN: Adapter = Plain()


@functools.cache
def adapters() -> dict[str, Adapter]:
    """Every adapter a spec may name, by its name."""
    # Imported when a model names one: the worker of a run without a language model (an
    # ONNX-only check) never loads their modules.
    from onnx_parity.run.adapters.causal_lm import CausalLM
    from onnx_parity.run.adapters.seq2seq import Seq2SeqLM

    return {"causal-lm": CausalLM(), "seq2seq-lm": Seq2SeqLM()}


def adapter_for(model: ModelSpec) -> Adapter:
    """The model's adapter: the one its `adapter:` names, else the plain model."""
    return PLAIN if model.adapter is None else adapters()[model.adapter]
