"""The CUDA probe the preflight trusts, run as `python -m onnx_parity.backends.probe`: here and
not in machine/ because its session is made by the one session builder, as a case's would be.

machine/preflight.py starts it in a child process, so that the parent never holds a CUDA
context, and reads the last line it prints: `[usable, reason]` as JSON.
"""

from __future__ import annotations

import json


def main() -> None:
    from onnx_parity.backends.target import probe_cuda  # numpy: only in the probe's own process

    print(json.dumps(probe_cuda()))


if __name__ == "__main__":
    main()
