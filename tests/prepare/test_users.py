"""Models as users write them and errors people can act on: mapping outputs named by their
keys, keyword arguments for forward(), several exporters, the user's own line in an error,
-v from the workers, exporter noise kept off the console, and recorded data that is not one
tensor (a ZipMap's sequence of maps)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_parity
from helpers import FIXTURES, by_id

SOURCE = Path(onnx_parity.__file__).resolve().parent.parent

HUB = """
    version: 1
    models:
      - name: hub
        torch: models.py:make_hub_style
        inputs: {input_ids: {shape: [batch, 5], dtype: int64, high: 20}}
        exporters: [dynamo, torchscript]
        forward_args: {use_cache: false}
"""


@pytest.mark.slow
def test_mapping_outputs_are_named_by_their_keys_with_forward_args(
        write_spec: Callable[[str], Path], run_cli: Callable[..., Any]) -> None:
    code, out, _, report = run_cli(write_spec(HUB))
    assert code == 0, out
    cases = by_id(report)
    assert set(cases) == {"hub[opset18-dynamo-cpu-random-b1]",
                          "hub[opset18-torchscript-cpu-random-b1]"}
    for case in cases.values():
        assert [o["name"] for o in case["outputs"]] == ["last_hidden_state", "pooler_output"]
        assert all(o["passed"] for o in case["outputs"])


@pytest.mark.slow
def test_a_cache_in_the_outputs_says_how_to_leave_it_out(
        write_spec: Callable[[str], Path], run_cli: Callable[..., Any]) -> None:
    code, _, _, report = run_cli(write_spec(HUB.replace(
        "        forward_args: {use_cache: false}\n", "")))
    assert code == 1
    said = ("forward() returned a KeyValueCache at past_key_values, which ONNX cannot hold; if "
            "it is a key-value cache (past_key_values), pass forward_args: {use_cache: false} on"
            " the model")
    first, second = report["cases"]  # one forward pass finds it for both exporters
    for case in (first, second):
        assert case["status"] == "error" and case["stage"] == "export"
    assert first["message"] == said
    assert second["message"] == f"the same failure as in case {first['id']}: {said}"


def test_an_error_in_the_users_forward_names_their_line(
        write_spec: Callable[[str], Path], run_cli: Callable[..., Any]) -> None:
    spec = write_spec("""
        version: 1
        models:
          - name: bad
            torch: models.py:make_out_of_range
            onnx: bad.onnx
            datasets: [random]
            inputs: {x: {shape: [batch, 3]}}
    """)
    _linear_onnx(spec.parent / "bad.onnx")
    _, _, _, report = run_cli(spec)
    (case,) = report["cases"]
    assert case["status"] == "error" and case["stage"] == "run"
    line = _line_of(FIXTURES / "models.py", "return self.embed(x.long() + 10)")
    assert case["message"].startswith("PyTorch forward() raised IndexError: index out of range")
    assert case["message"].endswith(f"(at models.py:{line}, in forward)")


@pytest.mark.slow
def test_an_opset_the_exporter_cannot_write_names_the_node_and_the_fixes(
        write_spec: Callable[[str], Path], run_cli: Callable[..., Any]) -> None:
    """torch 2.13's dynamo exporter writes opset 18 and cannot convert a mean over axes (a
    BatchNorm'd CNN's pooling) down to 17: the error says which node and what works."""
    spec = write_spec("""
        version: 1
        models:
          - name: cnn
            torch: models.py:make_small_cnn
            inputs: {image: {shape: [batch, 3, 8, 8]}}
            opsets: [17]
    """)
    _, _, _, report = run_cli(spec)
    (case,) = report["cases"]
    assert case["status"] == "error" and case["stage"] == "export"
    message = case["message"]
    assert message.startswith("asked for opset 17, the dynamo exporter produced opset 18")
    assert "ReduceMean '" in message and "(redefined in opset 18)" in message
    assert message.endswith("use opset 18 or newer, or exporter: torchscript, which writes "
                            "opset 17 directly")


def _line_of(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def _linear_onnx(path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "id",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(path))


def _cli(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(SOURCE)}
    return subprocess.run([sys.executable, "-m", "onnx_parity", "run", *args], cwd=folder,
                          env=env, capture_output=True, text=True, timeout=300, check=False)


def test_verbose_shows_each_stage_of_each_case_from_the_workers(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "models.py", tmp_path / "models.py")
    (tmp_path / "parity.yaml").write_text(textwrap.dedent("""\
        version: 1
        models:
          - {name: lin, torch: models.py:make_linear, inputs: {x: {shape: [batch, 4]}},
             exporter: torchscript}
        """))
    done = _cli(tmp_path, "parity.yaml", "-v")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("lin[")]
    stages = [line.split(": ", 1)[1] for line in lines]
    assert stages[0] == "loading the model" and "exporting" in stages
    assert stages[-1] == "comparing"
    assert all(line.startswith("lin[opset18-cpu-random-b1]: ") for line in lines)


def test_exporter_noise_stays_off_the_console_and_is_kept_with_artifacts(tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "models.py", tmp_path / "models.py")
    (tmp_path / "parity.yaml").write_text(textwrap.dedent("""\
        version: 1
        models:
          - {name: noisy, torch: models.py:make_noisy_export, inputs: {x: {shape: [batch, 4]}},
             exporter: torchscript}
        """))
    done = _cli(tmp_path, "parity.yaml", "--artifacts", "bundles", "--json", "report.json")
    assert done.returncode == 1
    assert "Torch IR graph" not in done.stdout + done.stderr
    assert "native noise" not in done.stdout + done.stderr
    (case,) = json.loads((tmp_path / "report.json").read_text())["cases"]
    assert case["stage"] == "export" and "this op cannot be traced" in case["message"]
    kept = tmp_path / case["details"]["export_log"]  # where --artifacts said, as it said it
    log = kept.read_text()
    assert log.count("Torch IR graph at exception") == 200 and "native noise" in log
    assert kept.parent.parent == tmp_path / "bundles"


# -- recorded outputs that are not one tensor ----------------------------------------------


def _zipmap(folder: Path, probability: list[dict[Any, float]], label: list[int]) -> None:
    """scikit-learn's classifier shape: a label tensor and ZipMap's sequence of maps, keyed by
    class index or, as skl2onnx writes a classifier of string labels, by class name."""
    named = isinstance(next(iter(probability[0])), str)
    seq_map = helper.make_sequence_type_proto(helper.make_map_type_proto(
        TensorProto.STRING if named else TensorProto.INT64,
        helper.make_tensor_type_proto(TensorProto.FLOAT, [])))
    labels = ({"classlabels_strings": ["setosa", "versicolor", "virginica"]} if named
              else {"classlabels_int64s": [0, 1, 2]})
    graph = helper.make_graph(
        [helper.make_node("ArgMax", ["x"], ["output_label"], axis=1, keepdims=0),
         helper.make_node("ZipMap", ["x"], ["output_probability"], domain="ai.onnx.ml",
                          **labels)], "classifier",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("output_label", TensorProto.INT64, ["N"]),
         helper.make_value_info("output_probability", seq_map)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                      helper.make_opsetid("ai.onnx.ml", 3)],
                                ir_version=8), str(folder / "classifier.onnx"))
    data = folder / "data" / "test_data_set_0"
    data.mkdir(parents=True)
    x = np.array([[0.1, 0.7, 0.2], [0.5, 0.3, 0.2]], np.float32)
    (data / "input_0.pb").write_bytes(numpy_helper.from_array(x, "x").SerializeToString())
    (data / "output_0.pb").write_bytes(numpy_helper.from_array(
        np.array(label, np.int64), "output_label").SerializeToString())
    if named:  # numpy_helper takes no string keys: the MapProto as skl2onnx's runtime has it
        maps = []
        for row in probability:
            entry = onnx.MapProto(key_type=TensorProto.STRING)
            entry.string_keys.extend(key.encode() for key in row)
            entry.values.CopyFrom(numpy_helper.from_list(
                [np.array(v, np.float32) for v in row.values()]))
            maps.append(entry)
        sequence = onnx.SequenceProto(name="output_probability",
                                      elem_type=onnx.SequenceProto.MAP)
        sequence.map_values.extend(maps)
        (data / "output_1.pb").write_bytes(sequence.SerializeToString())
        return
    (data / "output_1.pb").write_bytes(numpy_helper.from_list(
        [{k: np.float32(v) for k, v in row.items()} for row in probability],
        "output_probability").SerializeToString())


SKLEARN = """
    version: 1
    datasets: {recorded: {kind: onnx-test-data, path: data}}
    models:
      - {name: classifier, onnx: classifier.onnx, datasets: [recorded]}
"""


def test_a_zipmap_sequence_of_maps_is_compared_element_by_element(
        write_spec: Callable[[str], Path], run_cli: Callable[..., Any]) -> None:
    spec = write_spec(SKLEARN)
    _zipmap(spec.parent, [{0: 0.1, 1: 0.7, 2: 0.2}, {0: 0.5, 1: 0.3, 2: 0.2}], [1, 0])
    code, out, _, report = run_cli(spec)
    assert code == 0, out
    assert [o["name"] for o in report["cases"][0]["outputs"]] == [
        "output_label", "output_probability"]


def test_string_labels_recorded_as_bytes_are_the_same_labels_as_text(
        write_spec: Callable[[str], Path], run_cli: Callable[..., Any]) -> None:
    """ONNX test data keeps a map's string keys as bytes; ONNX Runtime gives str. A label is
    the same text however it was recorded: the values decide, here and when they drift."""
    from onnx_parity.prepare.inputs import read_value

    spec = write_spec(SKLEARN)
    rows = [{"setosa": 0.1, "versicolor": 0.7, "virginica": 0.2},
            {"setosa": 0.5, "versicolor": 0.3, "virginica": 0.2}]
    _zipmap(spec.parent, rows, [1, 0])
    recorded = read_value(spec.parent / "data" / "test_data_set_0" / "output_1.pb",
                          "seq(map(string,tensor(float)))")
    assert isinstance(next(iter(recorded[0])), bytes)  # as recorded: b'setosa'
    code, out, _, report = run_cli(spec)
    assert code == 0, out
    shutil.rmtree(spec.parent / "data")
    _zipmap(spec.parent, [rows[0], {**rows[1], "versicolor": 0.25}], [1, 0])
    _, _, _, report = run_cli(spec)
    probability = report["cases"][0]["outputs"][1]
    assert not probability["passed"]
    assert probability["message"].endswith("worst element at output_probability[1]['versicolor']")


def test_a_drifted_probability_is_named_by_its_path_and_a_missing_key_refused(
        write_spec: Callable[[str], Path], run_cli: Callable[..., Any], tmp_path: Path) -> None:
    spec = write_spec(SKLEARN)
    _zipmap(spec.parent, [{0: 0.1, 1: 0.7, 2: 0.2}, {0: 0.5, 1: 0.25, 2: 0.2}], [1, 0])
    _, _, _, report = run_cli(spec)
    probability = report["cases"][0]["outputs"][1]
    assert not probability["passed"] and probability["required_atol"] is not None
    assert probability["message"].endswith("worst element at output_probability[1][1]")
    shutil.rmtree(spec.parent / "data")
    _zipmap(spec.parent, [{0: 0.1, 1: 0.7}, {0: 0.5, 1: 0.3}], [1, 0])
    _, _, _, report = run_cli(spec)
    assert report["cases"][0]["outputs"][1]["message"] == (
        "output_probability: structure differs in sample 0: at [0]: expected the keys 0, 1, got "
        "0, 1, 2")


def test_an_output_can_be_left_out_and_a_missing_one_is_named(
        write_spec: Callable[[str], Path], run_cli: Callable[..., Any]) -> None:
    spec = write_spec(SKLEARN)
    _zipmap(spec.parent, [{0: 0.1, 1: 0.7, 2: 0.2}, {0: 0.5, 1: 0.3, 2: 0.2}], [1, 0])
    (spec.parent / "data" / "test_data_set_0" / "output_1.pb").unlink()
    _, _, _, report = run_cli(spec)
    (case,) = report["cases"]
    assert case["status"] == "error" and case["message"] == (
        "dataset 'recorded' holds 1 output_N.pb files for the model's 2 outputs (output_label, "
        "output_probability): output_1.pb (output_probability) missing")
    spec.write_text(spec.read_text().replace(
        "datasets: [recorded]}", "datasets: [recorded], ignore_outputs: [output_probability]}"))
    code, _, _, report = run_cli(spec)
    (case,) = report["cases"]
    assert code == 0 and case["status"] == "passed"
    assert [o["name"] for o in case["outputs"]] == ["output_label"]
    assert case["details"]["not_compared"] == ["output_probability"]
    assert "not compared (ignore_outputs): output_probability" in case["notes"]
