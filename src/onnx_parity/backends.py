"""The PyTorch reference and ONNX Runtime targets: each only produces outputs, never compares."""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from onnx_parity.errors import LoadError, RunError
from onnx_parity.spec import InputSpec, ModelSpec, TargetSpec

logger = logging.getLogger(__name__)

_ONNX_TYPES = {
    "tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
    "tensor(bfloat16)": "bfloat16", "tensor(int64)": "int64", "tensor(int32)": "int32",
    "tensor(int16)": "int16", "tensor(int8)": "int8", "tensor(uint8)": "uint8",
    "tensor(bool)": "bool",
}


@dataclass(frozen=True)
class LoadedModule:
    module: Any
    training_layers: tuple[str, ...]  # layer types that behaved differently before eval()


def load_module(model: ModelSpec, root: Path) -> LoadedModule:
    """Call the factory and put the module in eval mode, as the exporters see it."""
    import torch

    factory = _resolve_factory(model.torch or "", root)
    try:
        module = factory(**model.args)
    except Exception as exc:
        raise LoadError(f"{model.torch}(**{dict(model.args)!r}) raised "
                        f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(module, torch.nn.Module):
        raise LoadError(f"{model.torch} returned {type(module).__name__}, not a torch.nn.Module")
    training_layers = _training_layers(module) if module.training else ()
    module.eval()
    return LoadedModule(module, training_layers)


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


def torch_outputs(module: Any, sample: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Run the module on the sample's arrays, inputs passed positionally in spec order."""
    import torch

    with torch.no_grad():
        args = [torch.from_numpy(np.ascontiguousarray(a)) for a in sample.values()]
        try:
            result = module(*args)
        except Exception as exc:
            raise RunError(f"PyTorch forward() raised {type(exc).__name__}: {exc}") from exc
    return [t.detach().cpu().numpy() for t in _flatten(result)]


def _flatten(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, Mapping):
        return [t for v in value.values() for t in _flatten(v)]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _flatten(v)]
    if isinstance(value, int | float | bool):
        return [torch.tensor(value)]
    raise RunError(f"forward() returned a {type(value).__name__}; expected tensors")


@dataclass(frozen=True)
class SessionFacts:
    """What ONNX Runtime really did with a target's request."""

    requested: tuple[str, ...]
    active: tuple[str, ...]

    @property
    def fell_back(self) -> bool:
        return not self.active or self.active[0] != self.requested[0]


class OrtTarget:
    """One InferenceSession for one model file on one target."""

    def __init__(self, path: Path, target: TargetSpec, threads: int | None = None) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 3
        if threads:
            options.intra_op_num_threads = threads
        providers = [
            (p, dict(target.provider_options[p])) if p in target.provider_options else p
            for p in target.providers
        ]
        try:
            self.session = ort.InferenceSession(str(path), options, providers=providers)
        except Exception as exc:
            raise RunError(f"ONNX Runtime could not create a session for target "
                           f"'{target.name}': {type(exc).__name__}: {exc}") from exc
        self.facts = SessionFacts(tuple(target.providers), tuple(self.session.get_providers()))

    def input_specs(self) -> tuple[InputSpec, ...]:
        """The model's declared inputs, for models given as ONNX files without `inputs`."""
        specs = []
        for arg in self.session.get_inputs():
            dtype = _ONNX_TYPES.get(arg.type)
            if dtype is None:
                raise RunError(f"input '{arg.name}' has type {arg.type}, which is not supported")
            # Axis 0 is the batch, as in recorded data: a static batch then fails loudly on
            # other batch sizes instead of being fed the size it happens to declare.
            shape = tuple("batch" if axis == 0 else d if isinstance(d, int) else (d or f"dim{axis}")
                          for axis, d in enumerate(arg.shape))
            specs.append(InputSpec(name=arg.name, shape=shape, dtype=dtype))
        return tuple(specs)

    def output_names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.session.get_outputs())

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        self._check_feeds(feeds)
        try:
            return list(self.session.run(None, dict(feeds)))
        except Exception as exc:
            raise RunError(f"ONNX Runtime run failed: {type(exc).__name__}: {exc}") from exc

    def _check_feeds(self, feeds: Mapping[str, np.ndarray]) -> None:
        """Fail with names and numbers before ORT's own, vaguer, complaint."""
        declared = {a.name: a for a in self.session.get_inputs()}
        unknown = sorted(set(feeds) - set(declared))
        missing = sorted(set(declared) - set(feeds))
        if unknown or missing:
            raise RunError(
                f"inputs do not match the model: it declares {', '.join(declared)}"
                + (f"; missing {', '.join(missing)}" if missing else "")
                + (f"; unexpected {', '.join(unknown)}" if unknown else "")
            )
        for name, array in feeds.items():
            arg = declared[name]
            want = _ONNX_TYPES.get(arg.type)
            if want is not None and want != array.dtype.name:
                raise RunError(f"input '{name}': model declares {want}, data has {array.dtype}")
            if len(arg.shape) != array.ndim:
                raise RunError(f"input '{name}': model expects rank {len(arg.shape)} "
                               f"{_show(arg.shape)}, data has shape {tuple(array.shape)}")
            for axis, (dim, size) in enumerate(zip(arg.shape, array.shape, strict=True)):
                if isinstance(dim, int) and dim != size:
                    expects = f"batch {dim}" if axis == 0 else f"size {dim} on axis {axis}"
                    raise RunError(f"model expects {expects} on input '{name}', data has {size}")


def _show(shape: Sequence[Any]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def cuda_usable() -> bool:
    """Whether ONNX Runtime really runs a session on CUDA here (listed is not enough)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return False
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    options = ort.SessionOptions()
    options.log_severity_level = 4
    try:
        session = ort.InferenceSession(model.SerializeToString(), options,
                                       providers=["CUDAExecutionProvider"])
    except Exception:
        return False
    return "CUDAExecutionProvider" in session.get_providers()
