"""Which suspects a failed case's cause ladder tries, in order, each with its one second run:
TF32 on a GPU that computes in it, int8 saturation for an int8 variant on the CPU provider, and
the other exporter where the spec checks both. A shipped file's stale weights (weights.py) are
tried before them all."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from onnx_parity.backends.placement import CPU
from onnx_parity.explain.causes import Numerics, Suspect, tf32_suspect
from onnx_parity.machine.cpu import has_vnni

if TYPE_CHECKING:
    from onnx_parity.plan.cases import Case


def suspects(case: Case, numerics: Numerics | None,
             vnni: bool | None = None) -> tuple[Suspect, ...]:
    """The rungs for `case`, each run only while none before it was proven. `vnni` is the
    CPU's (machine/cpu.py) unless given."""
    found = [tf32_suspect(case.target, numerics), int8_suspect(case, vnni),
             exporter_suspect(case)]
    return tuple(s for s in found if s is not None)


def int8_suspect(case: Case, vnni: bool | None = None) -> Suspect | None:
    """An int8 variant on the CPU provider: remade with reduce_range=True (7-bit weights), which
    keeps U8S8 kernels from saturating on x86 CPUs without VNNI."""
    if case.precision not in ("int8", "int8-dynamic") or case.target.providers[:1] != (CPU,):
        return None
    vnni = has_vnni() if vnni is None else vnni
    cpu = {False: "this CPU has no VNNI, so ONNX Runtime's U8S8 kernels add pairs of int8"
                  " products in 16 bits and saturate with signed 8-bit weights",
           True: "this CPU has VNNI, yet the 8-bit weights lose what 7 bits keep",
           None: "ONNX Runtime's U8S8 kernels saturate with signed 8-bit weights on x86 CPUs"
                 " without VNNI"}[vnni]
    call = ("quantize_dynamic(..., reduce_range=True)" if case.precision == "int8-dynamic"
            else "quantize_static(..., reduce_range=True)")
    return Suspect(
        "int8", "the variant remade with reduce_range=True", lambda r: r.remade(True),
        f"{cpu}: quantize with {call} or with QUInt8 weights, as ONNX Runtime's quantization"
        " guide advises for such CPUs, or serve on a CPU with AVX512-VNNI or AVX-VNNI",
        title="int8 saturation")


def exporter_suspect(case: Case) -> Suspect | None:
    """A case whose model the spec exports with both exporters: the same model, opset,
    precision, target and dataset with the other one. Named only when that case passes."""
    model = case.model
    others: Sequence[str] = [e for e in model.exporters if e != case.exporter]
    if model.onnx is not None or case.exporter is None or not others:
        return None
    other = others[0]
    return Suspect(
        "exporter", f"exporter: {other}", lambda r: r.exported_with(other),
        f"the drift comes from the {case.exporter} export, not the model: check it with"
        f" exporter: {other}, or report the {case.exporter} export to PyTorch with this case's"
        " repro bundle (--artifacts)",
        title=f"the {case.exporter} exporter", floating_only=False, must_pass=True,
        with_it=f"as exported by {case.exporter},")
