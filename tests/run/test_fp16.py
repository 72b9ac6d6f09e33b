"""float16 cases: what really ran in float16 on the target (ONNX Runtime's CPU provider runs
most float16 nodes in float32), float16's range checked on the float32 model's tensors without
a GPU, and a float16 PyTorch reference that overflowed named as such."""

from __future__ import annotations

import dataclasses
import math
import shutil
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from helpers import FIXTURES, by_id
from onnx_parity.backends.placement import placement_from_profile
from onnx_parity.cli.main import main
from onnx_parity.compare.float16 import leaves_float16, reference_overflows
from onnx_parity.findings import CaseDetails, Float16Record, RangeRecord
from onnx_parity.report.jsonfile import read_json, write_json
from onnx_parity.run.float16 import first_failing
from report_fixtures import sample_report

CPU_NOTE = ("ONNX Runtime's CPU provider ran them in float32 (it inserts casts), so float16 "
            "overflow and rounding cannot show on this target")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One run of every float16 model of the fixtures, on the CPU."""
    import json

    folder = tmp_path_factory.mktemp("fp16")
    shutil.copy(FIXTURES / "float16_models.py", folder / "float16_models.py")
    spec = folder / "parity.yaml"
    spec.write_text(textwrap.dedent("""\
        version: 1
        datasets: {rows: {kind: random, seed: 3, samples: 2, batch_sizes: [2]}}
        defaults: {datasets: [rows]}
        models:
          - name: t5
            torch: float16_models.py:make_block
            inputs: {x: {shape: [batch, 8]}}
            exporters: [torchscript, dynamo]
            precisions: [fp32, fp16]
          - name: benign
            torch: float16_models.py:make_block
            args: {scale: 1.0}
            inputs: {x: {shape: [batch, 8]}}
            precisions: [fp16]
          - name: vanishing
            torch: float16_models.py:make_vanishing
            inputs: {x: {shape: [batch, 8]}}
            precisions: [fp16]
          - name: masked
            torch: float16_models.py:make_masked
            inputs: {x: {shape: [batch, 8]}}
            precisions: [fp16]
          - name: squares
            torch: float16_models.py:make_squares
            inputs: {x: {shape: [batch, 8], dtype: float16}}
        """))
    path = folder / "report.json"
    main(["run", str(spec), "--json", str(path)])
    return by_id(json.loads(path.read_text()))


@pytest.mark.slow
def test_an_rmsnorm_beyond_float16s_range_fails_on_the_cpu_naming_node_and_module(
        report: dict[str, Any]) -> None:
    assert report["t5[opset18-torchscript-cpu-rows-b2]"]["status"] == "passed"
    case = report["t5[opset18-torchscript-fp16-cpu-rows-b2]"]
    assert (case["status"], case["stage"]) == ("failed", "compare")
    assert case["message"].startswith(
        "float16 overflow: '/norm/Pow' in module norm reaches ")
    assert "> 65504 in the float32 model on these samples; stored in float16, it moves the " \
           "outputs beyond the tolerance (" in case["message"]
    # The comparison on the CPU passed, and is still reported: the CPU ran it in float32.
    (output,) = case["outputs"]
    assert output["passed"] and output["metrics"]["cosine"] > 0.9999
    assert "; compared on cpu: all 1 output within tolerance" in case["message"]
    float16 = case["details"]["float16"]
    assert float16["failing"]["node"] == "/norm/Pow" and float16["failing"]["module"] == "norm"
    assert float16["failing"]["kind"] == "overflow" and float16["failing"]["max_abs"] > 65504
    assert float16["range_checked"] and float16["leaving"] >= 1
    assert float16["nodes"] > 0 and float16["float16_nodes"] < float16["nodes"]
    assert any(n.startswith("float16 on cpu: ") and n.endswith(CPU_NOTE[-40:])
               for n in case["notes"])
    # The dynamo exporter's nodes are named otherwise; the module is the same.
    dynamo = report["t5[opset18-dynamo-fp16-cpu-rows-b2]"]
    assert dynamo["status"] == "failed"
    assert dynamo["details"]["float16"]["failing"]["module"] == "norm"
    assert dynamo["details"]["float16"]["failing"]["op_type"] == "Pow"


@pytest.mark.slow
def test_a_benign_fp16_case_passes_and_says_how_much_ran_in_float16(
        report: dict[str, Any]) -> None:
    case = report["benign[opset18-fp16-cpu-rows-b2]"]
    assert case["status"] == "passed", case["message"]
    float16 = case["details"]["float16"]
    assert float16["range_checked"] and float16["leaving"] == 0 and "failing" not in float16
    ran = f"float16 on cpu: {float16['float16_nodes']} of {float16['nodes']} compute nodes ran " \
          "in float16"
    assert any(note.startswith(ran) for note in case["notes"]), case["notes"]
    assert "float16's range holds: no tensor of the float16 graph leaves it in the float32 " \
           "model on these samples" in case["notes"]


@pytest.mark.slow
def test_a_tensor_that_flushes_to_zero_in_float16_fails_as_an_underflow(
        report: dict[str, Any]) -> None:
    case = report["vanishing[opset18-fp16-cpu-rows-b2]"]
    assert case["status"] == "failed"
    assert case["message"].startswith("float16 underflow: '")
    assert "' in the top-level module is at most 1." in case["message"]
    assert " in the float32 model on these samples, all of which flushes to 0 in float16; " \
           "stored in float16, it moves the outputs beyond the tolerance (" in case["message"]
    failing = case["details"]["float16"]["failing"]
    assert failing["kind"] == "underflow" and 0 < failing["max_abs"] <= 2.0 ** -25


@pytest.mark.slow
def test_a_mask_beyond_float16s_range_that_changes_nothing_is_a_note_not_a_failure(
        report: dict[str, Any]) -> None:
    case = report["masked[opset18-fp16-cpu-rows-b2]"]
    assert case["status"] == "passed", case["message"]
    float16 = case["details"]["float16"]
    assert float16["leaving"] >= 1 and float16["ranges"][0]["kind"] == "overflow"
    assert any(n.startswith("float16's range: 1 tensor of the float16 graph leaves it in the "
                            "float32 model on these samples (the first: '") and
               "reaches 3.4e38 > 65504); stored in float16, it keeps the outputs within the "
               "tolerance" in n for n in case["notes"]), case["notes"]


@pytest.mark.slow
def test_a_float16_reference_that_overflowed_is_named_not_the_export(
        report: dict[str, Any]) -> None:
    case = report["squares[opset18-cpu-rows-b2]"]
    assert case["status"] == "failed"
    assert case["message"].startswith(
        "the PyTorch reference overflowed: its output 'output_0' holds inf in ")
    assert "where ONNX Runtime's is finite; PyTorch ran the module in float16 (the dtype of its" \
           " inputs), and float16 arithmetic overflowed in PyTorch, not in the export" \
           in case["message"]
    assert case["details"]["float16"]["reference_overflow"] == ["output_0"]
    assert any(n.startswith("float16 on cpu: ") for n in case["notes"])


def test_float16s_range_edges() -> None:
    assert leaves_float16(65504.0) is None
    assert leaves_float16(65519.0) is None  # rounds to 65504
    assert leaves_float16(65520.0) == "overflow"
    assert leaves_float16(3.4e38) == "overflow"
    assert leaves_float16(2.0 ** -24) is None  # float16's smallest subnormal
    assert leaves_float16(2.0 ** -25) == "underflow"  # half of it rounds to 0 (to even)
    assert leaves_float16(1e-30) == "underflow"
    assert leaves_float16(0.0) is None  # a tensor of zeros is zeros in float16 too
    assert leaves_float16(math.inf) is None and leaves_float16(math.nan) is None


def test_only_a_reference_that_alone_is_non_finite_overflowed() -> None:
    finite = np.array([1.0, 2.0], np.float16)
    inf = np.array([np.inf, 2.0], np.float16)
    nan = np.array([1.0, np.nan], np.float16)
    (found,) = reference_overflows(["y"], [[inf], [nan]], [[finite], [finite]])
    assert (found.name, found.count, found.elements, found.kinds) == ("y", 2, 4, "NaN/Inf")
    assert reference_overflows(["y"], [[inf]], [[inf]]) == ()  # both overflowed alike
    assert reference_overflows(["y"], [[inf], [finite]], [[finite], [nan]]) == ()  # both ways
    assert reference_overflows(["k"], [[np.array([1, 2])]], [[np.array([1, 2])]]) == ()


@pytest.mark.parametrize("count", [1, 2, 7, 64])
def test_the_first_candidate_that_breaks_the_outputs_is_found_by_bisection(count: int) -> None:
    for first in [*range(count), None]:
        calls: list[int] = []

        def fails(prefix: int, first: int | None = first, calls: list[int] = calls) -> bool:
            calls.append(prefix)
            return first is not None and prefix > first

        assert first_failing(count, fails) == first
        assert len(calls) <= math.ceil(math.log2(count)) + 2


def test_the_profile_counts_compute_nodes_and_those_that_gave_float16() -> None:
    def event(op: str, provider: str, inputs: list[str], outputs: list[str]) -> dict[str, Any]:
        return {"cat": "Node", "name": f"{op}_kernel_time",
                "args": {"op_name": op, "provider": provider,
                         "input_type_shape": [{t: [2]} for t in inputs],
                         "output_type_shape": [{t: [2]} for t in outputs]}}

    cpu, cuda = "CPUExecutionProvider", "CUDAExecutionProvider"
    placement = placement_from_profile([
        event("Cast", cpu, ["float"], ["float16"]),  # a cast is no arithmetic
        event("LayerNormalization", cpu, ["float16"], ["float16"]),
        event("Reshape", cpu, ["float16", "int64"], ["float16"]),  # nor is moving data
        event("Gemm", cpu, ["float", "float"], ["float"]),  # run in float32 between casts
        event("Shape", cpu, ["float16"], ["int64"]),
        event("MatMul", cuda, ["float16", "float16"], ["float16"]),
    ])
    assert placement.arithmetic == {cpu: 2, cuda: 1}
    assert placement.float16 == {cpu: 1, cuda: 1}


def test_the_float16_record_survives_the_json_report(tmp_path: Path) -> None:
    report = sample_report()
    found = RangeRecord(tensor="/norm/Pow_output_0", kind="overflow", max_abs=82521.25,
                        node="/norm/Pow", op_type="Pow", module="norm")
    record = Float16Record(nodes=41, float16_nodes=3, range_checked=True, leaving=2,
                           ranges=(found, dataclasses.replace(found, kind="underflow",
                                                              max_abs=1e-9, module="")),
                           failing=found, reference_overflow=("y",))
    cases = list(report.cases)
    cases[1] = dataclasses.replace(cases[1], details=CaseDetails(float16=record))
    cases[2] = dataclasses.replace(cases[2], details=CaseDetails(float16=Float16Record()))
    report = dataclasses.replace(report, cases=tuple(cases))
    path = tmp_path / "report.json"
    write_json(report, path)
    back = read_json(path)
    assert back.cases[1].details.float16 == record
    assert back.cases[2].details.float16 == Float16Record()
