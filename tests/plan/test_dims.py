"""`dims` lists: one case per size (per combination of sizes), the sizes in the case id, all
from one export; a size the export cannot serve fails at that size alone."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers import FIXTURES, by_id
from onnx_parity.errors import SpecError
from onnx_parity.plan.cases import plan
from onnx_parity.spec.load import load_spec

SPEC = """
version: 1
datasets:
  sizes: {kind: random, samples: 2, batch_sizes: [2], dims: {seq: [1, 7, 14], h: 3}}
  grid: {kind: random, batch_sizes: [1], dims: {seq: [2, 5], h: [8, 4]}}
models:
  - name: m
    torch: models.py:make_linear
    opsets: [18]
    inputs: {x: {shape: [batch, seq, h]}}
    datasets: [sizes, grid]
"""


def test_lists_give_one_case_per_combination_with_the_sizes_in_the_id(
        write_spec: Callable[[str], Path]) -> None:
    cases = plan(load_spec(write_spec(SPEC)))
    assert [c.id for c in cases] == [
        "m[opset18-cpu-sizes-b2-seq1]", "m[opset18-cpu-sizes-b2-seq7]",
        "m[opset18-cpu-sizes-b2-seq14]", "m[opset18-cpu-grid-b1-seq2-h8]",
        "m[opset18-cpu-grid-b1-seq2-h4]", "m[opset18-cpu-grid-b1-seq5-h8]",
        "m[opset18-cpu-grid-b1-seq5-h4]"]
    assert [dict(c.dataset.dims) for c in cases[:3]] == [
        {"seq": 1, "h": 3}, {"seq": 7, "h": 3}, {"seq": 14, "h": 3}]
    assert [c.dataset.name for c in cases] == ["sizes"] * 3 + ["grid"] * 4
    # The export is traced at each list's first size of 2 or more, whichever case comes first.
    assert {tuple(c.dataset.traced_dims().items()) for c in cases} == {
        (("seq", 7), ("h", 3)), (("seq", 2), ("h", 8))}


def test_a_bad_list_names_its_line_and_key(write_spec: Callable[[str], Path]) -> None:
    text = SPEC.replace("dims: {seq: [1, 7, 14], h: 3}", "dims: {seq: [1, 0], h: []}")
    with pytest.raises(SpecError) as raised:
        load_spec(write_spec(text))
    message = str(raised.value)
    assert "parity.yaml:3:" in message
    assert "dataset 'sizes': dims.seq: expected a list of positive integers, but item 2 is 0" \
        in message
    assert "dims.h" in message


@pytest.mark.slow
def test_one_export_serves_every_size_and_a_baked_size_fails_alone(
        tmp_path: Path, write_spec: Callable[[str], Path], run_cli: Callable[..., Any]) -> None:
    shutil.copy(FIXTURES / "sized_models.py", tmp_path / "sized_models.py")
    exports = tmp_path / "exports.txt"
    spec = write_spec(f"""
        version: 1
        datasets:
          sizes: {{kind: random, samples: 2, batch_sizes: [2], dims: {{seq: [1, 7, 14]}}}}
        defaults: {{exporter: torchscript, opsets: [18], datasets: [sizes]}}
        models:
          - name: per_position
            torch: sized_models.py:make_per_position
            args: {{exports: {str(exports)!r}}}
            inputs: {{x: {{shape: [batch, seq, 4]}}}}
          - name: baked
            torch: sized_models.py:make_baked_sequence
            inputs: {{x: {{shape: [batch, seq, 4]}}}}
    """)
    code, _, _, report = run_cli(spec)
    assert code == 1
    cases = by_id(report)
    served = [cases[f"per_position[opset18-cpu-sizes-b2-seq{n}]"] for n in (1, 7, 14)]
    assert [c["status"] for c in served] == ["passed"] * 3
    # Three cases, one export: forward() ran under the exporter once.
    assert exports.read_text().splitlines() == ["export"]
    assert served[0]["notes"][0] == ("fed at seq 1 (the dataset lists several sizes; the one "
                                     "export was traced at seq 7)")
    # int(x.shape[1]) is a constant in the TorchScript export: it serves seq 7, the traced size,
    # and nothing else.
    assert cases["baked[opset18-cpu-sizes-b2-seq7]"]["status"] == "passed"
    longer = cases["baked[opset18-cpu-sizes-b2-seq14]"]
    assert longer["status"] == "failed"
    assert "shape differs in sample 0: expected (2, 42), got (4, 21)" in longer["message"]
    shorter = cases["baked[opset18-cpu-sizes-b2-seq1]"]
    assert shorter["status"] == "error" and shorter["stage"] == "run"
    assert "requested shape:{-1,21}" in shorter["message"]


@pytest.mark.slow
def test_the_cache_keys_an_export_by_the_sizes_it_was_traced_at(
        tmp_path: Path, write_spec: Callable[[str], Path], run_cli: Callable[..., Any]) -> None:
    # The key held the first case's fed sizes (seq 1 for both lists below), so the export
    # traced at seq 7 was taken for one traced at seq 14: seq 14 then failed, seq 7 passed.
    shutil.copy(FIXTURES / "sized_models.py", tmp_path / "sized_models.py")
    text = """
        version: 1
        datasets:
          sizes: {kind: random, samples: 1, batch_sizes: [2], dims: {seq: [1, SIZE]}}
        models:
          - name: baked
            torch: sized_models.py:make_baked_sequence
            exporter: torchscript
            opsets: [18]
            inputs: {x: {shape: [batch, seq, 4]}}
            datasets: [sizes]
    """
    cache = str(tmp_path / "cache")
    run_cli(write_spec(text.replace("SIZE", "7")), "--cache", cache)
    _, _, _, report = run_cli(write_spec(text.replace("SIZE", "14")), "--cache", cache)
    longer = by_id(report)["baked[opset18-cpu-sizes-b2-seq14]"]
    assert longer["status"] == "passed", longer["message"]
    assert longer["details"]["cache"]["export"] == "miss"


@pytest.mark.slow
def test_two_inputs_share_a_second_dynamic_dimension_and_recorded_data_runs_its_own_size(
        tmp_path: Path, write_spec: Callable[[str], Path], run_cli: Callable[..., Any]) -> None:
    """`seq` named by x and mask is one size in random data, one dynamic axis named `seq` in the
    file, and one export traced at the random dataset's first size of 2 or more serves the
    other sizes and the recorded data's seq 9."""
    import numpy as np
    import onnx

    shutil.copy(FIXTURES / "sized_models.py", tmp_path / "sized_models.py")
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "recorded.npz", x=rng.standard_normal((2, 9, 4)).astype(np.float32),
             mask=(rng.random((2, 9)) > 0.3).astype(np.float32))
    spec = write_spec("""
        version: 1
        datasets:
          lengths: {kind: random, batch_sizes: [1, 3], dims: {seq: [1, 5]}}
          recorded: {kind: npz, path: recorded.npz}
        models:
          - name: pool
            torch: sized_models.py:make_masked_pool
            opsets: [18]
            inputs:
              x: [batch, seq, 4]
              mask: [batch, seq]
            datasets: [lengths, recorded]
    """)
    code, out, _, report = run_cli(spec, "--work-dir", str(tmp_path / "work"))
    assert code == 0, out
    cases = by_id(report)
    assert sorted(cases) == [
        "pool[opset18-cpu-lengths-b1-seq1]", "pool[opset18-cpu-lengths-b1-seq5]",
        "pool[opset18-cpu-lengths-b3-seq1]", "pool[opset18-cpu-lengths-b3-seq5]",
        "pool[opset18-cpu-recorded]"]
    assert cases["pool[opset18-cpu-lengths-b3-seq1]"]["notes"] == [
        "fed at seq 1 (the dataset lists several sizes; the one export was traced at seq 5)"]
    graph = onnx.load(str(tmp_path / "work" / "pool" / "pool.opset18.dynamo.onnx")).graph
    assert {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
            for i in graph.input} == {"x": ["batch", "seq", 4], "mask": ["batch", "seq"]}
