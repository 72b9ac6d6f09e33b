"""RunReport values for the report tests, hostile text included, and the golden-file check."""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path

from figures import assert_agrees
from onnx_parity import __version__
from onnx_parity.findings import CaseDetails, ProvidersRecord
from onnx_parity.results import CaseResult, OutputComparison, PlanRecord, RunReport

GOLDEN = Path(__file__).parent / "golden"

HOSTILE_MODEL = "evil\n::error::pwned%0A|<script>alert(1)</script>,x:y"
HOSTILE_MESSAGE = (
    "torch.onnx.export failed:\n"
    "::stop-commands::tok3n\n"
    "::error file=x.py,line=1::injected\r\n"
    "%0A%25 | <b>bold</b> & `code` *star* __dunder__ [link](http://x) \\| done\n"
    "\x1b]0;window title\x07 nul\x00 esc\x1b[31mred\x1b[0m bell\x07 del\x7f c1\x9b"
)


def sample_report() -> RunReport:
    """Three models: one that drifts once, one loaded from an ONNX file with NaN/Inf figures and
    a runtime error, and one whose name and messages try to break every report format."""
    logits_ok = OutputComparison(
        name="logits", passed=True, atol=1e-5, rtol=1e-3, elements=10, mismatches=0,
        max_abs=2.384185791015625e-07, max_rel=1.1e-07, mean_abs=6e-08, required_atol=0.0,
        worst_index=(0, 4), worst_expected=2.125, worst_actual=2.1250002,
        expected_shape=(1, 10), actual_shape=(1, 10), expected_dtype="float32",
        actual_dtype="float32",
    )
    logits_bad = OutputComparison(
        name="logits", passed=False, atol=1e-5, rtol=1e-3, elements=8192, mismatches=12,
        max_abs=0.0312, max_rel=0.0049, mean_abs=1.2e-4, required_atol=0.0304,
        worst_index=(3, 0, 17), worst_expected=6.25, worst_actual=6.2812,
        expected_shape=(8, 1024), actual_shape=(8, 1024), expected_dtype="float32",
        actual_dtype="float32",
        message="12 of 8192 elements beyond atol 1e-05 + rtol 0.001·|expected|",
    )
    hidden_ok = OutputComparison(
        name="hidden", passed=True, atol=1e-4, rtol=1e-3, elements=65536, mismatches=0,
        max_abs=3.0e-6, max_rel=2.0e-4, mean_abs=1.0e-7, required_atol=1.5e-6,
        worst_index=(0, 2, 3), worst_expected=-0.0075, worst_actual=-0.007503,
        expected_shape=(8, 8192), actual_shape=(8, 8192), expected_dtype="float32",
        actual_dtype="float32",
    )
    probs_nan = OutputComparison(
        name="probs", passed=False, atol=1e-4, rtol=1e-3, elements=1000, mismatches=3,
        max_abs=0.5, max_rel=math.inf, mean_abs=0.001, required_atol=None,
        worst_index=(0, 7), worst_expected=0.0, worst_actual=math.nan,
        expected_shape=(1, 1000), actual_shape=(1, 1000), expected_dtype="float32",
        actual_dtype="float32",
        message="NaN where PyTorch has finite values in 3 of 1000 elements",
    )
    features_shape = OutputComparison(
        name="features", passed=False, atol=1e-4, rtol=1e-3, elements=0, mismatches=0,
        required_atol=None, expected_shape=(1, 512), actual_shape=(1, 511),
        expected_dtype="float32", actual_dtype="float16",
    )
    probs_ok = OutputComparison(
        name="probs", passed=True, atol=1e-4, rtol=1e-3, elements=1000, max_abs=0.0,
        max_rel=0.0, required_atol=0.0,
    )
    evil_output = OutputComparison(
        name="out|<i>\n::warning::x", passed=False, atol=-math.inf, rtol=math.nan,
        elements=4, mismatches=4, max_abs=math.inf, max_rel=math.nan, mean_abs=math.inf,
        required_atol=math.inf, message="%0A::error::from output message",
    )
    cases = (
        CaseResult(
            id="mlp[opset17-cpu-random-b1]", model="mlp", opset=17, exporter="dynamo",
            target="cpu", dataset="random", batch_size=1, status="passed", seconds=0.41,
            outputs=(logits_ok,), line=12,
            notes=("factory returned a module in training mode; checked in eval mode",),
        ),
        CaseResult(
            id="mlp[opset17-cpu-wide-b8]", model="mlp", opset=17, exporter="dynamo",
            target="cpu", dataset="wide", batch_size=8, status="failed", stage="compare",
            message="logits drifted: 12 of 8192 elements beyond tolerance, max abs 0.0312",
            seconds=1.234, outputs=(hidden_ok, logits_bad), line=12,
            details=CaseDetails(providers=ProvidersRecord(active=("CPUExecutionProvider",)),
                                other={"export_seconds": 0.8}),
            settings={"tolerance": "atol 1e-5 + rtol 1e-3·|e|", "precision": "fp32",
                      "target": '{"providers": ["CPUExecutionProvider"]}',
                      "dataset": '{"kind": "random", "seed": 0}'},
        ),
        CaseResult(
            id="mlp[opset18-cpu-wide-b8]", model="mlp", opset=18, exporter="dynamo",
            target="cpu", dataset="wide", batch_size=8, status="passed", seconds=1.1,
            outputs=(hidden_ok, logits_ok), line=12,
        ),
        CaseResult(
            id="mlp[opset17-cuda-wide-b8]", model="mlp", opset=17, exporter="dynamo",
            target="cuda", dataset="wide", batch_size=8, status="skipped", stage=None,
            message="target cuda: CUDAExecutionProvider is not available on this machine",
            line=12,
        ),
        CaseResult(
            id="resnet_tiny[onnx-cpu-imagenet-b1]", model="resnet_tiny", opset=13,
            exporter=None, target="cpu", dataset="imagenet", batch_size=1, status="failed",
            stage="compare", message="probs: NaN where PyTorch has finite values; features: "
            "shape (1, 511), expected (1, 512)",
            seconds=2.5, outputs=(features_shape, probs_nan), line=30,
        ),
        CaseResult(
            id="resnet_tiny[onnx-cuda-imagenet-b1]", model="resnet_tiny", opset=13,
            exporter=None, target="cuda", dataset="imagenet", batch_size=1, status="error",
            stage="run",
            message="\x1b[31m[ONNXRuntimeError] RUNTIME_EXCEPTION\x1b[0m: Non-zero status code"
            "\nreturned while running Conv node.\x00 Name:'conv1'",
            seconds=0.05, line=30,
        ),
        CaseResult(
            id="resnet_tiny[onnx-cpu-imagenet-b4]", model="resnet_tiny", opset=None,
            exporter=None, target="cpu", dataset="imagenet", batch_size=None,
            status="passed", seconds=math.nan, outputs=(probs_ok,), line=None,
        ),
        CaseResult(
            id=f"{HOSTILE_MODEL}[opset17-cpu-random-b1]", model=HOSTILE_MODEL, opset=17,
            exporter="torchscript", target="cpu", dataset="random", batch_size=1,
            status="error", stage="export", message=HOSTILE_MESSAGE, seconds=0.2, line=44,
            notes=("note with |pipe| and <tag> and\nnewline",),
            details=CaseDetails(other={"weird": {"nested": [1, 2.5, math.inf, None, True]},
                                       "k|<x>": "v\x00"}),
        ),
        CaseResult(
            id=f"{HOSTILE_MODEL}[opset17-cpu-wide-b8]", model=HOSTILE_MODEL, opset=17,
            exporter="torchscript", target="cpu", dataset="wide", batch_size=8,
            status="failed", stage="compare", message="", seconds=0.3, line=44,
            outputs=(evil_output,),
        ),
    )
    return RunReport(
        spec_path="models/parity.yaml",
        environment={
            "python": "3.11.9",
            "torch": "2.13.0+cpu",
            "onnxruntime": "1.22.0",
            "providers": ["CPUExecutionProvider"],
            "gpu": None,
            "evil|key": "a|b\n<i>x</i> & y",
        },
        cases=cases,
        seconds=12.345,
        plan=PlanRecord(spec_sha256="0123456789abcdef" * 4, cases=tuple(c.id for c in cases),
                        version="0.1.0"),
    )


def passing_case(model: str, index: int, line: int | None = None) -> CaseResult:
    return CaseResult(
        id=f"{model}[opset18-cpu-random-b{index}]", model=model, opset=18, exporter="dynamo",
        target="cpu", dataset="random", batch_size=index, status="passed", seconds=0.1,
        outputs=(OutputComparison(name="y", passed=True, atol=1e-4, rtol=1e-3, elements=4,
                                  max_abs=1e-6, required_atol=0.0),),
        line=line,
    )


def failing_case(model: str, index: int, line: int | None = None) -> CaseResult:
    return CaseResult(
        id=f"{model}[opset18-cpu-random-b{index}]", model=model, opset=18, exporter="dynamo",
        target="cpu", dataset="random", batch_size=index, status="failed", stage="compare",
        message=f"y drifted in case {index}", seconds=0.1, line=line,
        outputs=(OutputComparison(name="y", passed=False, atol=1e-4, rtol=1e-3, elements=4,
                                  mismatches=1, max_abs=0.25, required_atol=0.2),),
    )


def planned(report: RunReport, shard: str | None = None, cases: tuple[str, ...] | None = None,
            spec_sha256: str = "5" * 64) -> RunReport:
    """The report with the plan record a run gives it: of `cases` (default: its own), shard
    `shard` ("K/N"; default: its own `shard`), as `merge` needs."""
    shard = shard or report.shard
    split = None if shard is None else tuple(int(n) for n in shard.split("/"))
    record = PlanRecord(spec_sha256=spec_sha256,
                        cases=cases if cases is not None else tuple(c.id for c in report.cases),
                        version=__version__, shard=(split[0], split[1]) if split else None)
    return dataclasses.replace(report, plan=record, shard=shard)


def check_golden(name: str, text: str, figures: bool = False) -> None:
    """Compare `text` with tests/golden/<name> byte for byte, or with `figures` as words and
    figures (tests/figures.py: for a text from a real run, whose float32 figures are the CPU's);
    UPDATE_GOLDEN=1 rewrites it first."""
    path = GOLDEN / name
    data = text.encode("utf-8")
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    assert path.exists(), f"{path} is missing; run the tests with UPDATE_GOLDEN=1 to create it"
    expected = path.read_bytes()
    if figures:
        assert_agrees(name, expected.decode("utf-8"), text)
        return
    assert data == expected, (
        f"{name} differs from {path}; if the change is intended, rerun with UPDATE_GOLDEN=1 "
        "and review the diff"
    )
