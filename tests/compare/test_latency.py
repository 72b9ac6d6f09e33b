"""Latency beside accuracy, from real runs: each side's time per call in the JSON report, the
job summary and the JUnit properties; the latency check against a baseline fails a shipped
model made slower on purpose (same numbers, a heavy MatMul chain added times 0) and never an
unchanged one over repeated runs."""

from __future__ import annotations

import json
import shutil
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from helpers import FIXTURES
from onnx_parity.backends.timing import BUDGET_SECONDS, MAX_REPEATS, costliest_nodes
from onnx_parity.cli.main import main
from onnx_parity.compare.latency import FLOOR_MS, judge, notes
from onnx_parity.findings import CallTimes, LatencyRecord

SIDE = 384  # the heavy chain's matrices: 4 products of 384x384, ~10 ms on one core


def _models(folder: Path) -> None:
    """fast.onnx, make_linear exported; slow.onnx, the same plus a MatMul chain fed by the
    input whose sum is multiplied by 0 and added to the output: the same numbers, more time."""
    import numpy as np
    import onnx
    import torch
    from onnx import helper, numpy_helper

    from onnx_parity.prepare.export import export_model
    from onnx_parity.spec import InputSpec

    shutil.copy(FIXTURES / "models.py", folder / "models.py")
    torch.manual_seed(0)
    import importlib.util

    found = importlib.util.spec_from_file_location("fixture_models_latency",
                                                   FIXTURES / "models.py")
    assert found is not None and found.loader is not None
    models = importlib.util.module_from_spec(found)
    found.loader.exec_module(models)
    export_model(models.make_linear(), [torch.randn(2, 4)], [InputSpec("x", ("batch", 4))],
                 ["y"], 17, "torchscript", folder / "fast.onnx")
    model = onnx.load(str(folder / "fast.onnx"))
    graph = model.graph
    out = graph.output[0].name
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(
        (rng.standard_normal((SIDE, SIDE)) / SIDE ** 0.5).astype(np.float32), f"heavy_w{i}")
        for i in range(5)]
    zero = numpy_helper.from_array(np.zeros((), np.float32), "heavy_zero")
    graph.initializer.extend([*weights, zero])
    nodes = [helper.make_node("ReduceSum", ["x"], ["heavy_s"], keepdims=0),
             helper.make_node("Mul", ["heavy_s", "heavy_zero"], ["heavy_z"]),
             helper.make_node("Add", ["heavy_w0", "heavy_z"], ["heavy_m0"])]
    nodes += [helper.make_node("MatMul", [f"heavy_m{i}", f"heavy_w{i + 1}"], [f"heavy_m{i + 1}"])
              for i in range(4)]
    nodes += [helper.make_node("ReduceSum", ["heavy_m4"], ["heavy_sum"], keepdims=0),
              helper.make_node("Mul", ["heavy_sum", "heavy_zero"], ["heavy_nothing"])]
    for node in graph.node:  # the model's own output now feeds the final Add
        node.output[:] = [f"{out}_before" if o == out else o for o in node.output]
    nodes.append(helper.make_node("Add", [f"{out}_before", "heavy_nothing"], [out]))
    graph.node.extend(nodes)
    onnx.checker.check_model(model)
    onnx.save(model, str(folder / "slow.onnx"))


_SPEC = """\
version: 1
datasets:
  one: {kind: random, samples: 1}
defaults:
  datasets: [one]
  regression: {latency: 1.5}
models:
  - name: same
    onnx: fast.onnx
    torch: models.py:make_linear
    inputs: {x: {shape: [batch, 4]}}
    outputs: [y]
  - name: changed
    onnx: %s
    torch: models.py:make_linear
    inputs: {x: {shape: [batch, 4]}}
    outputs: [y]
"""


def _run(folder: Path, changed: str, name: str, *args: str) -> tuple[int, dict[str, Any]]:
    spec = folder / f"{name}.yaml"
    spec.write_text(textwrap.dedent(_SPEC % changed))
    report = folder / f"{name}.json"
    code = main(["run", str(spec), "--json", str(report), "--jobs", "1", *args])
    return code, json.loads(report.read_text())


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The first run, both models fast, with every report and --profile."""
    folder = tmp_path_factory.mktemp("latency")
    _models(folder)
    code, report = _run(folder, "fast.onnx", "base", "--summary", str(folder / "summary.md"),
                        "--junit", str(folder / "junit.xml"), "--profile",
                        "--artifacts", str(folder / "artifacts"))
    assert code == 0, report
    return folder, report


def _latency(report: dict[str, Any], model: str) -> dict[str, Any]:
    case = next(c for c in report["cases"] if c["model"] == model)
    return case["details"]["latency"]  # type: ignore[no-any-return]


def test_each_case_records_both_sides_in_json_summary_and_junit(
        baseline: tuple[Path, dict[str, Any]]) -> None:
    from onnx_parity.report.jsonfile import read_json

    folder, report = baseline
    latency = _latency(report, "same")
    for side in ("onnxruntime", "pytorch"):
        times = latency[side]
        assert 0 < times["q1_ms"] <= times["median_ms"] <= times["q3_ms"]
        # every call is quick: all the timed calls the latency check's spread gets
        assert times["repeats"] == MAX_REPEATS and times["device"] == "cpu"
    assert latency["ratio"] == pytest.approx(
        latency["onnxruntime"]["median_ms"] / latency["pytorch"]["median_ms"])
    # Bounded: two sides of at most BUDGET_SECONDS each, a warm-up and --profile's few calls.
    assert latency["seconds"] < 4 * BUDGET_SECONDS + 1
    nodes = latency["costliest"]
    assert nodes and all(n["provider"] == "CPUExecutionProvider" for n in nodes)
    assert Path(latency["profile"]).is_file()
    read = read_json(folder / "base.json").cases[0].details.latency
    assert read is not None and read.onnxruntime.median_ms == latency["onnxruntime"]["median_ms"]

    summary = (folder / "summary.md").read_text(encoding="utf-8")
    assert "<details><summary>Latency: median time per call</summary>" in summary
    assert "| same | cpu | " in summary and "**Costliest nodes of `same\\[" in summary
    test = next(t for t in ET.parse(folder / "junit.xml").getroot().iter("testcase")
                if t.get("name", "").startswith("same["))
    properties = {p.get("name"): p.get("value") for p in test.iter("property")}
    assert float(properties["latency.onnxruntime_ms"]) == latency["onnxruntime"]["median_ms"]
    assert float(properties["latency.ratio"]) == latency["ratio"]


def test_a_slower_model_fails_the_latency_check_and_an_unchanged_one_never_does(
        baseline: tuple[Path, dict[str, Any]]) -> None:
    folder, _ = baseline
    base = str(folder / "base.json")
    code, slowed = _run(folder, "slow.onnx", "slowed", "--baseline", base)
    assert code == 1
    changed = next(c for c in slowed["cases"] if c["model"] == "changed")
    assert changed["status"] == "failed", changed
    assert changed["message"].startswith("regression: ONNX Runtime takes"), changed["message"]
    assert all(o["passed"] for o in changed["outputs"])  # the numbers did not move
    latency = changed["details"]["latency"]
    assert latency["regressed"] and latency["onnxruntime"]["median_ms"] > 1.5 * FLOOR_MS
    runs = [slowed] + [_run(folder, "fast.onnx", f"again{i}", "--baseline", base)[1]
                       for i in range(2)]
    for run in runs:  # three runs against the baseline: the unchanged model never trips
        same = next(c for c in run["cases"] if c["model"] == "same")
        assert same["status"] == "passed", same
        assert _latency(run, "same")["regressed"] is False
    assert all(c["status"] == "passed" for c in runs[-1]["cases"])


def _times(median: float, q1: float, q3: float) -> CallTimes:
    return CallTimes(median_ms=median, q1_ms=q1, q3_ms=q3, repeats=25)


def test_growth_counts_only_beyond_the_spread_and_the_floor() -> None:
    old = LatencyRecord(_times(4.0, 3.9, 4.1))
    grown = LatencyRecord(_times(8.0, 7.0, 9.0))
    assert judge(grown, 1.5, old)[0].regressed
    assert not judge(grown, None, old)[0].regressed  # the check is off by default
    noisy = LatencyRecord(_times(8.0, 5.0, 11.0))  # the middle half reaches back to 1.2 times
    assert not judge(noisy, 1.5, old)[0].regressed
    tiny = LatencyRecord(_times(0.5, 0.5, 0.5))  # 5 times, but 0.4 ms: under the floor
    assert not judge(tiny, 1.5, LatencyRecord(_times(0.1, 0.1, 0.1)))[0].regressed


def test_the_costliest_nodes_leave_out_the_first_run() -> None:
    def node(name: str, ts: int, dur: int) -> dict[str, Any]:
        return {"cat": "Node", "name": f"{name}_kernel_time", "ts": ts, "dur": dur,
                "args": {"op_name": "MatMul", "provider": "CPUExecutionProvider"}}

    events = [{"cat": "Session", "name": "model_run", "ts": 0, "dur": 100}, node("a", 10, 90),
              {"cat": "Session", "name": "model_run", "ts": 200, "dur": 10}, node("a", 201, 2),
              node("b", 204, 5)]
    found = costliest_nodes(events)
    assert [(n.node, n.ms) for n in found] == [("b", 0.005), ("a", 0.002)]


def test_the_slower_note_names_pytorchs_device_when_it_is_not_the_targets() -> None:
    """A CUDA target whose PyTorch had no GPU was timed against PyTorch on the CPU: the note
    says so instead of "slower than PyTorch on cuda"."""
    ort = CallTimes(median_ms=9.0, q1_ms=8.5, q3_ms=9.5, repeats=25, device="cuda")
    cpu_torch = _times(3.0, 2.9, 3.1)
    (said,) = notes(LatencyRecord(ort, pytorch=cpu_torch, ratio=3.0), "cuda")
    assert said.startswith("ONNX Runtime is 3.0× slower on cuda than PyTorch on the cpu (")
    same = CallTimes(median_ms=3.0, q1_ms=2.9, q3_ms=3.1, repeats=25, device="cuda")
    (said,) = notes(LatencyRecord(ort, pytorch=same, ratio=3.0), "cuda")
    assert said.startswith("ONNX Runtime is 3.0× slower than PyTorch on cuda (")
