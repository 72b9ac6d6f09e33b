"""`python -m onnx_parity` runs the command line."""

from __future__ import annotations

from onnx_parity.cli.main import entry

# Guarded: spawned worker processes import this module again as __mp_main__ (a forked one has it).
if __name__ == "__main__":
    entry()
