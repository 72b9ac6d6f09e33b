"""What the CPU offers ONNX Runtime's int8 kernels: VNNI or not, read from the kernel's flags."""

from __future__ import annotations

import functools
import platform
from pathlib import Path


@functools.cache
def has_vnni(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool | None:
    """Whether this x86-64 CPU has VNNI (AVX512-VNNI or AVX-VNNI), which ONNX Runtime's int8
    kernels need to multiply signed 8-bit weights without saturating (U8S8 otherwise adds
    pairs of products in 16 bits); None where it cannot be told (not x86-64, no flags)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return None
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines()
                  if line.startswith("flags")), None)
    if flags is None:
        return None
    return "avx512_vnni" in flags or "avx_vnni" in flags
