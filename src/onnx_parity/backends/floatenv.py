"""The floating-point environment of the thread that makes and runs sessions: what
session.set_denormal_as_zero changes for good in ONNX Runtime, kept to the sessions that ask
for it, so that the PyTorch reference, the comparison and the other targets in the same worker
keep the process's own.

ONNX Runtime sets flush-to-zero and denormals-are-zero on the thread that makes the first session
of the process, if that session asks for it, and leaves it set; a later session that asks gets
it on its own pool threads only, not on that thread, which with one thread per worker does all
the work (measured with onnxruntime 1.31.1). So the first session made in a process is a tiny one
that asks for it: what it changes is learnt, undone, and put back around each run of a session
whose target asks for it, whatever the order of the targets.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
from collections.abc import Iterator
from typing import Any

from onnx_parity.literals import CPU
from onnx_parity.spec import TargetSpec

DENORMALS = "session.set_denormal_as_zero"
# fenv_t is 32 bytes on x86-64 glibc and 8 on aarch64; room to spare costs nothing.
_FENV_BYTES = 64


@functools.cache
def _libm() -> Any:
    # glibc's name first: find_library asks ldconfig, a process of its own.
    for name in ("libm.so.6", None):
        try:
            libm = ctypes.CDLL(name or ctypes.util.find_library("m") or "libm.so.6")
            libm.fegetenv, libm.fesetenv  # noqa: B018 - both must exist
        except (OSError, AttributeError):
            continue
        return libm
    return None


def _read() -> bytes | None:
    libm = _libm()
    if libm is None:
        return None
    buffer = ctypes.create_string_buffer(_FENV_BYTES)
    return buffer.raw if libm.fegetenv(buffer) == 0 else None


def _write(raw: bytes) -> None:
    libm = _libm()
    if libm is not None:
        libm.fesetenv(ctypes.create_string_buffer(raw, _FENV_BYTES))


def float_environment(ort: Any) -> bytes | None:
    """The calling thread's floating-point environment (rounding, flush-to-zero,
    denormals-are-zero), or None where libm cannot say; learns first what
    session.set_denormal_as_zero makes of it."""
    _denormals_as_zero(ort)
    return _read()


@functools.cache
def _denormals_as_zero(ort: Any) -> bytes | None:
    """The environment a session asking for session.set_denormal_as_zero leaves on the thread
    that makes it, learnt once per process from the first session, a one-node one; None where
    it leaves the environment as it was (no libm, or an ONNX Runtime that no longer does)."""
    before = _read()
    if before is None:
        return None
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.add_session_config_entry(DENORMALS, "1")
    ort.InferenceSession(IDENTITY_MODEL, options, providers=[CPU])
    after = _read()
    _write(before)
    return after if after != before else None


class FloatEnvironmentSession:
    """A session run in its own floating-point environment, the caller's restored after each
    run; everything but running is the session's own."""

    def __init__(self, session: Any, inside: bytes, outside: bytes) -> None:
        self._session, self._inside, self._outside = session, inside, outside

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    def run(self, *args: Any, **kwargs: Any) -> Any:
        with self._within():
            return self._session.run(*args, **kwargs)

    def run_with_ort_values(self, *args: Any, **kwargs: Any) -> Any:
        with self._within():
            return self._session.run_with_ort_values(*args, **kwargs)

    @contextlib.contextmanager
    def _within(self) -> Iterator[None]:
        _write(self._inside)
        try:
            yield
        finally:
            _write(self._outside)


def keep_float_environment(ort: Any, session: Any, before: bytes | None,
                           target: TargetSpec) -> Any:
    """`session`, made while the environment was `before`: run in the environment its target
    asks for, with `before` restored around it (the session unchanged where both are alike)."""
    made = _read()
    if before is None or made is None:
        return session
    if made != before:
        _write(before)  # whatever making the session changed stays with the session
    wanted = _denormals_as_zero(ort) if target.config_entries.get(DENORMALS) == "1" else None
    inside = wanted or made
    return session if inside == before else FloatEnvironmentSession(session, inside, before)


# A one-node ONNX model (Identity of a float tensor x to y, opset 17, IR version 8), serialized
# here so that learning the environment needs no onnx import (the worker's first check of a
# model uses it too, run/worker.py).
IDENTITY_MODEL = bytes.fromhex(
    "080812003a370a100a017812017922084964656e746974791201675a0f0a0178"
    "120a0a08080112040a020801620f0a0179120a0a08080112040a02080142040a"
    "001011")
