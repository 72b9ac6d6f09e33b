"""The kinds of target, behind one protocol (`TargetKind`), and the one factory that picks a
target's kind (`target_kind`): what each kind owns of its target's sessions, its runtime's facts,
its runs for localization and its entry in a repro bundle. The later stages call the protocol
and never ask which kind a target is.

    InProcess         ONNX Runtime in this process (target.py's OrtTarget), whatever its
                      providers: CPU, CUDA, and TensorRT, whose caches, libraries and precision
                      are its provider's (options.py, session.py, precision.py), not a kind's
    OtherInterpreter  a `python:` target: another interpreter's own ONNX Runtime build
                      (remote.py's RemoteTarget, talking to runner.py over pipes)
    REFERENCE         the reference target: where localization takes a graph's intermediate
                      tensors from when the case's own target ran elsewhere
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from onnx_parity.backends.remote import RUNTIMES, RemoteTarget, RunnerProcess, run_serialized
from onnx_parity.backends.session import create_session
from onnx_parity.backends.target import OrtTarget
from onnx_parity.frozen import frozen
from onnx_parity.literals import CPU
from onnx_parity.spec import TargetSpec

if TYPE_CHECKING:
    from onnx_parity.backends.precision import RuntimePrecision

Array = np.ndarray[Any, Any]

# ONNX Runtime's CPU provider in this process: the kernels every other provider's are checked
# against, so a graph's intermediate tensors on it stand for the reference's.
REFERENCE = TargetSpec(name="reference", providers=(CPU,))


class TargetKind(Protocol):
    """What a kind of target does with its TargetSpec."""

    @property
    def spec(self) -> TargetSpec:
        """The target as the spec gives it."""

    def open(self, path: Path, threads: int | None = None, profile: bool | None = None,
             work_dir: Path | None = None) -> OrtTarget:
        """The session of the model file `path` on this target."""

    def runtime(self) -> str:
        """Which ONNX Runtime runs this target's sessions, in words: `onnxruntime 1.31.1`."""

    def run_graph(self, data: bytes, folder: Path, feeds: Mapping[str, Array],
                  threads: int | None = None) -> tuple[dict[str, Array], tuple[str, ...]]:
        """One run of a serialized model (its external weights in `folder`) in a session built
        as the case's own was: every output by name (a localization marks every intermediate
        tensor an output), and the providers that ran it."""

    def precision_note(self, found: RuntimePrecision) -> str | None:
        """What a case on this target says of the precision its runtime computes in, by the
        runtime's own settings (backends/precision.py); None where it goes without saying."""

    def bundle_entry(self) -> dict[str, Any]:
        """The target as a repro bundle's spec writes it: the sessions the case ran in, made
        again by `onnx-parity run` on the bundle alone."""


@frozen
class InProcess:
    """ONNX Runtime in this process: the sessions of the one builder (session.py)."""

    spec: TargetSpec

    def open(self, path: Path, threads: int | None = None, profile: bool | None = None,
             work_dir: Path | None = None) -> OrtTarget:
        return OrtTarget(path, self.spec, threads, profile=profile, work_dir=work_dir)

    def runtime(self) -> str:
        import onnxruntime as ort

        return f"onnxruntime {ort.__version__}"

    def run_graph(self, data: bytes, folder: Path, feeds: Mapping[str, Array],
                  threads: int | None = None) -> tuple[dict[str, Array], tuple[str, ...]]:
        session, facts = create_session(data, self.spec, threads=threads, external_data=folder)
        names = [o.name for o in session.get_outputs()]
        values = session.run(None, dict(feeds))
        return dict(zip(names, values, strict=True)), facts.active

    def precision_note(self, found: RuntimePrecision) -> str | None:
        # TensorRT's float32, in this process, goes without saying.
        return found.text if found.reduced or found.precision is None else None

    def bundle_entry(self) -> dict[str, Any]:
        return _session_entry(self.spec)


@frozen
class OtherInterpreter:
    """A `python:` target: its sessions made and run in its own interpreter, by the runner."""

    spec: TargetSpec
    python: Path

    def open(self, path: Path, threads: int | None = None, profile: bool | None = None,
             work_dir: Path | None = None) -> OrtTarget:
        return RemoteTarget(path, self.spec, threads, profile=profile, work_dir=work_dir)

    def runtime(self) -> str:
        if self.python in RUNTIMES:  # a session made there said it
            return RUNTIMES[self.python]
        runner = RunnerProcess(self.python, self.spec.name)
        try:
            runtime = runner.runtime
        finally:
            runner.close()
        return f"{runtime.package} {runtime.version}"

    def run_graph(self, data: bytes, folder: Path, feeds: Mapping[str, Array],
                  threads: int | None = None) -> tuple[dict[str, Array], tuple[str, ...]]:
        return run_serialized(data, folder, self.spec, feeds, threads)

    def precision_note(self, found: RuntimePrecision) -> str | None:
        # Another build's precision is said even at float32: the runtime is what is checked.
        return found.text

    def bundle_entry(self) -> dict[str, Any]:
        # The same runtime build, in its own interpreter.
        return {**_session_entry(self.spec), "python": str(self.python)}


def target_kind(spec: TargetSpec) -> TargetKind:
    """The kind of target `spec` is: the one place that asks."""
    if spec.python is not None:
        return OtherInterpreter(spec, spec.python)
    return InProcess(spec)


def make_target(path: Path, target: TargetSpec, threads: int | None = None,
                profile: bool | None = None, work_dir: Path | None = None) -> OrtTarget:
    """The session of `path` on `target`, made by its kind."""
    return target_kind(target).open(path, threads, profile=profile, work_dir=work_dir)


def runs_as_reference(active: Sequence[str]) -> bool:
    """Whether a session that ran on `active` ran on the reference target's provider."""
    return bool(active) and active[0] == REFERENCE.providers[0]


def _session_entry(target: TargetSpec) -> dict[str, Any]:
    entry: dict[str, Any] = {"providers": list(target.providers), "fallback": target.fallback}
    if target.provider_options:
        entry["provider_options"] = {p: dict(o) for p, o in target.provider_options.items()}
    session = {**target.session_options, **({"config_entries": dict(target.config_entries)}
                                            if target.config_entries else {})}
    if session:  # the sessions the case ran in, as its target made them
        entry["session_options"] = session
    if target.custom_op_libraries:
        entry["custom_op_libraries"] = [str(p) for p in target.custom_op_libraries]
    if target.disable_cpu_ep_fallback:
        entry["disable_cpu_ep_fallback"] = True
    return entry
