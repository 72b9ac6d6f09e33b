"""A target's session settings as ONNX Runtime takes them: its session options and config
entries on an onnxruntime.SessionOptions, its custom op libraries registered, TensorRT's caches
kept in the run's work folder, and what a made session says is in effect."""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from onnx_parity.errors import RunError
from onnx_parity.literals import TENSORRT
from onnx_parity.spec import TargetSpec

logger = logging.getLogger(__name__)

# The spec's words for ONNX Runtime's enums, by attribute: word -> the enum member's name.
_ENUMS: dict[str, tuple[str, dict[str, str]]] = {
    "graph_optimization_level": ("GraphOptimizationLevel", {
        "disable_all": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC",
        "extended": "ORT_ENABLE_EXTENDED", "layout": "ORT_ENABLE_LAYOUT", "all": "ORT_ENABLE_ALL"}),
    "execution_mode": ("ExecutionMode", {"sequential": "ORT_SEQUENTIAL",
                                         "parallel": "ORT_PARALLEL"}),
    "execution_order": ("ExecutionOrder", {"default": "DEFAULT", "priority_based": "PRIORITY_BASED",
                                           "memory_efficient": "MEMORY_EFFICIENT"}),
}
# TensorRT's cache switches and the folder each writes to; unset, ONNX Runtime writes to the
# working directory, which is the user's checkout.
_TENSORRT_CACHES = {"trt_engine_cache_enable": "trt_engine_cache_path",
                    "trt_timing_cache_enable": "trt_timing_cache_path"}
TENSORRT_CACHE_FOLDER = "tensorrt-cache"


def make_session_options(ort: Any, target: TargetSpec, threads: int | None) -> tuple[Any, str]:
    """A SessionOptions with the target's settings, and what to say about them ('' or a note).
    The worker's thread count applies unless the target sets intra_op_num_threads: then the
    target's own wins, as a deployment's would."""
    options = ort.SessionOptions()
    options.log_severity_level = 2  # warnings too, while creating: they are captured
    note = ""
    own_threads = target.session_options.get("intra_op_num_threads")
    if own_threads is not None and threads and own_threads != threads:
        note = (f"target '{target.name}' sets intra_op_num_threads: {own_threads}, which wins "
                f"over onnx-parity's {threads} per worker: its numbers may depend on the "
                "thread count, and its sessions share the cores with the other workers")
    elif threads:
        options.intra_op_num_threads = threads
    for key, value in target.session_options.items():
        setattr(options, key, _ort_value(ort, key, value))
    for key, value in target.config_entries.items():
        options.add_session_config_entry(key, value)
    if target.disable_cpu_ep_fallback:
        options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    for library in target.custom_op_libraries:
        try:
            options.register_custom_ops_library(str(library))
        except Exception as exc:  # ONNX Runtime's Fail: the loader's own words follow
            raise RunError(f"target '{target.name}': custom op library {library} could not be "
                           f"loaded: {_status(exc)}") from exc
    return options, note


def _ort_value(ort: Any, key: str, value: Any) -> Any:
    if key not in _ENUMS:
        return value
    enum, members = _ENUMS[key]
    member = getattr(getattr(ort, enum), members[value], None)
    if member is None:  # ORT_ENABLE_LAYOUT is newer than some builds
        version = getattr(ort, "__version__", "?")
        raise RunError(f"{key}: {value} needs {enum}.{members[value]}, which onnxruntime "
                       f"{version} does not have; use another level")
    return member


def _status(exc: Exception) -> str:
    """ONNX Runtime's message without its '[ONNXRuntimeError] : 1 : FAIL : ' prefix."""
    text = str(exc)
    return text.split(" : ", 3)[-1] if text.startswith("[ONNXRuntimeError]") else text


def provider_list(target: TargetSpec, work_dir: Path | None) -> list[Any]:
    """The providers with their options, as InferenceSession takes them. A TensorRT cache that
    is on without a folder goes to the run's work folder (`work_dir`, kept with --work-dir), or
    to the temporary folder for a session made without one."""
    providers: list[Any] = []
    for provider in target.providers:
        if provider not in target.provider_options:
            providers.append(provider)
            continue
        options = dict(target.provider_options[provider])
        if provider == TENSORRT:
            folder = work_dir or Path(tempfile.gettempdir()) / f"onnx-parity-{_uid()}"
            for switch, path in _TENSORRT_CACHES.items():
                if _on(options.get(switch)) and not options.get(path):
                    options[path] = str(folder / TENSORRT_CACHE_FOLDER)
        providers.append((provider, options))
    return providers


def _uid() -> int:
    return int(getattr(os, "getuid", lambda: 0)())


def _on(value: Any) -> bool:
    return value is True or str(value).strip().lower() in ("1", "true")


def in_effect(session: Any, target: TargetSpec) -> dict[str, Any]:
    """The target's session settings as the made session reports them (nothing for a target
    that sets none): each session option it sets and the thread count, in the spec's words,
    each config entry, and the custom op libraries registered."""
    if not target.sets_session:
        return {}
    try:
        made = session.get_session_options()
    except Exception as exc:  # an unusual build: the facts simply lack them
        logger.debug("get_session_options() failed: %s", exc)
        return {}
    found: dict[str, Any] = {}
    for key in dict.fromkeys([*target.session_options, "intra_op_num_threads"]):
        value = getattr(made, key, None)
        if key in _ENUMS:
            by_member = {member: word for word, member in _ENUMS[key][1].items()}
            value = by_member.get(getattr(value, "name", ""), str(value))
        found[key] = value
    entries: dict[str, str] = {}
    for key in target.config_entries:
        try:
            entries[key] = str(made.get_session_config_entry(key))
        except Exception:  # not set after all: say so by leaving it out
            continue
    if entries:
        found["config_entries"] = entries
    if target.custom_op_libraries:
        found["custom_op_libraries"] = [str(p) for p in target.custom_op_libraries]
    return found

