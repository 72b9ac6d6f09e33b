"""Repro bundles: written for each failed case, they fail the same way when checked alone."""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from helpers import FIXTURES, ROOT, by_id
from onnx_parity.cli.main import main
from onnx_parity.explain.artifacts import case_folder
from onnx_parity.spec import load_spec

sys.path.insert(0, str(FIXTURES))
import faulty_models as fm


def _tensor(path: Path) -> np.ndarray:
    proto = onnx.TensorProto()
    proto.ParseFromString(path.read_bytes())
    return numpy_helper.to_array(proto)


def _rerun(spec: Path, report: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    code = main(["run", str(spec), "--json", str(report)])
    capsys.readouterr()
    return code, by_id(json.loads(report.read_text()))


def test_case_ids_become_plain_folder_names(tmp_path: Path) -> None:
    assert case_folder(tmp_path, "mlp[opset17-cpu-wide-b8]").name == "mlp__opset17-cpu-wide-b8"
    odd = case_folder(tmp_path, "we ird/model[onnx-cpu-x y-b1]").name
    assert odd == "we_ird_model__onnx-cpu-x_y-b1"


def test_the_cases_of_a_model_share_one_kept_copy(tmp_path: Path) -> None:
    import onnx
    from onnx import helper

    from onnx_parity.explain.artifacts import shared_model

    source = tmp_path / "work" / "m.opset18.dynamo.onnx"
    source.parent.mkdir()
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", 1, [2])],
                              [helper.make_tensor_value_info("y", 1, [2])])
    onnx.save(helper.make_model(graph), str(source))
    root = tmp_path / "artifacts"
    kept = shared_model(root, "m", source)
    assert kept == root / "models" / "m.m.opset18.dynamo.onnx"
    written = kept.stat().st_mtime_ns
    kept.write_bytes(kept.read_bytes())  # touched: a second case must not write it again
    touched = kept.stat().st_mtime_ns
    assert shared_model(root, "m", source) == kept and kept.stat().st_mtime_ns == touched
    assert touched >= written
    graph.node[0].op_type = "Sigmoid"  # a new export of the same name replaces the copy
    onnx.save(helper.make_model(graph), str(source))
    shared_model(root, "m", source)
    assert onnx.load(str(kept)).graph.node[0].op_type == "Sigmoid"


@pytest.mark.slow
def test_a_bundle_reproduces_the_case_and_its_origin_alone(
        run_cli: Callable[..., Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    artifacts = tmp_path / "artifacts"
    code, _, _, report = run_cli(ROOT / "examples" / "faulty.yaml", "--select", "stale-mlp*",
                                 "--select", "golden-head*", "--artifacts", str(artifacts))
    assert code == 1
    cases = by_id(report)
    stale = cases["stale-mlp[onnx-cpu-signs-b1]"]
    folder = Path(stale["details"]["bundle"]["path"])
    assert folder == case_folder(artifacts, stale["id"])
    assert stale["details"]["bundle"]["command"] == f"onnx-parity run {folder / 'parity.yaml'}"

    # Both sides in the ONNX test-data layout: the same inputs, different outputs.
    sets = sorted((folder / "expected").glob("test_data_set_*"))
    assert len(sets) == 4  # the signs dataset's four samples
    for side in sets:
        twin = folder / "actual" / side.name
        assert np.array_equal(_tensor(side / "input_0.pb"), _tensor(twin / "input_0.pb"))
        assert not np.allclose(_tensor(side / "output_0.pb"), _tensor(twin / "output_0.pb"))
    # The model is not copied per case: every bundle of it names the one copy under models/.
    assert not (folder / "model.onnx").exists()
    shared = artifacts / "models" / "stale-mlp.mlp_stale.onnx"
    onnx.checker.check_model(str(shared), full_check=True)
    assert load_spec(folder / "parity.yaml").models[0].onnx == shared.resolve()
    assert sorted(p.name for p in (artifacts / "models").iterdir()) == [
        "golden-head.head.onnx", shared.name]

    # The first diverging node, cut out with its own inputs.
    origin = onnx.load(str(folder / "origin" / "model.onnx"))
    onnx.checker.check_model(origin, full_check=True)
    assert [n.name for n in origin.graph.node] == ["/0/Gemm"]
    assert [i.name for i in origin.graph.input] == ["x"]
    facts = json.loads((folder / "case.json").read_text())
    assert facts["id"] == stale["id"] and facts["divergence"]["node"] == "/0/Gemm"

    # Checked on its own, without the PyTorch source: the same drift, and the node's.
    moved = shutil.copytree(artifacts, tmp_path / "elsewhere")  # DIR moves as a whole
    again_code, again = _rerun(moved / folder.name / "parity.yaml", tmp_path / "again.json",
                               capsys)
    assert again_code == 1
    whole = again["stale-mlp[onnx-cpu-expected]"]
    assert whole["status"] == "failed"
    assert whole["outputs"][0]["max_abs"] == stale["outputs"][0]["max_abs"]
    node = again["stale-mlp.origin[onnx-cpu-origin]"]
    assert node["status"] == "failed" and node["outputs"][0]["name"] == "/0/Gemm_output_0"

    # No origin without an intermediate reference: the bundle holds the model and data alone.
    golden = Path(cases["golden-head[onnx-cpu-drifted]"]["details"]["bundle"]["path"])
    assert not (golden / "origin").exists()
    spec = load_spec(golden / "parity.yaml")
    assert [(m.name, m.onnx, m.torch) for m in spec.models] == [
        ("golden-head", (artifacts / "models" / "golden-head.head.onnx").resolve(), None)]
    assert spec.datasets["expected"].path == golden / "expected"


@pytest.mark.slow
def test_a_float16_origin_is_compared_in_the_reference_type(
        run_cli: Callable[..., Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    from onnx_parity.prepare.export import export_model
    from onnx_parity.spec import InputSpec

    shutil.copy(FIXTURES / "faulty_models.py", tmp_path / "faulty_models.py")
    exported = tmp_path / "encoder.onnx"
    export_model(fm.make_encoder(overflow=True), [torch.randn(2, 6)],
                 [InputSpec("x", ("batch", 6))], ["y"], 18, "torchscript", exported)
    variant = fm.to_float16(onnx.load(str(exported)))
    planted = fm.overflow_node(variant)
    onnx.save(variant, str(tmp_path / "encoder.fp16.onnx"))
    spec = tmp_path / "fp16.yaml"
    spec.write_text(textwrap.dedent("""
        version: 1
        models:
          - name: encoder-fp16
            onnx: encoder.fp16.onnx
            torch: faulty_models.py:make_encoder
            args: {overflow: true}
            tolerance: {atol: 1.0e-2, rtol: 1.0e-2}
            datasets: [random]
        """))
    code, _, _, report = run_cli(spec, "--artifacts", str(tmp_path / "artifacts"))
    assert code == 1
    case = report["cases"][0]
    assert case["details"]["divergence"]["node"] == planted.node
    folder = Path(case["details"]["bundle"]["path"])
    origin = onnx.load(str(folder / "origin" / "model.onnx"))
    assert planted.node in [n.name for n in origin.graph.node]
    # float16 inside, float32 out, as PyTorch's value recorded next to it
    assert origin.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert _tensor(folder / "origin/test_data_set_0/output_0.pb").dtype == np.float32
    again_code, again = _rerun(folder / "parity.yaml", tmp_path / "again.json", capsys)
    assert again_code == 1
    node = again["encoder-fp16.origin[onnx-cpu-origin]"]
    assert node["status"] == "failed" and node["outputs"][0]["name"] == case["details"][
        "divergence"]["tensor"]
