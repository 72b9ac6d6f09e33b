"""`python -m onnx_parity` runs the command line."""

from __future__ import annotations

import sys

from onnx_parity.cli import main

sys.exit(main())
