"""The versions a run's report records (the packages that decide the numbers, Python, the
platform), read from package metadata: a module of its own, so a run that needs no other
machine fact does not import the GPU readers of facts.py."""

from __future__ import annotations

import importlib.metadata
import platform
import sys
from typing import Any

from onnx_parity import __version__

PACKAGES = ("torch", "onnx", "onnxscript", "onnxruntime-gpu", "onnxruntime", "numpy")


def read_versions() -> dict[str, Any]:
    """Versions read from package metadata: cheap, and needs no heavy import."""
    versions: dict[str, str] = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue

    return {
        "onnx_parity": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "packages": versions,
    }
