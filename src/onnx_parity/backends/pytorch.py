"""The PyTorch reference: the user's factory called, seeded and in eval mode, the spec's inputs
bound to its forward(), and its outputs.

torch is imported here and only when a model has a torch factory: a spec of ONNX files with
recorded data never imports it (a broken CUDA install then costs those models nothing).
"""

from __future__ import annotations

import difflib
import functools
import importlib
import importlib.util
import inspect
import logging
import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from onnx_parity.errors import LoadError, RunError, user_frame
from onnx_parity.frozen import frozen
from onnx_parity.spec import InputSpec, ModelSpec
from onnx_parity.spec.violations import quoted

T = TypeVar("T")


@functools.cache
def import_torch(threads: int) -> Any:
    """torch, imported once per process with `threads` compute threads and the exporters'
    chatter turned down (after the import, which sets torch's own log levels)."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    warnings.simplefilter("ignore", DeprecationWarning)
    warnings.simplefilter("ignore", FutureWarning)
    warnings.simplefilter("ignore", UserWarning)
    for name in ("torch", "torch.onnx", "torch.export", "onnxscript", "onnx_ir"):
        logging.getLogger(name).setLevel(logging.ERROR)
    return torch


@frozen
class Binding:
    """How the spec's inputs reach forward(): by name (`by_name` holds their names in
    forward()'s order), or by position in the spec's order; `note` says why, where it is not
    by name because it cannot be."""

    by_name: tuple[str, ...] | None = None
    note: str | None = None

    def call(self, values: Mapping[str, T]) -> tuple[list[T], dict[str, T]]:
        """forward()'s positional and keyword arguments for the inputs `values`."""
        if self.by_name is None:
            return list(values.values()), {}
        return [], {name: values[name] for name in self.by_name if name in values}


@frozen
class LoadedModule:
    module: Any
    training_layers: tuple[str, ...]  # layer types that behaved differently before eval()
    cast_to: str | None = None  # the float dtype the module was cast to, to match its inputs
    binding: Binding = field(default_factory=Binding)


def load_module(model: ModelSpec, root: Path) -> LoadedModule:
    """Call the factory, put the module in eval mode, as the exporters see it, and bind the
    spec's inputs to its forward() (a LoadError for a spec that mixes names and positions)."""
    import torch

    _fresh_torch_state()
    factory = _resolve_factory(model.torch or "", root)
    _seed_everything()
    try:
        module = factory(**model.args)
    except Exception as exc:
        raise LoadError(f"{model.torch}(**{dict(model.args)!r}) raised "
                        f"{type(exc).__name__}: {exc}{user_frame(exc)}") from exc
    if not isinstance(module, torch.nn.Module):
        raise LoadError(f"{model.torch} returned {type(module).__name__}, not a torch.nn.Module")
    training_layers = _training_layers(module) if module.training else ()
    module.eval()
    cast_to = _input_float_dtype(model.inputs)
    if cast_to is not None:
        module.to(getattr(torch, cast_to))
    return LoadedModule(module, training_layers, cast_to, bind_inputs(module, model))


def bind_inputs(module: Any, model: ModelSpec) -> Binding:
    """By name when every input is named after a parameter of forward() (GPT-2's forward takes
    past_key_values second: a mask sent by position would land there); by position, as
    always, when none is (an nn.Sequential takes `input`, which specs call `x`)."""
    import torch

    names = [i.name for i in model.inputs]
    unknown = "a TorchScript module" if isinstance(module, torch.jit.ScriptModule) else None
    try:
        parameters = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        unknown = unknown or "forward() has no signature Python can read"
        parameters = []
    if not names:
        return Binding()
    by_keyword = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    known = [p.name for p in parameters if p.kind in by_keyword]
    star = any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in parameters)
    if unknown is None and not known and star:
        unknown = "forward(*args)"
    positional = (f"inputs go to forward() by position, in the spec's order "
                  f"({', '.join(names)})")
    if unknown is not None:
        return Binding(note=f"{positional}: the names of its parameters cannot be known "
                            f"({unknown})")
    if set(names) <= set(known):
        return Binding(by_name=tuple(n for n in known if n in names))
    matched = [n for n in names if n in known]
    stray = [n for n in names if n not in known]
    if not matched:
        return Binding()
    one = len(stray) == 1
    if star:  # the others may be meant for *args
        return Binding(note=f"{positional}: {', '.join(map(quoted, stray))} "
                            f"{'names' if one else 'name'} no parameter of forward(), which "
                            "takes *args")
    free = [n for n in known if n not in names]
    raise LoadError(
        f"{'input' if one else 'inputs'} {', '.join(map(quoted, stray))} of model "
        f"{quoted(model.name)} {'names' if one else 'name'} no parameter of "
        f"forward(), while {quoted(matched[0])} does: forward() takes {', '.join(known)}"
        f"{_suggestions(stray, free)}; name every input after a parameter of forward(), to pass"
        " them by name, or none of them, to pass them by position in the spec's order")


def _suggestions(stray: Sequence[str], free: Sequence[str]) -> str:
    """A hint, ` (did you mean 'attention_mask'?)`, for each stray name close to a parameter
    no input takes; with several strays, each says which it is for."""
    found = []
    for name in stray:
        close = difflib.get_close_matches(name.lower(), [f.lower() for f in free], n=1)
        if close:
            match = next(f for f in free if f.lower() == close[0])
            found.append(f"'{match}'" if len(stray) == 1 else f"'{match}' for {quoted(name)}")
    return f" (did you mean {', '.join(found)}?)" if found else ""


def _fresh_torch_state() -> None:
    """torch's process-wide settings as a fresh Python process has them, before each model's
    code is imported and its factory called:
    the model before this one in the same worker may have left gradients off (which sends
    nn.MultiheadAttention down a fused path the TorchScript exporter cannot export), another
    default dtype or device, deterministic algorithms or a lower matmul precision, none of which
    the user's own script would have run this model with. What the factory itself sets stays."""
    import torch

    torch.set_grad_enabled(True)
    torch.set_default_dtype(torch.float32)
    torch.set_default_device(None)
    # Only when something turned them on: the call imports torch's compiler (inductor, dynamo:
    # over a second), which a model whose export comes from the cache never needs.
    inductor = sys.modules.get("torch._inductor.config")
    if (torch.are_deterministic_algorithms_enabled()
            or torch.is_deterministic_algorithms_warn_only_enabled()
            or getattr(inductor, "deterministic", False)):
        torch.use_deterministic_algorithms(False)
    torch.set_float32_matmul_precision("highest")
    torch.set_autocast_enabled("cpu", False)


def _seed_everything(seed: int = 0) -> None:
    """torch's own start-up seed differs on every run: a factory that leaves weights to the
    global generators would build a different model each time, and its numbers would wander."""
    import random

    import torch

    random.seed(seed)
    np.random.seed(seed)  # the legacy global generator: the one factories use
    torch.manual_seed(seed)


def _input_float_dtype(inputs: Sequence[InputSpec]) -> str | None:
    """Float32 unless the inputs say otherwise: float16 inputs mean a float16 model."""
    floats = {i.dtype for i in inputs if i.dtype in ("float32", "float16", "bfloat16", "float64")}
    return floats.pop() if len(floats) == 1 and floats != {"float32"} else None


def _training_layers(module: Any) -> tuple[str, ...]:
    """Layer types whose output depends on train()/eval(): the ones a forgotten eval() bites."""
    from torch import nn

    def differs(m: Any) -> bool:
        if isinstance(m, nn.modules.dropout._DropoutNd):
            return bool(m.p > 0)
        if isinstance(m, nn.MultiheadAttention | nn.RNNBase):
            return bool(m.dropout > 0)
        norms = nn.modules.batchnorm._BatchNorm | nn.modules.instancenorm._InstanceNorm
        return isinstance(m, norms)

    return tuple(sorted({type(m).__name__ for m in module.modules() if m.training and differs(m)}))


def _resolve_factory(reference: str, root: Path) -> Any:
    where, _, name = reference.rpartition(":")
    try:
        if where.endswith(".py"):
            path = (root / where).resolve()
            # The factory's own imports of sibling files must work, as they do in the user's repo.
            if str(path.parent) not in sys.path:
                sys.path.insert(0, str(path.parent))
            module_name = f"onnx_parity_user_{path.stem}_{abs(hash(str(path)))}"
            spec = importlib.util.spec_from_file_location(module_name, path)
            if spec is None or spec.loader is None:
                raise LoadError(f"cannot import {path}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            spec.loader.exec_module(module)
        else:
            if str(root) not in sys.path:
                sys.path.insert(0, str(root))
            module = importlib.import_module(where)
    except LoadError:
        raise
    except Exception as exc:
        raise LoadError(f"importing {where} failed: {type(exc).__name__}: {exc}") from exc
    factory = getattr(module, name, None)
    if not callable(factory):
        raise LoadError(f"{where} has no callable '{name}'")
    return factory


def forward(module: Any, inputs: Sequence[Any], forward_args: Mapping[str, Any]) -> Any:
    """module(*inputs, **forward_args) without gradients; an exception names the user's line.

    Without gradients because nothing here trains and the outputs are only read; the export
    runs with the gradient mode the user's own script has (prepare/export.py)."""
    import torch

    with torch.no_grad():
        try:
            return module(*inputs, **forward_args)
        except Exception as exc:
            raise RunError(f"PyTorch forward() raised {type(exc).__name__}: {exc}"
                           f"{user_frame(exc)}") from exc


def torch_outputs(module: Any, sample: Mapping[str, np.ndarray],
                  forward_args: Mapping[str, Any] | None = None,
                  binding: Binding | None = None) -> list[np.ndarray]:
    """Run the module on the sample's arrays, bound to forward() as `binding` says (by
    position in the spec's order without one)."""
    import torch

    tensors = {name: torch.from_numpy(np.ascontiguousarray(a)) for name, a in sample.items()}
    args, keywords = (binding or Binding()).call(tensors)
    result = forward(module, args, {**keywords, **(forward_args or {})} if forward_args
                     else keywords)
    if isinstance(result, tuple | list) and all(isinstance(t, torch.Tensor) for t in result):
        flat = list(result)  # named_outputs' order, without the names (a rollout's every step)
    else:
        flat = [t for _, t in named_outputs(result)]
    return [t.detach().cpu().numpy() for t in flat]


def named_outputs(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """(name, tensor) in the order both exporters flatten outputs: a mapping's values by key
    (None left out, as the exporters leave it out; a Hugging Face ModelOutput is a mapping),
    lists and tuples by position. Anything else ONNX cannot hold is an error with the way out."""
    import torch

    if isinstance(value, torch.Tensor):
        return [(prefix or "output", value)]
    if value is None:
        return []
    if isinstance(value, int | float | bool):
        return [(prefix or "output", torch.tensor(value))]
    if isinstance(value, Mapping):
        parts = [(f"{prefix}.{key}" if prefix else str(key), item) for key, item in value.items()]
    elif isinstance(value, list | tuple):
        parts = [(f"{prefix}.{i}" if prefix else f"output_{i}", item)
                 for i, item in enumerate(value)]
    else:
        where = f" at {prefix}" if prefix else ""
        hint = ("; if it is a key-value cache (past_key_values), pass forward_args: "
                "{use_cache: false} on the model" if "cache" in type(value).__name__.lower()
                else "; return tensors (or mappings and sequences of them) only")
        raise RunError(f"forward() returned a {type(value).__name__}{where}, which ONNX cannot "
                       f"hold{hint}")
    return [pair for name, item in parts for pair in named_outputs(item, name)]


def output_names(result: Any) -> tuple[str, ...]:
    """The names the exported outputs get: a mapping's keys (nested ones dotted), else
    `output_0`, `output_1`, … by position (`output_0.1` inside a nested tuple). Never the
    exporter's own: the TorchScript exporter numbers outputs by its graph (`191`), and those
    numbers change with the opset, so a spec or a baseline could not name them."""
    return tuple(name for name, _ in named_outputs(
        result if isinstance(result, Mapping | list | tuple) else (result,)))

