"""Run by path in a `python:` target's interpreter when a spec is loaded (targets.py): exits 0
where that interpreter can import onnxruntime and 1 where it cannot, found without importing it,
so that loading a spec stays fast. Standard library only: that interpreter holds no onnx-parity.
"""

import importlib.util
import sys

if __name__ == "__main__":
    sys.exit(importlib.util.find_spec("onnxruntime") is None)
