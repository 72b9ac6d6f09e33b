"""The export sees the model as the user's own torch.onnx.export call would: gradients on,
nothing a previous model left behind."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from conftest import by_id
from fixtures import models
from onnx_parity.errors import ExportError
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
