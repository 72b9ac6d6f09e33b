"""The backends: each only produces outputs, never compares.

    pytorch.py    the PyTorch reference (torch imported only here, only when needed)
    session.py    the one ONNX Runtime session builder, and the facts of each session
    options.py    a target's session options, config entries and custom op libraries
    floatenv.py   the floating-point environment a session asks for, kept to its runs
    placement.py  which provider ran each node, from ONNX Runtime's profile
    target.py     one model file on one target (OrtTarget), and the CUDA probe
    probe.py      the CUDA probe run as a module, in the preflight's child process
    remote.py     one model file on a `python:` target, in another interpreter (RemoteTarget)
    runner.py     what that interpreter runs, by path: no import of onnx-parity
    kinds.py      the kinds of target behind one protocol, and the factory that picks one
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from onnx_parity.backends.placement import (
        Placement,
        computes_shapes,
        placement_from_profile,
    )
    from onnx_parity.backends.pytorch import (
        LoadedModule,
        forward,
        import_torch,
        load_module,
        named_outputs,
        output_names,
        torch_outputs,
    )
    from onnx_parity.backends.session import (
        SessionFacts,
        create_session,
        native_stderr,
        preload_cuda_libraries,
        tidy_log,
    )
    from onnx_parity.backends.target import OrtTarget, probe_cuda

# Each name is imported from its module when it is first asked for: a check of ONNX files alone
# never loads the PyTorch reference's module, nor a session's module before its first session.
_LAZY = {
    **dict.fromkeys(("Placement", "computes_shapes", "placement_from_profile"),
                    "onnx_parity.backends.placement"),
    **dict.fromkeys(("LoadedModule", "forward", "import_torch", "load_module", "named_outputs",
                     "output_names", "torch_outputs"), "onnx_parity.backends.pytorch"),
    **dict.fromkeys(("SessionFacts", "create_session", "native_stderr",
                     "preload_cuda_libraries", "tidy_log"), "onnx_parity.backends.session"),
    **dict.fromkeys(("OrtTarget", "probe_cuda"), "onnx_parity.backends.target"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'onnx_parity.backends' has no attribute {name!r}")


__all__ = [
    "LoadedModule",
    "OrtTarget",
    "Placement",
    "SessionFacts",
    "computes_shapes",
    "create_session",
    "forward",
    "import_torch",
    "load_module",
    "named_outputs",
    "native_stderr",
    "output_names",
    "placement_from_profile",
    "preload_cuda_libraries",
    "probe_cuda",
    "tidy_log",
    "torch_outputs",
]
