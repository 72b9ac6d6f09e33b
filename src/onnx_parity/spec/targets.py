"""The checks of the spec's targets: providers and their options, the fall-back keys, the session
options, config entries and custom op libraries its sessions are made with."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from onnx_parity.literals import CPU, CUDA, PROVIDERS
from onnx_parity.spec.confine import is_path_key
from onnx_parity.spec.entries import Checker
from onnx_parity.spec.model import (
    DEFAULT_FALLBACK,
    FALLBACKS,
    RESERVED_CONFIG_ENTRIES,
    TENSORRT_FIRST,
    TargetSpec,
    session_option_problem,
)
from onnx_parity.spec.values import choice, items, mapping, strings
from onnx_parity.spec.violations import describe_path, did_you_mean, quoted
from onnx_parity.spec.yamlnodes import NodePath

# What a `python:` target's interpreter runs, by path, to say whether it holds onnxruntime.
HAS_ONNXRUNTIME = Path(__file__).with_name("has_onnxruntime.py")

# ONNX Runtime's limits on a session config entry (onnxruntime_session_options_config_keys.h).
CONFIG_KEY_LENGTH, CONFIG_VALUE_LENGTH = 128, 1024


def target_of(checks: Checker, name: str, entry: dict[str, Any]) -> TargetSpec:
    base = ("targets", name)
    place = checks.place(base)
    providers = strings(entry.get("providers"))
    for index, provider in enumerate(items(entry.get("providers"))):
        if isinstance(provider, str) and provider and provider not in PROVIDERS:
            # Provider names share a long suffix, so only a near miss is a typo.
            hint = did_you_mean(provider, PROVIDERS, cutoff=0.9)
            if hint:
                message = f"{place}: unknown execution provider {quoted(provider)}{hint}"
                checks.report((*base, "providers", index), message)
    options: dict[str, Mapping[str, Any]] = {}
    for provider, values in mapping(entry.get("provider_options")).items():
        if provider not in providers:
            listed = ", ".join(providers) or "none"
            hint = did_you_mean(provider, providers, cutoff=0.9)
            checks.report((*base, "provider_options", provider),
                        f"{place}: provider_options for {quoted(provider)}, which is not "
                        f"among its providers ({listed}){hint}", at_key=True)
        if isinstance(values, dict):
            options[provider] = _provider_paths(checks, (*base, "provider_options", provider),
                                                     values)
    _check_fallback_keys(checks, base, entry, providers)
    session = mapping(entry.get("session_options"))
    libraries = tuple(
        checks.existing((*base, "custom_op_libraries", index), raw, folder=False,
                       what=f"{place}: custom op library")
        for index, raw in enumerate(items(entry.get("custom_op_libraries")))
        if isinstance(raw, str) and raw)
    return TargetSpec(
        name=name,
        providers=providers,
        provider_options=options,
        fallback=choice(entry.get("fallback"), FALLBACKS, DEFAULT_FALLBACK),
        line=checks.doc.key_mark(base).line,
        allow_cpu_ops=strings(entry.get("allow_cpu_ops")),
        allow_cuda_ops=strings(entry.get("allow_cuda_ops")),
        disable_cpu_ep_fallback=entry.get("disable_cpu_ep_fallback") is True,
        tolerance=checks.layer(mapping(entry.get("tolerance"))),
        session_options={key: value for key, value in session.items()
                         if key != "config_entries" and not session_option_problem(key, value)},
        config_entries=_config_entries(checks, (*base, "session_options", "config_entries"),
                                            mapping(session.get("config_entries"))),
        custom_op_libraries=libraries,
        python=interpreter(checks, (*base, "python"), entry.get("python")),
    )


def interpreter(checks: Checker, path: NodePath, raw: Any) -> Path | None:
    """A target's `python:`: an executable file, inside the repository like every path in a
    spec (its own path, not where its symlinks lead: a virtual environment's python links to
    the interpreter it was made from), that can import onnxruntime. Found without importing it,
    so that loading a spec stays fast; a broken build is the case's error when it runs."""
    if not isinstance(raw, str) or not raw:
        return None
    what = f"{checks.place(path[:2])}: python"
    found = Path(os.path.normpath(checks.path.parent / raw))
    problem = checks.confined.problem(what, found)
    if problem is not None:
        checks.report(path, problem)
        return found
    if not found.is_file() or not os.access(found, os.X_OK):
        kind = "is not an executable file" if found.exists() else "does not exist"
        checks.report(path, f"{what} {found} {kind}: name the interpreter of the environment "
                      "that holds the target's onnxruntime (e.g. .venv-ov/bin/python)")
        return found
    try:
        done = subprocess.run([str(found), "-I", str(HAS_ONNXRUNTIME)], capture_output=True,
                              timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        checks.report(path, f"{what} {found} could not be run: {exc}")
        return found
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        why = f" ({said[-1]})" if said and done.returncode != 1 else ""
        checks.report(path, f"{what} {found} has no onnxruntime{why}: install the target's "
                      "onnxruntime build and numpy there (pip install onnxruntime-openvino "
                      "numpy, say)")
    return found


def _provider_paths(checks: Checker, path: NodePath, values: dict[str, Any]) -> dict[str, Any]:
    """A provider's options, with every path among them (an option named so: TensorRT's
    cache folders and plugin libraries, OpenVINO's cache_dir) resolved against the spec's
    folder, as every path in a spec is (ONNX Runtime would take them from the working
    directory), and kept inside the repository."""
    return {key: _option_path(checks, (*path, key), key, value)
            if is_path_key(key) and isinstance(value, str) and value else value
            for key, value in values.items()}


def _option_path(checks: Checker, path: NodePath, key: str, value: str) -> str:
    """A path option's value resolved, each of its paths where it takes several (`;`)."""
    parts = value.split(";") if key.lower().endswith("paths") else [value]
    where = describe_path(path, checks.raw)
    return ";".join(str(checks.inside(path, part, where)[0]) for part in parts if part)


def _config_entries(checks: Checker, path: NodePath, entries: dict[str, Any]) -> dict[str, str]:
    """Session config entries as ONNX Runtime takes them: text, booleans as 1 and 0."""
    place = describe_path(path, checks.raw)
    found: dict[str, str] = {}
    for key, value in entries.items():
        if key in RESERVED_CONFIG_ENTRIES:
            checks.report((*path, key), f"{place}: {quoted(key)} is not a target's to set: "
                        f"{RESERVED_CONFIG_ENTRIES[key]}", at_key=True)
            continue
        text = ("1" if value else "0") if isinstance(value, bool) else (
            str(value) if isinstance(value, str | int | float) else None)
        if text is None:
            continue  # the schema pass reported it
        if not key or len(key) > CONFIG_KEY_LENGTH:
            checks.report((*path, key), f"{place}: a config entry's key must be 1 to "
                        f"{CONFIG_KEY_LENGTH} characters long", at_key=True)
        elif len(text) > CONFIG_VALUE_LENGTH:
            checks.report((*path, key), f"{place}.{key}: a config entry's value must be at "
                        f"most {CONFIG_VALUE_LENGTH} characters long")
        else:
            found[key] = _option_path(checks, (*path, key), key, text) \
                if is_path_key(key) and text else text
    return found


def _check_fallback_keys(checks: Checker, base: NodePath, entry: dict[str, Any],
                         providers: tuple[str, ...]) -> None:
    """Both keys are about nodes leaving a first provider that is not the CPU."""
    place = checks.place(base)
    cpu_first = bool(providers) and providers[0] == CPU
    if "allow_cpu_ops" in entry and cpu_first:
        checks.report((*base, "allow_cpu_ops"), f"{place}: 'allow_cpu_ops' applies only to "
                    "targets whose first provider is not CPUExecutionProvider; on this "
                    "target every node runs on the CPU anyway", at_key=True)
    if "allow_cuda_ops" in entry and not (
            providers[:1] and providers[0] in TENSORRT_FIRST
            and CUDA in providers[1:]):
        checks.report((*base, "allow_cuda_ops"), f"{place}: 'allow_cuda_ops' applies only to "
                    "targets whose first provider is TensorrtExecutionProvider (or "
                    "NvTensorRTRTXExecutionProvider) with CUDAExecutionProvider after it, "
                    "where CUDA runs the nodes TensorRT does not take", at_key=True)
    if entry.get("disable_cpu_ep_fallback") is True and CPU in providers:
        checks.report((*base, "disable_cpu_ep_fallback"), f"{place}: "
                    "disable_cpu_ep_fallback: true needs a providers list without "
                    "CPUExecutionProvider (ONNX Runtime refuses a session that lists the CPU "
                    "provider and disables falling back to it); remove CPUExecutionProvider "
                    "from its providers", at_key=True)
