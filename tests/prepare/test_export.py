"""The export sees the model as the user's own torch.onnx.export call would (gradients on,
nothing a previous model left behind), and a dimension the spec names dynamic that came out of
the export fixed is an export error that names it. The dynamo exporter's torch.export runs once
per model, each other opset converted from its program (the same ONNX, dynamic dims dynamic),
and a failure cases share is said in full once, the other cases pointing to it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx
import pytest
import torch

from fixtures import models
from helpers import by_id
from onnx_parity.errors import CheckError, ExportError, StageError
from onnx_parity.plan.cases import plan
from onnx_parity.prepare.export import export_model, model_opset
from onnx_parity.prepare.program import export_at, trace_program
from onnx_parity.report.console import final_table
from onnx_parity.report.junit import junit_xml_string
from onnx_parity.results import CaseResult, RunReport
from onnx_parity.run.flow import run_case
from onnx_parity.run.keys import ExportKey
from onnx_parity.run.memo import ModelMemo
from onnx_parity.run.protocol import WorkerTask
from onnx_parity.spec import InputSpec, load_spec


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


def _run_in_process(write_spec: Callable[[str], Path], text: str, tmp_path: Path,
                    ) -> tuple[ModelMemo, list[CaseResult]]:
    """One model's cases through one memo, as a worker runs them, in this process."""
    spec = load_spec(write_spec(text))
    cases = plan(spec)
    memo = ModelMemo(WorkerTask(spec.root, cases[0].model, cases, tmp_path / "work"))
    return memo, [run_case(memo, case) for case in cases]


@pytest.fixture
def torch_exports(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """torch.export.export, counted: its calls go through unchanged."""
    calls: list[int] = []
    original = torch.export.export

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(torch.export, "export", counted)
    return calls


def test_two_opsets_of_a_dynamo_export_run_torch_export_once(
        write_spec: Callable[[str], Path], tmp_path: Path, torch_exports: list[int]) -> None:
    memo, results = _run_in_process(write_spec, """
        version: 1
        models:
          - name: mlp
            torch: models.py:make_linear
            inputs: {x: [batch, 4]}
            opsets: [17, 18]
            exporter: dynamo
            datasets: [r]
        datasets:
          r: {kind: random, batch_sizes: [1, 3]}
    """, tmp_path)
    assert [(r.id, r.status, r.opset) for r in results] == [
        ("mlp[opset17-cpu-r-b1]", "passed", 17), ("mlp[opset17-cpu-r-b3]", "passed", 17),
        ("mlp[opset18-cpu-r-b1]", "passed", 18), ("mlp[opset18-cpu-r-b3]", "passed", 18)]
    assert len(torch_exports) == 1  # strict=False succeeded; opset 18 came from its program
    for opset in (17, 18):
        assert model_opset(tmp_path / "work" / f"mlp.opset{opset}.dynamo.onnx") == opset
    assert set(memo.export_logs) == {ExportKey(17, "dynamo"), ExportKey(18, "dynamo")}


def test_a_failure_met_only_by_a_cause_rerun_is_said_in_full_by_its_own_case(
        write_spec: Callable[[str], Path], tmp_path: Path) -> None:
    """The TorchScript case fails (the tracer baked one branch of the `if`), and its cause
    ladder tries the other exporter, whose export fails. That failure is the dynamo case's own:
    it says it in full, not "the same failure as in case" of a case that failed otherwise."""
    _, results = _run_in_process(write_spec, """
        version: 1
        models:
          - name: gate
            torch: models.py:make_data_dependent
            inputs: {x: [batch, 4]}
            exporters: [torchscript, dynamo]
            datasets: [signs]
        datasets:
          signs: {kind: random, seed: 4, samples: 16, batch_sizes: [1]}
    """, tmp_path)
    traced, dynamo = results
    assert traced.status == "failed", traced.message
    assert dynamo.status == "error" and dynamo.stage == "export"
    assert dynamo.message.startswith("dynamo exporter failed in torch.export"), dynamo.message
    assert "the same failure" not in dynamo.message


def test_an_export_failure_is_said_once_and_the_other_cases_point_to_it(
        write_spec: Callable[[str], Path], tmp_path: Path, torch_exports: list[int]) -> None:
    """torch.export refuses a branch on the data: every opset's export fails alike, so the
    first case says why and the three others name that case."""
    memo, results = _run_in_process(write_spec, """
        version: 1
        models:
          - name: gate
            torch: models.py:make_data_dependent
            inputs: {x: [batch, 4]}
            opsets: [17, 18]
            exporter: dynamo
            datasets: [a, b]
        datasets:
          a: {kind: random}
          b: {kind: random, seed: 1}
    """, tmp_path)
    first, *later = results
    assert [r.id for r in results] == ["gate[opset17-cpu-a-b1]", "gate[opset17-cpu-b-b1]",
                                       "gate[opset18-cpu-a-b1]", "gate[opset18-cpu-b-b1]"]
    assert all(r.status == "error" and r.stage == "export" for r in results)
    assert first.message.startswith("dynamo exporter failed in torch.export, before any opset: "
                                    "GuardOnDataDependentSymNode")
    head = " ".join(first.message.splitlines()[0].split())
    head = head if len(head) <= 200 else head[:199].rstrip() + "…"
    for result in later:
        assert result.message == f"the same failure as in case {first.id}: {head}"
    assert len(torch_exports) == 2  # once per strategy (strict=False, strict=True), for all
    # Each opset keeps the export's log for --artifacts, the guard's traceback in it.
    for opset in (17, 18):
        assert "GuardOnDataDependentSymNode" in memo.export_logs[ExportKey(opset, "dynamo")]
    report = RunReport("parity.yaml", {}, tuple(results))
    assert head[:40] in final_table(report)  # the model's worst case is the full one
    errors = [e.get("message", "") for e in ET.fromstring(junit_xml_string(report)).iter("error")]
    assert errors[0].startswith("export: dynamo exporter failed in torch.export")
    assert all(e.startswith(f"export: the same failure as in case {first.id}: ")
               for e in errors[1:])
    assert len(errors) == len(results)


def test_the_dynamo_export_from_the_program_is_the_direct_export(tmp_path: Path) -> None:
    """The program traced for opset 18, converted at opset 17, is byte for byte what a direct
    export at 17 writes: the named dims dynamic, under the spec's names."""
    module, example = models.make_linear().eval(), [torch.randn(2, 4)]
    how: dict[str, Any] = {"module": module, "example": example,
                           "inputs": [InputSpec("x", ("batch", 4))], "outputs": ["y"]}
    program = trace_program(opset=18, path=tmp_path / "18.onnx", **how)
    assert program.traced is not None and program.first.path == tmp_path / "18.onnx"
    converted = export_at(program, 17, tmp_path / "from-program.onnx", **how)
    direct = export_model(opset=17, exporter="dynamo", path=tmp_path / "direct.onnx", **how)
    read = onnx.load(str(converted.path))
    assert read.SerializeToString() == onnx.load(str(direct.path)).SerializeToString()
    assert model_opset(converted.path) == 17
    dims = [d.dim_param or d.dim_value for d in read.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch", 4]


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


def test_an_onnx_file_past_protobufs_limit_is_refused_unread(
        tmp_path: Path, write_spec: Callable[[str], Path], run_cli: Callable[..., Any]) -> None:
    """A shipped .onnx of 2 GiB and more cannot be a model (one protobuf message): the case
    errors at the check, naming the file and the limit, before anything reads it (the file is
    sparse: reading it would cost 2 GiB of memory for nothing)."""
    with (tmp_path / "big.onnx").open("wb") as handle:
        handle.truncate(2 << 30)
    code, _, _, report = run_cli(write_spec("""
        version: 1
        models:
          - name: big
            onnx: big.onnx
            torch: models.py:make_linear
            inputs: {x: [batch, 4]}
    """))
    assert code == 1
    (case,) = report["cases"]
    assert (case["status"], case["stage"]) == ("error", "check")
    assert f"{tmp_path / 'big.onnx'} is 2.0 GiB, over the limit of 2 GiB an ONNX file can be" \
        in case["message"]


def test_torch_is_left_as_a_fresh_process_has_it_without_importing_its_compiler() -> None:
    """Deterministic algorithms a model's factory turned on (warn-only too) are off for the
    next; a process where none were turned on never imports torch's compiler to say so (a
    model whose export comes from the cache needs none of it)."""
    script = textwrap.dedent("""\
        import sys, torch
        from onnx_parity.backends.pytorch import _fresh_torch_state
        _fresh_torch_state()
        assert "torch._inductor" not in sys.modules and "torch._dynamo" not in sys.modules
        torch.use_deterministic_algorithms(True, warn_only=True)
        _fresh_torch_state()
        assert not torch.are_deterministic_algorithms_enabled()
        assert not torch.is_deterministic_algorithms_warn_only_enabled()
        """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
