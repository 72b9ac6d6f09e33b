"""Many small ONNX-only models: reports valid while the run goes on and after SIGTERM, batches
that keep a crash to its own model, and recorded data of every type ONNX Runtime takes."""

from __future__ import annotations

import gc
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnx_parity
from onnx_parity.backends.timing import FEW_REPEATS
from onnx_parity.cli.run import NOT_RUN
from onnx_parity.explain.bundle import write_test_data
from onnx_parity.report.live import LiveReports
from onnx_parity.results import CaseResult, RunReport
from onnx_parity.run.protocol import WorkerTask
from onnx_parity.run.scheduler import _collector_eased, batches

SOURCE = Path(onnx_parity.__file__).resolve().parent.parent
OPS = ("Relu", "Neg", "Abs", "Sigmoid", "Tanh", "Exp")


def _one_node(folder: Path, op: str, seed: int) -> None:
    """A one-node model and one recorded data set, as the ONNX node tests ship them."""
    folder.mkdir(parents=True)
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"])], op,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(folder / "model.onnx"))
    x = np.random.default_rng(seed).standard_normal((2, 3)).astype(np.float32)
    y = {"Relu": np.maximum(x, 0), "Neg": -x, "Abs": np.abs(x), "Sigmoid": 1 / (1 + np.exp(-x)),
         "Tanh": np.tanh(x), "Exp": np.exp(x)}[op].astype(np.float32)
    write_test_data(folder, [{"x": x}], [[y]], ["y"])


def _endless(folder: Path) -> None:
    """A Loop that would run for hours: the run is still going while the test reads it."""
    folder.mkdir(parents=True)
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond"], ["cond_out"]),
         helper.make_node("Add", ["x", "one"], ["x_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x_out", TensorProto.FLOAT, [1])],
        [numpy_helper.from_array(np.ones(1, np.float32), "one")])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "keep", "x"], ["y"], body=body)], "endless",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        [numpy_helper.from_array(np.array(10**15, np.int64), "trips"),
         numpy_helper.from_array(np.array(True), "keep")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(folder / "model.onnx"))
    write_test_data(folder, [{"x": np.zeros(1, np.float32)}], [[np.zeros(1, np.float32)]], ["y"])


def _suite(tmp_path: Path, count: int, endless: bool = False) -> Path:
    """A spec of `count` one-node models, each with its recorded data; then the endless one."""
    names = [f"node{n:03d}" for n in range(count)]
    for n, name in enumerate(names):
        _one_node(tmp_path / name, OPS[n % len(OPS)], n)
    if endless:
        _endless(tmp_path / "endless")
        names.append("endless")
    lines = ["version: 1", "datasets:"]
    lines += [f"  {n}: {{kind: onnx-test-data, path: {n}}}" for n in names]
    lines.append("models:")
    lines += [f"  - {{name: {n}, onnx: {n}/model.onnx, datasets: [{n}]}}" for n in names]
    spec = tmp_path / "parity.yaml"
    spec.write_text("\n".join(lines) + "\n")
    return spec


def _start(spec: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    environment = {**os.environ, "PYTHONPATH": str(SOURCE), **(env or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "onnx_parity", "run", str(spec), "--json", "report.json",
         "--junit", "junit.xml", "--jobs", "2", *args],
        cwd=spec.parent, env=environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)


@pytest.mark.slow
def test_hundreds_of_models_with_reports_valid_mid_run_and_after_sigterm(tmp_path: Path) -> None:
    spec = _suite(tmp_path, 300, endless=True)
    process = _start(spec)
    report, junit = tmp_path / "report.json", tmp_path / "junit.xml"
    seen = in_junit = 0
    try:
        deadline = time.monotonic() + 120  # a hang guard, not a timing: the docs hold numbers
        while min(seen, in_junit) < 300 and time.monotonic() < deadline:
            time.sleep(0.2)
            if report.exists() and junit.exists():
                # Each file is whole and valid whenever it exists (one may be a write ahead),
                # and holds every planned case: those not ended yet say so, as errors.
                data = json.loads(report.read_text())
                assert len(data["cases"]) == 301 and data["complete"] is False
                seen = sum(c["message"] != NOT_RUN for c in data["cases"])
                cases = list(ET.parse(junit).getroot().iter("testcase"))
                assert len(cases) == 301
                in_junit = sum(NOT_RUN not in ET.tostring(c, encoding="unicode") for c in cases)
        assert (seen, in_junit) == (300, 300), f"only {seen} and {in_junit} of 300 in time"
        assert process.poll() is None  # the endless model is still running
    finally:
        process.send_signal(signal.SIGTERM)  # also when an assertion failed: no run outlives it
    _, err = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM, err
    data = json.loads(report.read_text())
    statuses = {case["model"]: case["status"] for case in data["cases"]}
    assert len(statuses) == 301 and statuses.pop("endless") == "skipped"
    assert set(statuses.values()) == {"passed"}
    assert ET.parse(junit).getroot().get("tests") == "301"


def test_a_crash_in_a_batch_fails_only_its_own_model(tmp_path: Path) -> None:
    spec = _suite(tmp_path, 12)
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    # A custom op that segfaults, faked: creating a session for node005 kills the worker. The
    # patch waits for onnxruntime's import, which only workers make: the first, forked from
    # the run's process (which never imports it), and the spawned one that replaces it.
    (hooks / "sitecustomize.py").write_text(textwrap.dedent("""\
        import ctypes, importlib.util, sys
        class Patch:
            def find_spec(self, name, path=None, target=None):
                if name != "onnxruntime":
                    return None
                sys.meta_path.remove(self)
                spec = importlib.util.find_spec(name)
                run = spec.loader.exec_module
                def exec_module(module):
                    run(module)
                    real = module.InferenceSession.__init__
                    def init(self, model, *args, **kwargs):
                        if "node005" in str(model):
                            ctypes.string_at(0)
                        real(self, model, *args, **kwargs)
                    module.InferenceSession.__init__ = init
                spec.loader.exec_module = exec_module
                return spec
        sys.meta_path.insert(0, Patch())
        """))
    process = _start(spec, "--jobs", "1", env={
        "PYTHONPATH": os.pathsep.join([str(hooks), str(SOURCE)])})
    _, err = process.communicate(timeout=120)
    assert process.returncode == 1, err
    cases = {c["model"]: c for c in json.loads((tmp_path / "report.json").read_text())["cases"]}
    crashed = cases.pop("node005")
    assert crashed["status"] == "error" and crashed["stage"] == "run"
    assert crashed["message"].startswith("The worker crashed with SIGSEGV in stage run: Fatal "
                                         "Python error: Segmentation fault")
    assert {c["status"] for c in cases.values()} == {"passed"} and len(cases) == 11


def test_small_onnx_only_models_share_batches_and_torch_models_go_alone() -> None:
    def task(name: str, torch: bool) -> WorkerTask:
        from onnx_parity.spec import ModelSpec

        return WorkerTask(Path("."), ModelSpec(name, 1, torch="m.py:f" if torch else None),
                          (), Path("."))

    tasks = [task(f"o{n}", False) for n in range(20)] + [task("t", True)] + [task("z", False)]
    found = batches(tasks, jobs=2)
    # an eighth of the 21, 20, ... ONNX-only models left (2 workers, 4 batches each), then one
    assert [len(b) for b in found] == [2, 2, 2] + [1] * 14 + [1, 1]
    assert found[-2][0].model.name == "t"
    assert [t.model.name for b in found for t in b] == [t.model.name for t in tasks]
    sizes = [len(b) for b in batches([task(f"o{n}", False) for n in range(1884)], jobs=2)]
    assert sizes[0] == 64 and sizes[-8:] == [1] * 8 and sizes == sorted(sizes, reverse=True)


def test_live_reports_cost_constant_time_per_case() -> None:
    now = [0.0]
    written: list[int] = []

    def make(results: Any) -> RunReport:
        return RunReport("s.yaml", {}, tuple(results))

    def write(report: RunReport) -> None:
        written.append(len(report.cases))
        now[0] += 0.5  # a write that takes half a second

    live = LiveReports(write, make, interval=2.0, clock=lambda: now[0])
    for n in range(1000):
        live.add(CaseResult(f"c{n}", "m", None, None, "cpu", "d", None, "passed"))
        now[0] += 0.01
    live.flush()
    # The first write once 2 s have passed (the 201st case); then a write at most every
    # max(2 s, ten times its cost).
    assert written[0] == 201 and written[-1] == 1000
    assert len(written) <= 1 + (10.0 + 0.5 * len(written)) / 5.0 + 1


def test_a_run_shorter_than_the_interval_writes_no_file_before_its_end() -> None:
    now = [0.0]
    written: list[int] = []
    live = LiveReports(lambda report: written.append(len(report.cases)),
                       lambda results: RunReport("s.yaml", {}, tuple(results)),
                       interval=2.0, clock=lambda: now[0])
    for n in range(100):
        live.add(CaseResult(f"c{n}", "m", None, None, "cpu", "d", None, "passed"))
        now[0] += 0.01
        assert live.tick() == pytest.approx(2.0 - now[0])  # when the loop must wake for it
    assert written == []
    now[0] = 2.0  # a quiet run (one long model): the tick writes what has ended
    assert live.tick() == math.inf and written == [100]
    assert live.tick() == math.inf and written == [100]  # nothing new: no write


RECORDED = {
    "u64": (TensorProto.UINT64, np.array([2**63 + 5, 7], np.uint64)),
    "u16": (TensorProto.UINT16, np.array([[1, 65535]], np.uint16)),
    "text": (TensorProto.STRING, np.array(["naïve", "ok"], dtype=object)),
    "flag": (TensorProto.BOOL, np.array([True, False])),
    "half": (TensorProto.FLOAT16, np.array([1.5, -0.25], np.float16)),
    "scalar": (TensorProto.FLOAT, np.array(3.25, np.float32)),
}


def _identities(path: Path, data: Path, values: dict[str, tuple[int, Any]]) -> None:
    """A model that passes each input through, and one recorded data set for it."""
    graph = helper.make_graph(
        [helper.make_node("Identity", [name], [f"{name}_out"]) for name in values], "types",
        [helper.make_tensor_value_info(n, t, list(a.shape)) for n, (t, a) in values.items()],
        [helper.make_tensor_value_info(f"{n}_out", t, list(a.shape))
         for n, (t, a) in values.items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)],
                                ir_version=10), str(path))
    feeds = {name: array for name, (_, array) in values.items()}
    write_test_data(data, [feeds], [list(feeds.values())], [f"{n}_out" for n in values])


def test_recorded_data_of_every_type_passes_as_recorded(tmp_path: Path) -> None:
    _identities(tmp_path / "types.onnx", tmp_path / "data", RECORDED)
    # bfloat16 and float8 go to ONNX Runtime as raw bytes, and come back the same way.
    _identities(tmp_path / "narrow.onnx", tmp_path / "narrow", {
        "brain": (TensorProto.BFLOAT16, np.array([1.5, -2.0], ml_dtypes.bfloat16)),
        "eight": (TensorProto.FLOAT8E4M3FN, np.array([0.5, 448], ml_dtypes.float8_e4m3fn))})
    spec = tmp_path / "parity.yaml"
    spec.write_text(textwrap.dedent("""\
        version: 1
        datasets:
          recorded: {kind: onnx-test-data, path: data}
          narrow: {kind: onnx-test-data, path: narrow}
        models:
          - {name: types, onnx: types.onnx, datasets: [recorded]}
          - {name: narrow, onnx: narrow.onnx, datasets: [narrow]}
        """))
    process = _start(spec)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, out + err
    types, narrow = json.loads((tmp_path / "report.json").read_text())["cases"]
    assert types["id"] == "types[onnx-cpu-recorded]"  # as recorded: no batch size in the id
    # No latency check reads its times: the few timed calls a note needs.
    assert types["details"]["latency"]["onnxruntime"]["repeats"] == FEW_REPEATS
    dtypes = {o["name"]: o["expected_dtype"] for o in (*types["outputs"], *narrow["outputs"])}
    assert dtypes == {"u64_out": "uint64", "u16_out": "uint16", "text_out": "string",
                      "flag_out": "bool", "half_out": "float16", "scalar_out": "float32",
                      "brain_out": "bfloat16", "eight_out": "float8_e4m3fn"}
    assert all(o["passed"] for o in (*types["outputs"], *narrow["outputs"]))


def test_a_sequence_input_is_refused_with_a_message_that_says_so(tmp_path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("SequenceLength", ["seq"], ["n"])], "seq",
        [helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("n", TensorProto.INT64, [])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(tmp_path / "seq.onnx"))
    data = tmp_path / "data" / "test_data_set_0"
    data.mkdir(parents=True)
    (data / "input_0.pb").write_bytes(numpy_helper.from_list(
        [np.ones(2, np.float32)], "seq").SerializeToString())
    (data / "output_0.pb").write_bytes(numpy_helper.from_array(
        np.array(1, np.int64), "n").SerializeToString())
    spec = tmp_path / "parity.yaml"
    spec.write_text("version: 1\ndatasets: {d: {kind: onnx-test-data, path: data}}\n"
                    "models: [{name: seq, onnx: seq.onnx, datasets: [d]}]\n")
    process = _start(spec)
    process.communicate(timeout=120)
    (case,) = json.loads((tmp_path / "report.json").read_text())["cases"]
    assert case["status"] == "error" and case["message"] == (
        "input 'seq' is a sequence (seq(tensor(float))): onnx-parity feeds tensors only; "
        "sequence, map and optional inputs are not supported")


def test_a_live_write_waits_for_the_work_it_needs_made_ahead_a_piece_a_tick() -> None:
    now = [0.0]
    done: list[int] = []
    written: list[int] = []
    asked: list[int] = []

    def ahead(results: Any) -> list[Callable[[], None]]:
        asked.append(len(results))  # once a write is due, with the results so far
        left = [n for n in range(3) if n not in done]
        return [lambda n=n: done.append(n) for n in left]

    def make(results: Any) -> RunReport:
        assert done == [0, 1, 2]  # every placeholder made before the report
        return RunReport("s.yaml", {}, tuple(results))

    live = LiveReports(lambda report: written.append(len(report.cases)), make,
                       interval=2.0, clock=lambda: now[0], ahead=ahead)
    live.add(CaseResult("c0", "m", None, None, "cpu", "d", None, "passed"))
    assert live.tick() == 2.0 and asked == [] and done == []  # not due: nothing made
    now[0] = 2.0
    live.add(CaseResult("c1", "m", None, None, "cpu", "d", None, "passed"))
    assert asked == [2] and done == [] and written == []  # a result takes no piece
    assert [live.tick() for _ in range(2)] == [0.0, 0.0] and written == []
    live.add(CaseResult("c2", "m", None, None, "cpu", "d", None, "passed"))
    assert live.tick() == 0.0 and written == []  # the last piece
    assert live.tick() == math.inf and written == [3]  # all made: the write, every result
    now[0] = 4.0
    live.add(CaseResult("c3", "m", None, None, "cpu", "d", None, "passed"))
    assert asked == [2, 4] and written == [3, 4]  # nothing left to make: written at once


def test_the_cycle_collector_is_eased_while_results_come_in_and_given_back_after() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), _collector_eased():
        assert gc.get_threshold() == (10_000, 10, 10)
        assert gc.get_freeze_count() > 0  # what the process held as the run began
        raise RuntimeError("a run that ends in an exception gives them back too")
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
