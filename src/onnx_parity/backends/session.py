"""The one ONNX Runtime session builder: the case, its localization and any re-run use it, so
an explanation is always about the session that was judged. With the session come its facts:
the providers asked for and active, what ONNX Runtime logged, the provider options and session
options in effect.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import io
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import field
from pathlib import Path
from typing import Any

from onnx_parity.backends.floatenv import float_environment, keep_float_environment
from onnx_parity.backends.options import in_effect, make_session_options, provider_list
from onnx_parity.capture import native_output
from onnx_parity.errors import RunError
from onnx_parity.frozen import frozen
from onnx_parity.literals import CPU, CUDA, TENSORRT
from onnx_parity.machine.compat import (
    CUDA_PLUGIN_MODULE,
    GPU_PROVIDERS,
    tensorrt_libraries,
    tensorrt_major,
    version_tuple,
)
from onnx_parity.machine.libraries import default_pip_roots
from onnx_parity.spec import TargetSpec

logger = logging.getLogger(__name__)

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_ORT_LINE = re.compile(r"\[([EWF]):onnxruntime:[^\]]*\]\s*(.*)")
_ORT_STATUS = re.compile(r"^.*\[ONNXRuntimeError\] : \d+ : \w+ : ")
# A provider's own error, after its source location and function: `…/openvino_parser_utils.cc:101
# static std::string …::ParsePrecision(…) [ERROR] [OpenVINO] Unsupported inference precision`
_SOURCE_PREFIX = re.compile(r"^\S+\.(?:cc|cpp|h):\d+ .*?\[ERROR\]\s*")
_LIBRARY_PATH = re.compile(r"/\S*/(lib[\w.+-]+\.so[\w.]*)")
_ABOUT_PROVIDERS = re.compile(
    r"provider|librar|cuda|cudnn|tensorrt|nvinfer|assigned|fallback|precision", re.I)
# TensorRT's and cuBLAS's switch for TF32, read by the libraries in the process: TensorRT has no
# per-session one, so it is a fact of each GPU session (explain/causes.py records it).
TF32_OVERRIDE = "NVIDIA_TF32_OVERRIDE"


@frozen
class SessionFacts:
    """What ONNX Runtime really did with a target's request, and what it logged meanwhile."""

    requested: tuple[str, ...]
    active: tuple[str, ...]
    log: tuple[str, ...] = ()  # its warnings and errors while creating the session, tidied
    # The options each active provider reports it runs with (get_provider_options()): what is
    # in effect, defaults included, not what the spec asked for. Values are ONNX Runtime's text.
    options: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # The target's session options as the session reports them (options.in_effect): empty for
    # a target that sets none.
    session: Mapping[str, Any] = field(default_factory=dict)
    tf32_override: str | None = None  # NVIDIA_TF32_OVERRIDE, for a session on a GPU provider
    notes: tuple[str, ...] = ()  # what a reader of the case should know about its session
    # A `python:` target's runtime (backends/remote.py): its interpreter, onnxruntime's
    # distribution, version and build; empty for a session in this process.
    runtime: Mapping[str, str] = field(default_factory=dict)

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


def tidy_log(text: str) -> tuple[str, ...]:
    """ONNX Runtime's warning and error lines, without colours, timestamps, source locations and
    install paths: 'Failed to load library libonnxruntime_providers_cuda.so with error: ...'."""
    lines = []
    for raw in _ANSI.sub("", text).splitlines():
        match = _ORT_LINE.search(raw)
        if match is None:
            continue
        message = _ORT_STATUS.sub("", match.group(2))
        message = _LIBRARY_PATH.sub(r"\1", _SOURCE_PREFIX.sub("", message)).strip()
        message = message.split(" Please install all dependencies")[0].strip()
        if message:
            lines.append(message)
    return tuple(dict.fromkeys(lines))


def native_stderr() -> contextlib.AbstractContextManager[list[str]]:
    """What native code writes to fd 2 meanwhile (ONNX Runtime's own logger ignores the
    session's log settings), collected instead of shown."""
    return native_output((2,))


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


def create_session(model: str | bytes, target: TargetSpec, *, threads: int | None = None,
                   profile_to: str | None = None, external_data: Path | None = None,
                   work_dir: Path | None = None,
                   optimized_to: str | None = None) -> tuple[Any, SessionFacts]:
    """An InferenceSession for `target`, with what ONNX Runtime logged while making it.

    `model` is a path, or serialized bytes whose external weights lie in `external_data`;
    `work_dir` is the run's folder for a model's files (TensorRT's caches go there);
    `optimized_to` saves the graph ONNX Runtime made of it (optimized_ops).
    """
    import onnxruntime as ort

    _prepare_providers(ort, target.providers)
    options, note = make_session_options(ort, target, threads)
    if external_data is not None:
        options.add_session_config_entry(
            "session.model_external_initializers_file_folder_path", str(external_data))
    if profile_to:
        options.enable_profiling = True
        options.profile_file_prefix = profile_to
    if optimized_to:
        options.optimized_model_filepath = optimized_to
    before = float_environment(ort)
    with native_stderr() as captured:
        try:
            # enable_fallback=0: onnxruntime's Python layer otherwise retries a session whose
            # provider raised on plain CPU, printing one line to stdout: a silent fall-back.
            session = ort.InferenceSession(model, options,
                                           providers=provider_list(target, work_dir),
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
    session = keep_float_environment(ort, session, before, target)
    active = tuple(session.get_providers())
    gpu = any(p in GPU_PROVIDERS for p in active)
    return session, SessionFacts(tuple(target.providers), active, log,
                                 _options_in_effect(session), in_effect(session, target),
                                 os.environ.get(TF32_OVERRIDE) if gpu else None,
                                 (note,) if note else ())


def _prepare_providers(ort: Any, providers: tuple[str, ...]) -> None:
    """What a GPU provider needs in the process before a session asks for it: pip's CUDA and
    cuDNN wheels loaded, TensorRT's too, and the CUDA provider's plugin registered where
    onnxruntime has none of its own."""
    if not any(p in GPU_PROVIDERS for p in providers):
        return
    for line in preload_cuda_libraries():
        logger.debug("onnxruntime.preload_dlls(): %s", line)
    if TENSORRT in providers:
        for line in preload_tensorrt_libraries(getattr(ort, "__version__", "")):
            logger.debug("TensorRT libraries: %s", line)
    if CUDA in providers:
        said = register_cuda_plugin()
        if said:
            logger.debug("CUDA plugin: %s", said)


@functools.cache
def preload_tensorrt_libraries(ort_version: str) -> tuple[str, ...]:
    """Load TensorRT's libraries from pip's tensorrt-cuNN-libs wheel (site-packages/
    tensorrt_libs), once per process, for TensorRT's provider to find: the loader does not
    search there, and onnxruntime's preload_dlls() loads CUDA's and cuDNN's only. The preflight
    looks for them in the same place. Returns what was loaded, or why not."""
    release = version_tuple(ort_version)
    major = tensorrt_major((release[0], release[1]) if len(release) >= 2 else None)
    said = []
    for need in tensorrt_libraries(0, major):  # the CUDA major only names the wheel
        for root in default_pip_roots():
            path = root / need.folder / need.soname
            if not path.is_file():
                continue
            try:
                ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
            except OSError as exc:
                said.append(f"{path}: {exc}")
            else:
                said.append(f"loaded {path}")
            break
    return tuple(said)


@functools.cache
def register_cuda_plugin() -> str:
    """Register the CUDA provider's plugin (compat.CUDA_PLUGIN_PACKAGES) under its provider
    name, once per process, where onnxruntime has no CUDA provider of its own, as onnxruntime
    registers a plugin bundled in its own wheel. Not tried on a machine with the plugin: a
    session that then does not run on CUDA is a fall-back the gate reports."""
    import importlib

    import onnxruntime as ort

    if CUDA in ort.get_available_providers() or not hasattr(
            ort, "register_execution_provider_library"):
        return ""
    try:
        plugin = importlib.import_module(CUDA_PLUGIN_MODULE)
        ort.register_execution_provider_library(plugin.get_ep_name(), plugin.get_library_path())
    except ImportError:
        return ""
    except Exception as exc:  # the session says what it runs on; the gate judges it
        return f"registering {CUDA_PLUGIN_MODULE} failed: {type(exc).__name__}: {exc}"
    return f"registered {plugin.get_library_path()}"


def _options_in_effect(session: Any) -> dict[str, dict[str, str]]:
    """The active providers' options as ONNX Runtime reports them; the CPU provider's are
    left out (it reports none that change the numbers)."""
    try:
        reported = session.get_provider_options()
    except Exception as exc:  # an old or unusual build: the facts simply lack them
        logger.debug("get_provider_options() failed: %s", exc)
        return {}
    return {str(provider): {str(k): str(v) for k, v in sorted(values.items())}
            for provider, values in reported.items() if provider != CPU}


def optimized_ops(path: Path, target: TargetSpec, work_dir: Path,
                  threads: int | None = None) -> dict[str, int]:
    """How many nodes of each type the graph ONNX Runtime makes of `path` on `target` holds
    (its fused nodes among them: `com.microsoft.FusedMatMul`), from the optimized model it
    saves beside the run's files."""
    import onnx

    saved = work_dir / f"{path.stem}.{abs(hash(target.name)):x}.optimized.onnx"
    saved.parent.mkdir(parents=True, exist_ok=True)
    create_session(str(path), target, threads=threads, work_dir=work_dir,
                   optimized_to=str(saved))
    counted: dict[str, int] = {}
    for node in onnx.load(str(saved), load_external_data=False).graph.node:
        name = f"{node.domain}.{node.op_type}" if node.domain not in ("", "ai.onnx") else (
            node.op_type)
        counted[name] = counted.get(name, 0) + 1
    saved.unlink(missing_ok=True)
    return counted
