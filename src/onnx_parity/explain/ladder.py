"""Which suspects a failed case's cause ladder tries, in order, each with its one second run:
TF32 on a GPU that computes in it, a runtime's own reduced precision (OpenVINO, QNN, CoreML,
TensorRT), int8 saturation for an int8 variant on the CPU provider, ONNX Runtime's graph
optimizations, and the other exporter where the spec checks both. A shipped file's stale weights
(weights.py) are tried before them all."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from onnx_parity.backends.precision import full_precision, runtime_precision
from onnx_parity.explain.causes import Numerics, Suspect, tf32_suspect
from onnx_parity.literals import CPU
from onnx_parity.machine.cpu import has_vnni

if TYPE_CHECKING:
    from onnx_parity.literals import Exporter
    from onnx_parity.plan.cases import Case


def suspects(case: Case, numerics: Numerics | None,
             vnni: bool | None = None) -> tuple[Suspect, ...]:
    """The rungs for `case`, each run only while none before it was proven. `vnni` is the
    CPU's (machine/cpu.py) unless given."""
    # int8 before graph optimizations: with them off, a QDQ model runs its quantized ops in
    # float (no QLinear fusion), which hides the saturation behind a vaguer cause.
    found = [tf32_suspect(case.target, numerics), precision_suspect(case),
             int8_suspect(case, vnni), graph_suspect(case), exporter_suspect(case)]
    return tuple(s for s in found if s is not None)


def precision_suspect(case: Case) -> Suspect | None:
    """A runtime that computes in a reduced precision by its own settings (OpenVINO's FP16 on
    a GPU, QNN's HTP float16, CoreML's float16 accumulation, TensorRT's fp16): the target again
    with the setting that keeps float32 (backends/precision.py)."""
    target = case.target
    found = runtime_precision(target)
    if found is None or not found.switch or not (found.reduced or found.precision is None):
        return None
    variant = full_precision(target, found)
    said = ", ".join(f"{k}: {v}" for k, v in found.switch.items())
    what = found.precision or "a reduced precision"
    return Suspect(
        "precision", said.replace(": ", "="), lambda r: r.on_target(variant),
        f"{found.provider} computes this model in {what} ({found.source}): check it in full "
        f"precision with provider_options {{{found.provider}: {{{said}}}}} on target "
        f"'{target.name}', or give it a tolerance of its own (targets.{target.name}.tolerance)",
        {found.provider: dict(found.switch)}, title=f"{what} on {found.provider}",
        with_it=f"in {what},")


# The levels below ONNX Runtime's default (all), walked once graph optimizations are proven.
GRAPH_LEVELS = ("basic", "extended", "layout")


def graph_suspect(case: Case) -> Suspect | None:
    """ONNX Runtime's graph optimizations (fusions, constant folding, layout changes): the
    target again with graph_optimization_level disable_all, where the target does not already
    run without them."""
    target = case.target
    if target.session_options.get("graph_optimization_level") == "disable_all":
        return None
    variant = target.with_session_options(graph_optimization_level="disable_all")
    return Suspect(
        "graph", "graph_optimization_level: disable_all", lambda r: r.on_target(variant),
        f"ONNX Runtime's graph optimizations change this model's numbers on target"
        f" '{target.name}': serve it with the level that passes, or check it as served with"
        f" session_options: {{graph_optimization_level: ...}} on the target and a tolerance of its"
        f" own (targets.{target.name}.tolerance)", title="graph optimizations",
        with_it="optimized,")


def graph_levels(case: Case) -> list[tuple[str, Any]]:
    """(level, variant target) for each level below the default, in order, that this
    ONNX Runtime takes: the first whose re-run fails is where the numbers change."""
    found = []
    for level in GRAPH_LEVELS:
        try:
            found.append((level, case.target.with_session_options(
                graph_optimization_level=level)))
        except ValueError:  # a level this ONNX Runtime does not have
            continue
    return found


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
    others: Sequence[Exporter] = [e for e in model.exporters if e != case.exporter]
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
