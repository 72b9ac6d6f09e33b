"""One model file on one target: its session, its runs, the node placement of its first run,
and the feed checks that name what does not fit; and the CUDA probe the preflight trusts."""

from __future__ import annotations

import contextlib
import glob
import json
import logging
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from onnx_parity.backends.placement import Placement, placement_from_profile
from onnx_parity.backends.session import create_session
from onnx_parity.errors import RunError
from onnx_parity.literals import CPU, CUDA
from onnx_parity.plan.shapes import dtype_name, numpy_dtype
from onnx_parity.spec import PREDEFINED_TARGETS, InputSpec, TargetSpec

logger = logging.getLogger(__name__)

_RENAMED = {"float": "float32", "double": "float64"}
_KINDS = {"seq": "a sequence", "map": "a map", "optional": "an optional"}


def element_type(onnx_type: str) -> str | None:
    """`tensor(float)` → float32, `tensor(string)` → string (inputs.numpy_dtype's names);
    None for a sequence, map or optional."""
    if not onnx_type.startswith("tensor(") or not onnx_type.endswith(")"):
        return None
    inner = onnx_type[len("tensor("):-1]
    return _RENAMED.get(inner, inner)


def _unsupported(name: str, onnx_type: str) -> RunError:
    kind = _KINDS.get(onnx_type.split("(", 1)[0], "not a tensor")
    return RunError(f"input '{name}' is {kind} ({onnx_type}): onnx-parity feeds tensors only; "
                    "sequence, map and optional inputs are not supported")


class OrtTarget:
    """One InferenceSession for one model file on one target.

    A target whose first provider is not the CPU is profiled for its first run, so that
    `placement()` can tell which provider ran each node; later runs are not profiled.
    `profile` True profiles any target's first run (what ran in float16 on the CPU).
    """

    def __init__(self, path: Path, target: TargetSpec, threads: int | None = None,
                 profile: bool | None = None, work_dir: Path | None = None) -> None:
        import onnxruntime as ort

        prefix = None
        if profile or (profile is None and target.providers and target.providers[0] != CPU):
            # ONNX Runtime writes <prefix>_<time>.json when profiling ends, and only then.
            prefix = os.path.join(tempfile.gettempdir(),
                                  f"onnx-parity-profile-{os.getpid()}-{id(self)}")
        self._profile: str | None = prefix
        self._placement: Placement | None = None
        self._declared: dict[str, Any] | None = None
        self._input_specs: tuple[InputSpec, ...] | None = None
        self._checked: dict[tuple[tuple[str, Any], ...], _Sizes] = {}  # feeds checked before
        try:
            self.session, self.facts = create_session(str(path), target, threads=threads,
                                                      profile_to=prefix, work_dir=work_dir)
        except RunError:
            for written in glob.glob(f"{prefix}_*.json") if prefix else ():
                os.remove(written)  # a session that failed to start still wrote its profile
            raise
        self._run_options = ort.RunOptions()
        # Runs log errors only: a session's warnings were said, and captured, at its creation.
        self._run_options.log_severity_level = 3
        # ONNX Runtime's Python layer cannot turn these outputs into numpy arrays itself.
        self._raw_outputs = any(element_type(o.type) in _RAW for o in self.session.get_outputs())

    def placement(self, feeds: Mapping[str, np.ndarray]) -> Placement | None:
        """Where the nodes ran, from the first run (made now on `feeds` if none was made yet);
        None for a target that was not profiled."""
        if self._profile is not None:
            self.run(feeds)
        return self._placement

    def input_specs(self) -> tuple[InputSpec, ...]:
        """The model's declared inputs, for models given as ONNX files without `inputs`: read
        once, a session's inputs do not change."""
        if self._input_specs is None:
            self._input_specs = self._read_input_specs()
        return self._input_specs

    def _read_input_specs(self) -> tuple[InputSpec, ...]:
        specs = []
        for arg in self.session.get_inputs():
            dtype = element_type(arg.type)
            if dtype is None:
                raise _unsupported(arg.name, arg.type)
            shape = _declared_shape(arg.shape)
            specs.append(InputSpec(name=arg.name, shape=shape, dtype=dtype))
        return tuple(specs)

    def output_names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.session.get_outputs())

    def output_types(self) -> tuple[str, ...]:
        """The outputs' declared types: tensor(float), seq(tensor(float)), map(...), ..."""
        return tuple(o.type for o in self.session.get_outputs())

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        self._check_feeds(feeds)
        try:
            if self._raw_outputs or any(dtype_name(a.dtype) in _RAW for a in feeds.values()):
                return self._run_raw(feeds)
            return list(self.session.run(None, dict(feeds), self._run_options))
        except RunError:
            raise
        except Exception as exc:
            raise RunError(f"ONNX Runtime run failed: {type(exc).__name__}: {exc}"
                           f"{_cudnn_hint(exc, self.facts.active)}") from exc
        finally:
            if self._profile is not None:
                self._placement = self._end_profiling()

    def call(self, feeds: Mapping[str, np.ndarray]) -> Callable[[], Any]:
        """One run on `feeds` as its latency is timed (backends/timing.py): the feeds are
        checked once, here, rather than on every timed call."""
        self._check_feeds(feeds)
        if self._raw_outputs or any(dtype_name(a.dtype) in _RAW for a in feeds.values()):
            return lambda: self._run_raw(feeds)
        plain = dict(feeds)
        return lambda: self.session.run(None, plain, self._run_options)

    def _run_raw(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """A run through OrtValues, for bfloat16 and float8 (ml_dtypes) tensors, which
        ONNX Runtime's numpy conversion does not know: their bytes are passed as they are."""
        import onnxruntime as ort
        from onnx import helper

        values: dict[str, Any] = {}
        for name, array in feeds.items():
            kind = dtype_name(array.dtype)
            if kind in _RAW:
                raw = np.ascontiguousarray(array).view(f"u{array.dtype.itemsize}")
                values[name] = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
                    raw, onnx_element_type=helper.np_dtype_to_tensor_dtype(array.dtype))
            else:
                values[name] = array
        if not self._raw_outputs:  # numpy arrays and OrtValues mix in a plain run's feeds
            return list(self.session.run(None, values, self._run_options))
        if any(dtype_name(a.dtype) == "string" for a in feeds.values()):
            raise RunError("a model with string inputs and bfloat16 or float8 outputs cannot be "
                           "run through ONNX Runtime's Python API (strings cannot be OrtValues)")
        values = {name: value if isinstance(value, ort.OrtValue) else
                  ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(value))
                  for name, value in values.items()}
        outputs = self.session.run_with_ort_values(None, values, self._run_options)
        return [_from_ort_value(value) for value in outputs]

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
        """Fail with names and numbers before ORT's own, vaguer, complaint. Names and dtypes
        once checked are not checked again (a rollout's every step feeds the same ones), only
        each input's rank and fixed sizes."""
        key = tuple((name, array.dtype) for name, array in feeds.items())
        sizes = self._checked.get(key)
        if sizes is not None and all(
                feeds[name].ndim == rank and all(feeds[name].shape[a] == d for a, d in fixed)
                for name, rank, fixed in sizes):
            return
        self._check_all(feeds)
        declared = self._declared or {}
        self._checked[key] = [(name, len(arg.shape), [(axis, dim)
                                                      for axis, dim in enumerate(arg.shape)
                                                      if isinstance(dim, int)])
                              for name, arg in declared.items()]

    def _check_all(self, feeds: Mapping[str, np.ndarray]) -> None:
        declared = self._declared
        if declared is None:  # read once: the session's inputs are new Python objects each time
            declared = self._declared = {a.name: a for a in self.session.get_inputs()}
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
            want = element_type(arg.type)
            if want is None:
                raise _unsupported(name, arg.type)
            if want in _PACKED:
                raise RunError(f"input '{name}' is {want}: ONNX Runtime's Python API takes no "
                               "packed 4-bit or 2-bit tensors (numpy holds one value per byte)")
            have = dtype_name(array.dtype)
            if want != have:
                raise RunError(f"input '{name}': model declares {want}, data has {have}")
            if len(arg.shape) != array.ndim:
                raise RunError(f"input '{name}': model expects rank {len(arg.shape)} "
                               f"{_show(arg.shape)}, data has shape {tuple(array.shape)}")
            for axis, (dim, size) in enumerate(zip(arg.shape, array.shape, strict=True)):
                if isinstance(dim, int) and dim != size:
                    expects = f"batch {dim}" if axis == 0 else f"size {dim} on axis {axis}"
                    raise RunError(f"model expects {expects} on input '{name}', data has {size}")


# Each input's name, rank and fixed sizes (axis, size), as the model declares them.
_Sizes = list[tuple[str, int, list[tuple[int, int]]]]
# Element types passed to and from ONNX Runtime as raw bytes; the packed 4-bit and 2-bit types
# are left out (ONNX Runtime packs two or four to a byte, numpy one).
_RAW = frozenset({"bfloat16", "float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz"})
_PACKED = frozenset({"int4", "uint4", "int2", "uint2", "float4e2m1"})


def _from_ort_value(value: Any) -> np.ndarray:
    import ctypes

    kind = element_type(value.data_type())
    if kind not in _RAW:
        return np.asarray(value.numpy())
    dtype = numpy_dtype(kind)
    shape = tuple(value.shape())
    size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if not size:
        return np.zeros(shape, dtype)
    buffer = (ctypes.c_uint8 * size).from_address(value.data_ptr())
    return np.frombuffer(memoryview(buffer), dtype=dtype).reshape(shape).copy()


def _cudnn_hint(exc: Exception, active: Sequence[str]) -> str:
    """From onnxruntime-gpu 1.28 the CUDA provider starts without cuDNN and fails only the
    kernels that need it, convolutions most of all: say what to install."""
    if CUDA not in active or "cudnn" not in str(exc).lower():
        return ""
    import onnxruntime as ort

    cuda = str(getattr(ort, "cuda_version", "") or "").split(".")[0]
    wheel = f"nvidia-cudnn-cu{cuda}" if cuda.isdigit() else "the nvidia-cudnn wheel for its CUDA"
    return (f" (the CUDA provider runs without cuDNN, but this model's ops need it: pip install "
            f"{wheel}; `onnx-parity doctor` checks it)")


def _declared_shape(shape: Sequence[Any]) -> tuple[int | str, ...]:
    """An ONNX input's shape as a spec would write it. A dim the model names `batch` is the
    batch wherever it stands (an RNN state's axis 1); without one, axis 0 is, as in recorded
    data, and is named even where the model fixes it, so that a static batch fails loudly on
    other batch sizes instead of being fed the size it happens to declare. Only a dim the model
    itself calls `batch` is held to one size with other inputs' (prepare/inputs.py)."""
    batch_first = "batch" not in shape
    named: list[int | str] = []
    for axis, dim in enumerate(shape):
        kept = dim if isinstance(dim, str) else not (axis == 0 and batch_first)
        named.append(dim if kept and isinstance(dim, int | str) else f"dim{axis}")
    return tuple(named)


def _show(shape: Sequence[Any]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def probe_cuda() -> tuple[bool, str]:
    """Create a one-node session on CUDA alone; say whether it ran there, and if not, why."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    if CUDA not in ort.get_available_providers():
        return False, f"this onnxruntime build has no {CUDA}"
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
