"""One model file on a `python:` target: its session made and run in that interpreter by the
runner (runner.py, run by path over pipes, `RunnerProcess` on this side), with the same face as
OrtTarget, and the runtime that interpreter holds (its onnxruntime version and build) among the
session's facts."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from onnx_parity.backends.options import _ENUMS, provider_list
from onnx_parity.backends.placement import (
    Placement,
    placement_from_profile,
    with_assignment,
)
from onnx_parity.backends.session import SessionFacts, tidy_log
from onnx_parity.backends.target import (
    _RAW,
    OrtTarget,
    _declared_shape,
    _unsupported,
    element_type,
)
from onnx_parity.errors import RunError
from onnx_parity.frozen import frozen
from onnx_parity.literals import CPU
from onnx_parity.plan.shapes import dtype_name
from onnx_parity.spec import InputSpec, TargetSpec

logger = logging.getLogger(__name__)

RUNNER = Path(__file__).with_name("runner.py")
# Each interpreter's runtime in words (`onnxruntime-openvino 1.24.1`), as its runners said: a
# localization names both sides' runtimes without starting one more.
RUNTIMES: dict[Path, str] = {}


@frozen
class Runtime:
    """The ONNX Runtime an interpreter holds, as its runner said at start."""

    python: str  # the interpreter's path, as the spec names it
    version: str
    package: str = "onnxruntime"  # the distribution: onnxruntime-openvino, onnxruntime-gpu, ...
    build: str = ""
    python_version: str = ""
    available: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        build = f", {self.build}" if self.build else ""
        return f"{self.package} {self.version}{build} in {self.python}"

    def as_record(self) -> dict[str, str]:
        return {"python": self.python, "onnxruntime": self.version, "package": self.package,
                "build": self.build,
                "python_version": self.python_version}


class RunnerProcess:
    """The runner (runner.py) in its own process in another interpreter, and the messages to
    and from it."""

    def __init__(self, python: Path, target_name: str) -> None:
        self._name = target_name
        # The runner's stderr, for the last words of one that died; closed with the runner.
        self._stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115
        try:
            self._process = subprocess.Popen(
                [str(python), "-I", str(RUNNER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=self._stderr)
        except OSError as exc:
            raise RunError(f"target '{target_name}': its python: {python} cannot be run: "
                           f"{exc.strerror or exc}") from exc
        hello, _ = self.receive()
        if "error" in hello:
            self.close()
            raise RunError(f"target '{target_name}': its python: {python} has no usable "
                           f"onnxruntime ({hello['error']}); install onnxruntime (or the build "
                           "the target needs) and numpy there")
        self.runtime = Runtime(str(python), str(hello.get("onnxruntime", "?")),
                               str(hello.get("package", "onnxruntime")),
                               _build(str(hello.get("build", "")), str(hello.get("device", ""))),
                               str(hello.get("python", "")), tuple(hello.get("available", ())))
        RUNTIMES[python] = f"{self.runtime.package} {self.runtime.version}"

    def ask(self, header: dict[str, Any], arrays: Sequence[np.ndarray] = (),
            names: Sequence[str] = ()) -> tuple[dict[str, Any], list[np.ndarray]]:
        payload = b""
        if arrays:
            buffer = io.BytesIO()
            named: dict[str, Any] = {f"a{k}": np.asarray(a) for k, a in enumerate(arrays)}
            np.savez(buffer, **named)
            payload = buffer.getvalue()
        message = {**header, "size": len(payload), "names": list(names)}
        try:
            assert self._process.stdin is not None
            self._process.stdin.write(json.dumps(message).encode() + b"\n" + payload)
            self._process.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise RunError(self._ended(f"the runner stopped taking requests ({exc})")) from exc
        return self.receive()

    def receive(self) -> tuple[dict[str, Any], list[np.ndarray]]:
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            raise RunError(self._ended("the runner ended without an answer"))
        header = json.loads(line)
        size = int(header.get("size", 0))
        arrays: list[np.ndarray] = []
        if size:
            payload = self._process.stdout.read(size)
            with np.load(io.BytesIO(payload), allow_pickle=False) as archive:
                arrays = [archive[f"a{k}"] for k in range(len(header.get("names", ())))]
        return header, arrays

    def _ended(self, what: str) -> str:
        code = self._process.poll()
        self._stderr.seek(0)
        tail = self._stderr.read()[-2000:].decode("utf-8", "replace").strip()
        status = f" (exit status {code})" if code is not None else ""
        return (f"target '{self._name}': {what}{status}" + (f": {tail.splitlines()[-1]}"
                                                           if tail else ""))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self._process.poll() is None:
                assert self._process.stdin is not None
                self._process.stdin.close()
                self._process.wait(timeout=5)
        with contextlib.suppress(Exception):
            self._process.kill()
        self._stderr.close()


def open_request(model: str, target: TargetSpec, threads: int | None,
                 profile: bool) -> dict[str, Any]:
    """The runner's `open`: the target's session settings in plain values (enums by name)."""
    options: dict[str, Any] = {}
    for key, value in target.session_options.items():
        if key in _ENUMS:
            enum, members = _ENUMS[key]
            options[key] = {"enum": enum, "member": members[value]}
        else:
            options[key] = value
    if "intra_op_num_threads" in target.session_options:
        threads = None
    config = dict(target.config_entries)
    if target.disable_cpu_ep_fallback:
        config["session.disable_cpu_ep_fallback"] = "1"
    providers = [p if isinstance(p, str) else [p[0], {k: _option_text(v) for k, v in
                                                     p[1].items()}]
                 for p in provider_list(target, None)]
    return {"op": "open", "model": model, "providers": providers, "options": options,
            "config": config, "libraries": [str(p) for p in target.custom_op_libraries],
            "threads": threads, "profile": profile}


@frozen
class _Input:
    name: str
    type: str
    shape: list[Any]


class _Declared:
    """The runner's session's declared inputs, as InferenceSession.get_inputs() gives them."""

    def __init__(self, inputs: Sequence[tuple[str, str, list[Any]]]) -> None:
        self._inputs = [_Input(n, t, s) for n, t, s in inputs]

    def get_inputs(self) -> list[_Input]:
        return self._inputs


def _option_text(value: Any) -> str:
    """A provider option as ONNX Runtime takes it: text; a mapping (OpenVINO's load_config)
    as JSON, booleans as 1 and 0."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return json.dumps(value) if isinstance(value, dict | list) else str(value)


class RemoteTarget(OrtTarget):
    """One session of `path` on a `python:` target, in a runner of its own: OrtTarget's face,
    every method of it that touches a session its own."""

    def __init__(self, path: Path, target: TargetSpec, threads: int | None = None,
                 profile: bool | None = None, work_dir: Path | None = None) -> None:
        # OrtTarget's own __init__ would make a session in this process: not called.
        assert target.python is not None
        self._profile = None
        self._runner = RunnerProcess(target.python, target.name)
        self.runtime = self._runner.runtime
        profiled = bool(profile or (profile is None and target.providers
                                    and target.providers[0] != CPU))
        said, _ = self._runner.ask(open_request(str(path), target, threads, profiled))
        log = tidy_log(str(said.get("log", "")))
        if "error" in said:
            self._runner.close()
            logged = f" (ONNX Runtime logged: {'; '.join(log)})" if log else ""
            raise RunError(f"ONNX Runtime could not create a session for target "
                           f"'{target.name}' ({self.runtime.text}): {said['error']}{logged}")
        self._inputs = [(str(n), str(t), list(s)) for n, t, s in said["inputs"]]
        self.session = _Declared(self._inputs)  # what OrtTarget's feed checks read
        self._declared = None  # OrtTarget's feed checks read the inputs from it once
        self._checked = {}  # and the feeds they checked before
        self._outputs = [(str(n), str(t)) for n, t in said["outputs"]]
        self._profiled = profiled
        self._assigned = said.get("assigned")
        self._placement: Placement | None = None
        options = {p: o for p, o in said.get("provider_options", {}).items() if p != CPU}
        self.facts = SessionFacts(tuple(target.providers), tuple(said["active"]), log, options,
                                  said.get("session", {}) if target.sets_session else {},
                                  runtime=self.runtime.as_record())

    def placement(self, feeds: Mapping[str, np.ndarray]) -> Placement | None:
        if self._profiled and self._placement is None:
            self.run(feeds)
        return self._placement

    def input_specs(self) -> tuple[InputSpec, ...]:
        specs = []
        for name, kind, shape in self._inputs:
            dtype = element_type(kind)
            if dtype is None:
                raise _unsupported(name, kind)
            specs.append(InputSpec(name=name, shape=_declared_shape(shape), dtype=dtype))
        return tuple(specs)

    def output_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self._outputs)

    def output_types(self) -> tuple[str, ...]:
        return tuple(kind for _, kind in self._outputs)

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        self._check_feeds(feeds)
        raw = [n for n, a in feeds.items() if dtype_name(a.dtype) in _RAW]
        if raw:
            raise RunError(f"input '{raw[0]}' is {dtype_name(feeds[raw[0]].dtype)}: a python: "
                           "target takes no bfloat16 or float8 feeds")
        names = list(feeds)
        said, outputs = self._runner.ask({"op": "run"}, [feeds[n] for n in names], names)
        if "error" in said:
            raise RunError(f"ONNX Runtime run failed on target ({self.runtime.text}): "
                           f"{said['error']}")
        if "events" in said:
            self._placement = with_assignment(placement_from_profile(said["events"]),
                                              self._assigned)
        return outputs

    def call(self, feeds: Mapping[str, np.ndarray]) -> Callable[[], Any]:
        """One run as its latency is timed: in the other interpreter, so the time includes
        the feeds' and outputs' way through the pipes."""
        return lambda: self.run(feeds)

    def close(self) -> None:
        runner = getattr(self, "_runner", None)
        if runner is not None:
            runner.close()
            self._runner = None  # type: ignore[assignment]

    def __del__(self) -> None:
        self.close()


def run_serialized(data: bytes, folder: Path, target: TargetSpec, feeds: Mapping[str, Any],
                   threads: int | None = None) -> tuple[dict[str, np.ndarray], tuple[str, ...]]:
    """One run of a serialized model (external weights in `folder`) in a `python:` target's
    interpreter: every output by name, and the providers that ran it."""
    with tempfile.TemporaryDirectory(prefix="onnx-parity-remote-") as scratch:
        path = Path(scratch) / "model.onnx"
        path.write_bytes(data)
        entry = "session.model_external_initializers_file_folder_path"
        session = RemoteTarget(path, target.with_session_options(
            target.name, config_entries={entry: str(folder)}), threads, profile=False)
        try:
            values = session.run(feeds)
        finally:
            session.close()
        return (dict(zip(session.output_names(), values, strict=True)),
                tuple(session.facts.active))


def _build(info: str, device: str) -> str:
    """ONNX Runtime's build, shortened: 'Release, CPU-OPENVINO_CPU' from its build info
    ('ORT Build Info: git-branch=..., build type=Release') and its device."""
    _, found, rest = info.partition("build type=")
    return ", ".join(part for part in (" ".join(rest.split()) if found else "", device) if part)
