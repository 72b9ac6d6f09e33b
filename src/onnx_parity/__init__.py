"""onnx-parity: a merge gate that keeps PyTorch models and their ONNX exports numerically honest."""

from __future__ import annotations

__version__ = "0.1.0"
