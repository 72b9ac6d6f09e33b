"""The export sees the model as the user's own torch.onnx.export call would (gradients on,
nothing a previous model left behind), and a dimension the spec names dynamic that came out of
the export fixed is an export error that names it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx
import pytest
import torch

from conftest import by_id
from fixtures import models
from onnx_parity.errors import CheckError, ExportError, StageError
from onnx_parity.prepare.export import export_model
from onnx_parity.spec import InputSpec


def test_multihead_attention_without_weights_exports_with_torchscript(
        write_spec: Callable[[str], Path], run_cli: Callable[..., Any]) -> None:
    """Under torch.no_grad() nn.MultiheadAttention(need_weights=False) runs as
    aten::_native_multi_head_attention, which the TorchScript exporter refuses (torchvision's
    vit_b_16 did); a plain torch.onnx.export(dynamo=False) exports it, and so must the check."""
    code, out, _, report = run_cli(write_spec("""
        version: 1
        models:
          - name: attention
            torch: models.py:make_self_attention
            inputs: {x: [batch, seq, 8]}
            exporter: torchscript
            datasets: [r]
        datasets:
          r: {kind: random, batch_sizes: [1, 3], dims: {seq: 5}}
    """))
    assert code == 0, out
    for case in report["cases"]:
        assert case["status"] == "passed", case["message"]


def test_a_model_that_turns_gradients_off_leaves_the_next_one_as_a_fresh_process_has_it(
        write_spec: Callable[[str], Path], run_cli: Callable[..., Any]) -> None:
    """One worker checks the three models in turn: the first one's factory turns gradients off
    for the process; the next ones are still exported with them on."""
    code, out, _, report = run_cli(write_spec("""
        version: 1
        models:
          - name: grad-off
            torch: models.py:make_gradients_off
            inputs: {x: [batch, 4]}
          - name: probe
            torch: models.py:make_gradients_probe
            inputs: {x: [batch, 4]}
            exporters: [dynamo, torchscript]
          - name: attention
            torch: models.py:make_self_attention
            inputs: {x: [batch, 5, 8]}
            exporter: torchscript
    """), "--jobs", "1")
    assert code == 0, out
    assert {case_id: case["status"] for case_id, case in by_id(report).items()} == {
        "grad-off[opset18-cpu-random-b1]": "passed",
        "probe[opset18-dynamo-cpu-random-b1]": "passed",
        "probe[opset18-torchscript-cpu-random-b1]": "passed",
        "attention[opset18-cpu-random-b1]": "passed",
    }


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_the_export_itself_runs_with_gradients(exporter: str, tmp_path: Path) -> None:
    """The probe raises when traced without gradients; export_model adds no no_grad()."""
    export_model(models.make_gradients_probe().eval(), [torch.randn(2, 4)],
                 [InputSpec("x", ("batch", 4))], ["y"], 18, exporter, tmp_path / "probe.onnx")
    assert torch.is_grad_enabled()
    with torch.no_grad(), pytest.raises(ExportError, match="exported with gradients off"):
        # The check is real: the same export with gradients off fails.
        export_model(models.make_gradients_probe().eval(), [torch.randn(2, 4)],
                     [InputSpec("x", ("batch", 4))], ["y"], 18, exporter, tmp_path / "off.onnx")


def test_a_dynamic_dimension_the_export_fixed_fails_the_export_naming_it(
        write_spec: Callable[[str], Path], run_cli: Callable[..., Any]) -> None:
    """forward() branches on x.shape[1]: torch.export keeps the branch it traced and writes
    seq as 8, so the ONNX model would refuse every other length. TorchScript's trace keeps the
    input's dimension named (the branch is baked in all the same, which only other sizes show)."""
    code, _, _, report = run_cli(write_spec("""
        version: 1
        models:
          - name: specialised
            torch: models.py:make_specialised
            inputs: {x: [batch, seq, 4]}
            exporters: [dynamo, torchscript]
            datasets: [r]
        datasets:
          r: {kind: random, dims: {seq: 8}}
    """))
    assert code == 1
    cases = by_id(report)
    dynamo = cases["specialised[opset18-dynamo-cpu-r-b1]"]
    assert dynamo["status"] == "error" and dynamo["stage"] == "export"
    assert dynamo["message"] == (
        "the export fixed dynamic dimension 'seq' (input 'x', axis 1) at 8; the model's code "
        "specialised on that size (a Python int taken from the shape, or a branch on it), so the"
        " exported model takes no other: make that code shape-agnostic, try exporter: "
        "torchscript, or, if it is really fixed, write 8 instead of 'seq' in inputs.x.shape of "
        "the model")
    assert cases["specialised[opset18-torchscript-cpu-r-b1]"]["status"] == "passed"


def test_every_fixed_dimension_is_named(tmp_path: Path) -> None:
    """Both widths meet an nn.Linear, which takes one size only; the inputs bound by name."""
    path = tmp_path / "two.onnx"
    with pytest.raises(ExportError) as caught:
        export_model(models.make_two_sizes().eval(), [torch.randn(2, 6), torch.randn(2, 4)],
                     [InputSpec("wide", ("batch", "w")), InputSpec("narrow", ("batch", "n"))],
                     [], 18, "dynamo", path, by_name=["narrow", "wide"])
    message = caught.value.message
    assert message.startswith("the export fixed dynamic dimensions 'w' (input 'wide', axis 1) "
                              "at 6 and 'n' (input 'narrow', axis 1) at 4; ")
    assert message.endswith("write 6 instead of 'w' in inputs.wide.shape and 4 instead of 'n' "
                            "in inputs.narrow.shape of the model")
    declared = {i.name: [d.dim_value for d in i.type.tensor_type.shape.dim]
                for i in onnx.load(str(path)).graph.input}
    assert declared == {"narrow": [0, 4], "wide": [0, 6]}  # the batch stayed dynamic


def test_a_failure_said_again_keeps_its_stage_and_points_to_the_first_case() -> None:
    error = ExportError("x" * 300 + "\nsecond line", log="the exporter's log")
    again = error.again("m[opset17-cpu-r-b1]")
    assert isinstance(again, ExportError) and again.stage == "export"
    assert again.log == "the exporter's log" and again.original is error
    assert again.message == f"the same failure as in case m[opset17-cpu-r-b1]: {'x' * 199}…"
    assert again.again("c").message.startswith("the same failure as in case c: xxx")
    check: StageError = CheckError("onnx.checker rejected m.onnx:\n  bad")
    assert check.again("c").stage == "check"
    assert check.again("c").message == ("the same failure as in case c: onnx.checker rejected "
                                        "m.onnx:")
