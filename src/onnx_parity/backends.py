"""The PyTorch reference and ONNX Runtime targets: each only produces outputs, never compares."""

from __future__ import annotations

import contextlib
import functools
import glob
import importlib
import importlib.util
import io
import json
import logging
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from onnx_parity.compat import GPU_PROVIDERS
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
    cast_to: str | None = None  # the float dtype the module was cast to, to match its inputs


def load_module(model: ModelSpec, root: Path) -> LoadedModule:
    """Call the factory and put the module in eval mode, as the exporters see it."""
    import torch

    factory = _resolve_factory(model.torch or "", root)
    _seed_everything()
    try:
        module = factory(**model.args)
    except Exception as exc:
        raise LoadError(f"{model.torch}(**{dict(model.args)!r}) raised "
                        f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(module, torch.nn.Module):
        raise LoadError(f"{model.torch} returned {type(module).__name__}, not a torch.nn.Module")
    training_layers = _training_layers(module) if module.training else ()
    module.eval()
    cast_to = _input_float_dtype(model.inputs)
    if cast_to is not None:
        module.to(getattr(torch, cast_to))
    return LoadedModule(module, training_layers, cast_to)


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


CPU = "CPUExecutionProvider"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_ORT_LINE = re.compile(r"\[([EWF]):onnxruntime:[^\]]*\]\s*(.*)")
_ORT_STATUS = re.compile(r"^.*\[ONNXRuntimeError\] : \d+ : \w+ : ")
_LIBRARY_PATH = re.compile(r"/\S*/(lib[\w.+-]+\.so[\w.]*)")
_ABOUT_PROVIDERS = re.compile(r"provider|librar|cuda|cudnn|tensorrt|assigned|fallback", re.I)


@dataclass(frozen=True)
class SessionFacts:
    """What ONNX Runtime really did with a target's request, and what it logged meanwhile."""

    requested: tuple[str, ...]
    active: tuple[str, ...]
    log: tuple[str, ...] = ()  # its warnings and errors while creating the session, tidied

    @property
    def can_fall_back(self) -> bool:
        return bool(self.requested) and self.requested[0] != CPU

    @property
    def fell_back(self) -> bool:
        return not self.active or self.active[0] != self.requested[0]

    @property
    def reason(self) -> str:
        """The logged lines about providers and libraries: why a provider is missing."""
        return "; ".join(line for line in self.log if _ABOUT_PROVIDERS.search(line))


@dataclass(frozen=True)
class Placement:
    """Which provider ran each node of one run, counted per provider and op type (from
    ONNX Runtime's profile, whose node events record both)."""

    nodes: Mapping[str, Mapping[str, int]]
    cpu_shape_nodes: Mapping[str, int] = field(default_factory=dict)  # of nodes["CPU..."]

    def elsewhere(self, preferred: str,
                  allow_cpu_ops: Sequence[str] = ()) -> dict[str, dict[str, int]]:
        """Nodes not on `preferred`, less the CPU nodes that only compute shapes (ONNX Runtime
        puts those on the CPU on purpose) and CPU nodes of the op types the target allows."""
        stray: dict[str, dict[str, int]] = {}
        for provider, ops in self.nodes.items():
            if provider == preferred:
                continue
            kept = {}
            for op, count in ops.items():
                if provider == CPU:
                    if op in allow_cpu_ops:
                        continue
                    count -= self.cpu_shape_nodes.get(op, 0)
                if count > 0:
                    kept[op] = count
            if kept:
                stray[provider] = kept
        return stray


_SHAPE_TYPES = frozenset({"int64", "int32", "bool"})
# The ops of shape arithmetic; an ArgMax or TopK also yields integer vectors, but is real work.
_SHAPE_OPS = frozenset({
    "Shape", "Size", "Gather", "Unsqueeze", "Squeeze", "Concat", "Slice", "Cast", "Identity",
    "ConstantOfShape", "Range", "Reshape", "Expand", "Add", "Sub", "Mul", "Div", "Mod", "Neg",
    "Abs", "Min", "Max", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not",
    "And", "Or", "Where", "ReduceProd", "ReduceSum", "Floor", "Ceil",
})


def computes_shapes(args: Mapping[str, Any]) -> bool:
    """A profiled node of shape arithmetic whose outputs are all integer or boolean vectors or
    scalars: what ONNX Runtime deliberately keeps on the CPU next to a GPU graph."""
    if args.get("op_name") not in _SHAPE_OPS:
        return False
    outputs = args.get("output_type_shape")
    if not isinstance(outputs, list) or not outputs:
        return False
    for output in outputs:
        if not isinstance(output, dict) or len(output) != 1:
            return False
        ((kind, shape),) = output.items()
        if kind not in _SHAPE_TYPES or not isinstance(shape, list) or len(shape) > 1:
            return False
    return True


def placement_from_profile(events: Any) -> Placement:
    """Count ONNX Runtime's profiled node events per provider and op type."""
    nodes: dict[str, dict[str, int]] = {}
    shapes: dict[str, int] = {}
    for event in events if isinstance(events, list) else ():
        args = event.get("args") if isinstance(event, dict) else None
        if (event.get("cat") != "Node" or not str(event.get("name", "")).endswith(
                "_kernel_time") or not isinstance(args, dict) or "provider" not in args):
            continue
        ops = nodes.setdefault(str(args["provider"]), {})
        op = str(args.get("op_name", "?"))
        ops[op] = ops.get(op, 0) + 1
        if args["provider"] == CPU and computes_shapes(args):
            shapes[op] = shapes.get(op, 0) + 1
    return Placement({p: dict(sorted(ops.items())) for p, ops in sorted(nodes.items())},
                     dict(sorted(shapes.items())))


def tidy_log(text: str) -> tuple[str, ...]:
    """ONNX Runtime's warning and error lines, without colours, timestamps, source locations and
    install paths: 'Failed to load library libonnxruntime_providers_cuda.so with error: ...'."""
    lines = []
    for raw in _ANSI.sub("", text).splitlines():
        match = _ORT_LINE.search(raw)
        if match is None:
            continue
        message = _LIBRARY_PATH.sub(r"\1", _ORT_STATUS.sub("", match.group(2))).strip()
        message = message.split(" Please install all dependencies")[0].strip()
        if message:
            lines.append(message)
    return tuple(dict.fromkeys(lines))


@contextlib.contextmanager
def native_stderr() -> Iterator[list[str]]:
    """What native code writes to file descriptor 2 meanwhile, collected instead of shown.

    ONNX Runtime logs from C++ straight to fd 2, past Python's sys.stderr, and its default
    logger (which reports a provider that failed to load) ignores the session's log settings;
    so the only way to make those lines part of a session's facts is to point fd 2 elsewhere.
    """
    lines: list[str] = []
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no fd 2 to borrow: nothing to capture
        yield lines
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield lines
        finally:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            lines.extend(sink.read().decode("utf-8", "replace").splitlines())


@functools.cache
def preload_cuda_libraries() -> tuple[str, ...]:
    """Load pip's nvidia-* wheels as onnxruntime-gpu documents (`preload_dlls()`), once per
    process: the loader does not search site-packages, so without this only torch's import or
    LD_LIBRARY_PATH would make them visible. Returns what it printed (missing libraries)."""
    import onnxruntime as ort

    if not hasattr(ort, "preload_dlls"):  # older than 1.21
        return ()
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), native_stderr() as native:
        try:
            ort.preload_dlls()
        except Exception as exc:  # a broken install must not stop the run; the session says more
            print(f"preload_dlls() failed: {type(exc).__name__}: {exc}")
    return tuple(line.strip() for line in [*printed.getvalue().splitlines(), *native]
                 if line.strip())


def create_session(model: str | bytes, target: TargetSpec, threads: int | None = None,
                   profile_to: str | None = None) -> tuple[Any, SessionFacts]:
    """An InferenceSession for `target`, with what ONNX Runtime logged while making it."""
    import onnxruntime as ort

    if any(p in GPU_PROVIDERS for p in target.providers):
        for line in preload_cuda_libraries():
            logger.debug("onnxruntime.preload_dlls(): %s", line)
    options = ort.SessionOptions()
    options.log_severity_level = 2  # warnings too, while creating: they are captured
    if threads:
        options.intra_op_num_threads = threads
    if target.disable_cpu_ep_fallback:
        options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    if profile_to:
        options.enable_profiling = True
        options.profile_file_prefix = profile_to
    providers = [
        (p, dict(target.provider_options[p])) if p in target.provider_options else p
        for p in target.providers
    ]
    with native_stderr() as captured:
        try:
            # enable_fallback=0: onnxruntime's Python layer otherwise retries a session whose
            # provider raised on plain CPU, printing one line to stdout: a silent fall-back.
            session = ort.InferenceSession(model, options, providers=providers,
                                           enable_fallback=0)
        except Exception as exc:
            error: Exception | None = exc
        else:
            error = None
    log = tidy_log("\n".join(captured))
    if captured:
        logger.debug("target '%s': ONNX Runtime logged:\n%s", target.name, "\n".join(captured))
    if error is not None:
        logged = f" (ONNX Runtime logged: {'; '.join(log)})" if log else ""
        raise RunError(f"ONNX Runtime could not create a session for target "
                       f"'{target.name}': {type(error).__name__}: {error}{logged}") from error
    return session, SessionFacts(tuple(target.providers), tuple(session.get_providers()), log)


class OrtTarget:
    """One InferenceSession for one model file on one target.

    A target whose first provider is not the CPU is profiled for its first run, so that
    `placement()` can tell which provider ran each node; later runs are not profiled.
    """

    def __init__(self, path: Path, target: TargetSpec, threads: int | None = None) -> None:
        import onnxruntime as ort

        prefix = None
        if target.providers and target.providers[0] != CPU:
            # ONNX Runtime writes <prefix>_<time>.json when profiling ends, and only then.
            prefix = os.path.join(tempfile.gettempdir(),
                                  f"onnx-parity-profile-{os.getpid()}-{id(self)}")
        self._profile: str | None = prefix
        self._placement: Placement | None = None
        try:
            self.session, self.facts = create_session(str(path), target, threads, prefix)
        except RunError:
            for written in glob.glob(f"{prefix}_*.json") if prefix else ():
                os.remove(written)  # a session that failed to start still wrote its profile
            raise
        self._run_options = ort.RunOptions()
        self._run_options.log_severity_level = 3  # runs log errors only, as before

    def placement(self, feeds: Mapping[str, np.ndarray]) -> Placement | None:
        """Where the nodes ran, from the first run (made now on `feeds` if none was made yet);
        None for a target that was not profiled."""
        if self._profile is not None:
            self.run(feeds)
        return self._placement

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
            return list(self.session.run(None, dict(feeds), self._run_options))
        except Exception as exc:
            raise RunError(f"ONNX Runtime run failed: {type(exc).__name__}: {exc}") from exc
        finally:
            if self._profile is not None:
                self._placement = self._end_profiling()

    def __del__(self) -> None:
        # A session still profiling writes its profile when destroyed: end it here and delete.
        if getattr(self, "_profile", None) is not None and hasattr(self, "session"):
            with contextlib.suppress(Exception):
                self._end_profiling()

    def _end_profiling(self) -> Placement:
        """Count the first run's node events per provider and op type; profiling stops here."""
        self._profile = None
        path = Path(self.session.end_profiling())
        try:
            events = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            logger.debug("unreadable ONNX Runtime profile %s: %s", path, exc)
            events = []
        finally:
            with contextlib.suppress(OSError):
                path.unlink()
        return placement_from_profile(events)

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
    return probe_cuda()[0]


def probe_cuda() -> tuple[bool, str]:
    """Create a one-node session on CUDA alone; say whether it ran there, and if not, why."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    from onnx_parity.spec import PREDEFINED_TARGETS

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return False, "this onnxruntime build has no CUDAExecutionProvider"
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "probe",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    # IR version 8 is readable by every onnxruntime this supports; onnx's default may not be.
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    cuda = PREDEFINED_TARGETS["cuda"]
    try:
        _, facts = create_session(model.SerializeToString(), cuda)
    except RunError as exc:
        return False, str(exc)
    if facts.fell_back:
        return False, facts.reason or f"the session runs on {', '.join(facts.active)}"
    return True, ""
