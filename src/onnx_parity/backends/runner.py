"""The runner a `python:` target's interpreter runs by path: ONNX Runtime sessions in that
interpreter (`SessionServer`), driven over its stdin and stdout (stdlib, numpy and onnxruntime
only).

It imports nothing of onnx-parity, so the other interpreter needs only its own onnxruntime
build and numpy. Each message either way is one line of JSON, then `size` bytes of an .npz
archive (arrays `a0`, `a1`, ... in the order the header's `names` lists them). The runner
answers every request with one message: `{"error": ...}` when it failed.

    hello (sent first)  {"onnxruntime", "package", "build", "device", "available", "python",
                         "numpy"}
    open                {"model", "providers", "options", "config", "libraries", "threads",
                         "profile"} -> {"active", "provider_options", "log", "inputs", "outputs",
                         "session", "assigned": ONNX Runtime's own node assignment, from 1.24}
    run                 feeds -> outputs; after the first run of a profiled session, its node
                         events ({"events": [...]})
"""

from __future__ import annotations

import io
import json
import os
import sys
import tempfile
import traceback
from typing import Any

# What ONNX Runtime or anything else prints must not reach the protocol's pipe.
_OUT = os.fdopen(os.dup(1), "wb")
os.dup2(2, 1)


def send(header: dict[str, Any], arrays: list[Any] | None = None) -> None:
    payload = b""
    if arrays is not None:
        import numpy as np

        buffer = io.BytesIO()
        named: dict[str, Any] = {f"a{k}": a for k, a in enumerate(arrays)}
        np.savez(buffer, **named)
        payload = buffer.getvalue()
    header = dict(header, size=len(payload))
    _OUT.write(json.dumps(header).encode() + b"\n" + payload)
    _OUT.flush()


def receive() -> tuple[dict[str, Any] | None, list[Any]]:
    line = sys.stdin.buffer.readline()
    if not line:
        return None, []
    header: dict[str, Any] = json.loads(line)
    payload = sys.stdin.buffer.read(header.get("size", 0)) if header.get("size") else b""
    arrays = []
    if payload:
        import numpy as np

        with np.load(io.BytesIO(payload), allow_pickle=False) as archive:
            arrays = [archive[f"a{k}"] for k in range(len(header.get("names", ())))]
    return header, arrays


def _captured_stderr(action: Any) -> tuple[Any, str]:
    """Run `action` with fd 2 in a file; returns its result and what was written there."""
    with tempfile.TemporaryFile() as sink:
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        try:
            result = action()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        sink.seek(0)
        return result, sink.read().decode("utf-8", "replace")


class SessionServer:
    """ONNX Runtime sessions in this interpreter, made and run as the requests ask."""

    def __init__(self) -> None:
        import onnxruntime as ort

        self.ort = ort
        self.session: Any = None
        self.profiling = False
        self.options: Any = None

    def hello(self) -> dict[str, Any]:
        ort = self.ort
        build = ort.get_build_info() if hasattr(ort, "get_build_info") else ""
        import numpy as np

        try:  # the distribution that holds it: onnxruntime-openvino, onnxruntime-gpu, ...
            from importlib.metadata import packages_distributions

            package = ",".join(packages_distributions().get("onnxruntime", ())) or "onnxruntime"
        except Exception:
            package = "onnxruntime"
        return {"onnxruntime": ort.__version__, "build": build, "python": sys.version.split()[0],
                "package": package, "device": getattr(ort, "get_device", lambda: "")(),
                "available": ort.get_available_providers(), "numpy": np.__version__}

    def open(self, request: dict[str, Any]) -> dict[str, Any]:
        ort = self.ort
        options = ort.SessionOptions()
        options.log_severity_level = 2
        if request.get("threads"):
            options.intra_op_num_threads = request["threads"]
        for key, value in request.get("options", {}).items():
            if isinstance(value, dict):  # an enum, by its type's and its member's names
                enum = getattr(ort, value["enum"])
                if not hasattr(enum, value["member"]):
                    raise ValueError(f"{key}: onnxruntime {ort.__version__} has no "
                                     f"{value['enum']}.{value['member']}")
                value = getattr(enum, value["member"])
            setattr(options, key, value)
        for key, value in request.get("config", {}).items():
            options.add_session_config_entry(key, value)
        # ONNX Runtime's own report of which provider takes each node, where it has one (1.24)
        reported = hasattr(ort.InferenceSession, "get_provider_graph_assignment_info")
        if reported:
            options.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
        for library in request.get("libraries", ()):
            options.register_custom_ops_library(library)
        if request.get("profile"):
            options.enable_profiling = True
            options.profile_file_prefix = os.path.join(tempfile.gettempdir(),
                                                       f"onnx-parity-runner-{os.getpid()}")
        providers = [p if isinstance(p, str) else (p[0], p[1]) for p in request["providers"]]

        def make() -> tuple[Any, Exception | None]:
            try:
                return ort.InferenceSession(request["model"], options, providers=providers), None
            except Exception as exc:
                return None, exc

        (session, error), log = _captured_stderr(make)
        if error is not None:
            return {"error": f"{type(error).__name__}: {error}", "log": log}
        self.session, self.profiling, self.options = session, bool(request.get("profile")), options
        try:
            in_effect = {str(p): {str(k): str(v) for k, v in o.items()}
                         for p, o in session.get_provider_options().items()}
        except Exception:
            in_effect = {}
        assigned = None
        if reported:
            try:
                assigned = [[sub.ep_name, [[n.name, n.op_type] for n in sub.get_nodes()]]
                            for sub in session.get_provider_graph_assignment_info()]
            except Exception:
                assigned = None
        made = session.get_session_options()
        said = {key: getattr(getattr(made, key), "name", getattr(made, key))
                for key in request.get("options", {}) if hasattr(made, key)}
        said["intra_op_num_threads"] = made.intra_op_num_threads
        return {"active": session.get_providers(), "provider_options": in_effect, "log": log,
                "assigned": assigned,
                "session": said,
                "inputs": [[a.name, a.type, list(a.shape)] for a in session.get_inputs()],
                "outputs": [[o.name, o.type] for o in session.get_outputs()]}

    def run(self, header: dict[str, Any], arrays: list[Any]) -> tuple[dict[str, Any], Any]:
        feeds = dict(zip(header["names"], arrays))  # noqa: B905 (the runner runs on Pythons before 3.10)
        outputs = self.session.run(None, feeds)
        for k, value in enumerate(outputs):
            if not hasattr(value, "dtype"):
                raise TypeError(f"output {k} is a {type(value).__name__}: a python: target "
                                "returns tensors only")
        said = {"names": [o.name for o in self.session.get_outputs()]}
        if self.profiling:
            self.profiling = False
            path = self.session.end_profiling()
            try:
                with open(path, encoding="utf-8") as file:
                    events = json.load(file)
            finally:
                os.remove(path)
            said["events"] = [e for e in events if isinstance(e, dict) and e.get("cat") == "Node"]
        return said, outputs


def main() -> int:
    try:
        server = SessionServer()
    except Exception as exc:  # no onnxruntime, or a broken one: said, then the runner ends
        send({"error": f"{type(exc).__name__}: {exc}", "python": sys.executable})
        return 1
    send(server.hello())
    while True:
        header, arrays = receive()
        if header is None or header.get("op") == "exit":
            return 0
        try:
            if header.get("op") == "open":
                send(server.open(header))
            elif header.get("op") == "run":
                said, outputs = server.run(header, arrays)
                send(said, outputs)
            else:
                send({"error": f"unknown request {header.get('op')!r}"})
        except Exception as exc:
            send({"error": f"{type(exc).__name__}: {exc}",
                  "trace": traceback.format_exc(limit=3)})


if __name__ == "__main__":
    sys.exit(main())
