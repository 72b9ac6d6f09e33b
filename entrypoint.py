"""The action's and the image's entry point; the logic is onnx_parity/action.py.

    python entrypoint.py            reads the action's inputs from INPUT_* variables
    python entrypoint.py ARGS...    is `onnx-parity ARGS...` (the image used as the CLI)
"""

import os
import sys

from onnx_parity.cli.action import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], os.environ))
