"""`python -m onnx_parity` runs the command line."""

from __future__ import annotations

import sys

from onnx_parity.cli.main import main

# Guarded: spawned worker processes import this module again as __mp_main__ (a forked one has it).
if __name__ == "__main__":
    sys.exit(main())
