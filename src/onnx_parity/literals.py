"""The closed sets of words a run's options, results and exit take: statuses, stages, option
values and exit codes, ONNX Runtime's provider names and the compatibility table's path, each
written once for every stage. Apart from the value types (results.py), so that the command line
parses its options, and starts its first worker, before it imports any of them (cli/main.py)."""

from __future__ import annotations

from typing import Literal, get_args

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

# xfailed: an expected failure, a case that ended as its `expect` says (compare/expect.py)
Status = Literal["passed", "failed", "error", "skipped", "xfailed"]
Stage = Literal["load", "export", "check", "run", "compare"]
STATUSES: tuple[Status, ...] = get_args(Status)
STAGES: tuple[Stage, ...] = get_args(Stage)
# Where the drift starts is looked for: never, for failed cases, or for every case (explain/).
Localize = Literal["never", "failed", "always"]
LOCALIZE: tuple[Localize, ...] = get_args(Localize)
Causes = Literal["never", "failed"]  # which cases try the cause ladder (explain/ladder.py)
CAUSES: tuple[Causes, ...] = get_args(Causes)
# What fails the gate: a failed or errored case, an errored case only, nothing.
FailOn = Literal["drift", "error", "never"]
FAIL_ON: tuple[FailOn, ...] = get_args(FailOn)
# The exporter a PyTorch model goes through (prepare/export.py), and a case's precision: the
# model as exported or shipped (fp32), or a reduced-precision variant of it (prepare/precision.py).
Exporter = Literal["dynamo", "torchscript"]
EXPORTERS: tuple[Exporter, ...] = get_args(Exporter)
Precision = Literal["fp32", "fp16", "int8-dynamic", "int8"]
PRECISIONS: tuple[Precision, ...] = get_args(Precision)

# The compatibility table a preflight judges against, as its record names it.
COMPAT_TABLE = "onnx_parity/machine/compat.py"

# ONNX Runtime's execution providers, as a target lists them; the ones the code names itself
# first. Every stage imports them from here, the spec's checks first.
CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
TENSORRT = "TensorrtExecutionProvider"
TENSORRT_RTX = "NvTensorRTRTXExecutionProvider"
OPENVINO = "OpenVINOExecutionProvider"
QNN = "QNNExecutionProvider"
COREML = "CoreMLExecutionProvider"
DIRECTML = "DmlExecutionProvider"
WEBGPU = "WebGpuExecutionProvider"
# A name close to one of these is a typo; a name close to none may be a newer provider.
PROVIDERS = (
    CPU, CUDA, TENSORRT, TENSORRT_RTX, "ROCMExecutionProvider", "MIGraphXExecutionProvider",
    OPENVINO, DIRECTML, COREML, "DnnlExecutionProvider", QNN, "NnapiExecutionProvider",
    "XnnpackExecutionProvider", WEBGPU, "VitisAIExecutionProvider", "CANNExecutionProvider",
    "ACLExecutionProvider", "ArmNNExecutionProvider", "AzureExecutionProvider",
    "RknpuExecutionProvider", "SNPEExecutionProvider",
)
