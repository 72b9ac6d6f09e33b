"""Rollouts: a streaming GRU whose state ([layers, batch, hidden]) is fed back over 20 steps,
each side from its own outputs; the shipped file with one recurrent weight nudged fails at the
first step past the tolerance, with the growth said; the spec's rollout checks."""

from __future__ import annotations

import json
import math
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from helpers import ROOT
from onnx_parity.compare.outputs import compare_case
from onnx_parity.compare.stepwise import growth_phrase, judge_rollout, sparkline
from onnx_parity.errors import SpecError
from onnx_parity.results import Tolerance
from onnx_parity.spec import load_spec

EXAMPLES = ROOT / "examples"


def test_a_stream_passes_every_step(run_cli: Callable[..., Any]) -> None:
    code, out, _, report = run_cli(EXAMPLES / "stream.yaml")
    assert code == 0, out
    (case,) = report["cases"]
    assert case["id"] == "stream-gru[opset18-cpu-random-b1]"  # the case id as ever
    assert any(n.startswith("rollout: 20 steps") for n in case["notes"])
    rollout = case["details"]["rollout"]
    assert rollout["steps"] == 20 and rollout["first_failing"] is None
    assert [s["step"] for s in rollout["per_step"]] == list(range(1, 21))
    assert all(s["passed"] and set(s["max_abs"]) == {"scores", "state_next"}
               for s in rollout["per_step"])
    assert "within tolerance at all 20 steps" in case["message"]


def _first_crossing(atol: float) -> tuple[int, list[float]]:
    """The nudged file's rollout run by hand: each side its own state, every step's largest
    error over both outputs and samples; the first step past atol (1-based)."""
    import onnxruntime as ort
    import torch

    sys.path.insert(0, str(EXAMPLES))
    try:
        from models import make_stream
    finally:
        sys.path.remove(str(EXAMPLES))
    from onnx_parity.prepare.inputs import random_samples
    from onnx_parity.spec.model import DatasetSpec, InputSpec

    module = make_stream().eval()
    session = ort.InferenceSession(str(EXAMPLES / "artifacts" / "stream_drift.onnx"))
    inputs = (InputSpec("frames", (3, "batch", 4)), InputSpec("state", (2, "batch", 8)))
    dataset = DatasetSpec(name="stream", kind="random", seed=3, samples=2, batch_sizes=(1,))
    errors = [0.0] * 20
    for sample in random_samples(dataset, 1, inputs, {}):
        frames, mine, theirs = (sample.inputs["frames"], sample.inputs["state"],
                                sample.inputs["state"])
        for step in range(20):
            with torch.no_grad():
                scores, state = module(torch.from_numpy(frames), torch.from_numpy(mine))
            got_scores, theirs = session.run(None, {"frames": frames, "state": theirs})
            mine = state.numpy()
            errors[step] = max(errors[step], float(np.abs(got_scores - scores.numpy()).max()),
                               float(np.abs(theirs - mine).max()))
    return next(k + 1 for k, e in enumerate(errors) if e > atol), errors


def test_a_nudged_recurrent_weight_fails_where_the_drift_crosses(
        run_cli: Callable[..., Any], tmp_path: Path) -> None:
    import onnx
    from onnx import numpy_helper

    # The shipped file differs from an export of its module in one recurrent weight only.
    model = onnx.load(str(EXAMPLES / "artifacts" / "stream_drift.onnx"))
    gru = next(n for n in model.graph.node if n.op_type == "GRU")
    recurrent = numpy_helper.to_array(next(i for i in model.graph.initializer
                                           if i.name == gru.input[2]))
    assert recurrent.shape == (1, 24, 8)
    shutil.copy(EXAMPLES / "models.py", tmp_path / "models.py")
    shutil.copy(EXAMPLES / "artifacts" / "stream_drift.onnx", tmp_path)
    spec = tmp_path / "parity.yaml"  # faulty.yaml's stream-drift, alone
    spec.write_text("""version: 1
datasets:
  stream: {kind: random, seed: 3, samples: 2, batch_sizes: [1]}
models:
  - name: stream-drift
    onnx: stream_drift.onnx
    torch: models.py:make_stream
    inputs: {frames: [3, batch, 4], state: [2, batch, 8]}
    outputs: [scores, state_next]
    datasets: [stream]
    rollout: {steps: 20, feedback: {state_next: state}}
    tolerance: {atol: 1.5e-5, rtol: 0.0}
""")
    junit, summary = tmp_path / "report.xml", tmp_path / "summary.md"
    code, out, _, report = run_cli(spec, "--junit", str(junit), "--summary", str(summary))
    assert code == 1, out
    (case,) = report["cases"]
    # Latency per step, both sides, in the JSON, the JUnit and the summary.
    latency = case["details"]["latency"]
    assert latency["per"] == "step" and latency["onnxruntime"]["median_ms"] > 0
    assert latency["pytorch"]["median_ms"] > 0 and latency["ratio"] > 0
    assert '<property name="latency.per" value="step" />' in junit.read_text()
    assert '<property name="latency.pytorch_ms"' in junit.read_text()
    assert "| stream-drift (per step) | cpu |" in summary.read_text()
    # Its effective settings, as the spec resolved them, and where its tolerance is set.
    assert (case["line"], case["tolerance_line"]) == (5, 12)
    assert case["settings"]["tolerance"] == "atol 1.5e-5 + rtol 0·|e|"
    assert case["settings"]["precision"] == "fp32"
    assert json.loads(case["settings"]["dataset"]) == {
        "kind": "random", "seed": 3, "samples": 2, "batch_sizes": [1],
        "distribution": "normal"}
    step, errors = _first_crossing(1.5e-5)
    assert step > 1  # one call alone stays within the tolerance
    assert case["status"] == "failed"
    assert case["message"].startswith(f"step {step} of 20: ")
    assert " per step from step " in case["message"]
    rollout = case["details"]["rollout"]
    assert rollout["first_failing"] == step and rollout["growth"] > 1
    measured = [max(s["max_abs"].values()) for s in rollout["per_step"]]
    assert measured == pytest.approx(errors, rel=1e-6, abs=1e-9)
    assert any("drift accumulated" in n for n in case["notes"])


def _step(max_abs: float, atol: float = 1e-4) -> tuple[Any, ...]:
    expected = np.ones((2, 3), dtype=np.float32)
    actual = expected + np.float32(max_abs)
    return compare_case(["h"], [[expected]], [[actual]], lambda _: Tolerance(atol, 0.0))


def test_growth_is_the_geometric_mean_of_the_ratios_above_the_floor() -> None:
    # The floor is 16 float32 ulps at the output's scale (1.0): 1e-6 is noise, 1e-5 is not.
    steps = [_step(v) for v in (0.0, 1e-6, 1e-5, 2e-5, 4e-5, 8e-5, 1.6e-4, 3.2e-4)]
    record = judge_rollout(steps, {"h": "h0"})
    assert record.first_failing == 7 and record.output == "h" and record.judged == 7
    assert record.growth_from == 3 and record.growth == pytest.approx(2.0, rel=1e-2)
    assert not record.per_step[6].passed and record.per_step[6].failing == ("h",)
    assert sparkline([0.0, 1.0, 2.0, 4.0, 8.0]) == "▁▁▂▄█"


def _spec(tmp_path: Path, rollout: str, outputs: str = "[y, h_out]") -> Path:
    shutil.copy(EXAMPLES / "models.py", tmp_path / "models.py")
    path = tmp_path / "parity.yaml"
    path.write_text(f"""version: 1
models:
  - name: stream
    torch: models.py:make_stream
    inputs: {{frames: [3, batch, 4], state: [2, batch, 8]}}
    outputs: {outputs}
    rollout: {rollout}
""")
    return path


@pytest.mark.parametrize(("rollout", "said"), [
    ("{steps: 0, feedback: {h_out: state}}", "steps"),
    ("{steps: 3, feedback: {h_outt: state}}", "output 'h_outt', which is not among its outputs"),
    ("{steps: 3, feedback: {h_out: stat}}", "input 'stat', which is not among its inputs"),
    ("{steps: 3, feedback: {h_out: state, y: state}}", "feeds input 'state' twice"),
    ("{steps: 3}", "a rollout needs 'feedback'"),
])
def test_rollout_spec_errors_name_the_line_and_key(tmp_path: Path, rollout: str,
                                                   said: str) -> None:
    with pytest.raises(SpecError) as raised:
        load_spec(_spec(tmp_path, rollout))
    assert said in str(raised.value) and ":7:" in str(raised.value)


def test_a_rollout_is_read_into_the_spec(tmp_path: Path) -> None:
    model = load_spec(_spec(tmp_path, "{steps: 5, feedback: {h_out: state}}")).models[0]
    assert model.rollout is not None and model.rollout.steps == 5
    assert dict(model.rollout.feedback) == {"h_out": "state"} and model.rollout.line == 7


def test_a_non_finite_error_is_the_tallest_bar_and_not_called_float_noise() -> None:
    # An error that turned infinite at the failing step: the sparkline draws it (it used to
    # raise on inf / inf), and the growth phrase says what came before it, not "float noise".
    assert sparkline([1.0, 2.0, math.inf, math.nan]) == "▄███"
    steps = [_step(v) for v in (1e-5, 2e-5, 4e-5)] + [_step(math.inf)]
    record = judge_rollout(steps, {"h": "h0"})
    assert record.first_failing == 4 and record.growth is None
    phrase = growth_phrase(record)
    assert "float noise" not in phrase
    assert phrase.startswith("h ") and "4.0e-5 at step 3" in phrase


def test_a_rollout_over_listed_sizes_rolls_the_reference_at_each_size(
        tmp_path: Path, run_cli: Callable[..., Any]) -> None:
    # The reference's rollout was shared by dataset name and batch alone: the second size was
    # compared with the first size's PyTorch rollout.
    shutil.copy(EXAMPLES / "models.py", tmp_path / "models.py")
    spec = tmp_path / "parity.yaml"
    spec.write_text("""version: 1
datasets:
  chunks: {kind: random, samples: 1, batch_sizes: [1], dims: {t: [3, 5]}}
models:
  - name: stream
    torch: models.py:make_stream
    exporter: torchscript
    opsets: [18]
    datasets: [chunks]
    inputs: {frames: [t, batch, 4], state: [2, batch, 8]}
    outputs: [scores, state_next]
    rollout: {steps: 3, feedback: {state_next: state}}
    tolerance: {atol: 1.0e-4, rtol: 0.0}
""")
    code, out, _, report = run_cli(spec)
    cases = {c["id"]: c for c in report["cases"]}
    assert code == 0, out
    assert [c["status"] for c in cases.values()] == ["passed", "passed"]
    assert set(cases) == {"stream[opset18-cpu-chunks-b1-t3]", "stream[opset18-cpu-chunks-b1-t5]"}


DETECTING_STREAM = '''
import torch
from torch import nn


class Tracker(nn.Module):
    """Two boxes whose corners move with the state, their order flipped between the sides'
    compare (the reference lists them one way, the export the other), and the state fed back."""

    def forward(self, x, state):
        state_next = 0.5 * state + x
        shift = state_next.sum()
        boxes = torch.stack([torch.stack([shift, shift, shift + 2.0, shift + 2.0]),
                             torch.stack([shift, shift, shift + 1.0, shift + 1.0])])
        if torch.onnx.is_in_onnx_export():
            boxes = boxes.flip(0)
            return boxes, torch.tensor([0.5, 0.9]), state_next
        return boxes, torch.tensor([0.9, 0.5]), state_next


def make_tracker():
    return Tracker()
'''


def test_a_rollout_compares_detections_as_sets_at_every_step(
        tmp_path: Path, run_cli: Callable[..., Any]) -> None:
    # compare: detections was left out of a rollout's comparisons: the same two boxes listed
    # in another order failed at step 1 as tensors.
    (tmp_path / "tracker.py").write_text(DETECTING_STREAM)
    spec = tmp_path / "parity.yaml"
    spec.write_text("""version: 1
datasets:
  one: {kind: random, samples: 1, batch_sizes: [1]}
models:
  - name: tracker
    torch: tracker.py:make_tracker
    exporter: torchscript
    opsets: [18]
    datasets: [one]
    inputs: {x: [1, 2], state: [1, 2]}
    outputs: [boxes, scores, state_next]
    rollout: {steps: 3, feedback: {state_next: state}}
    compare: {detections: {boxes: boxes, scores: scores}}
""")
    _, _, _, report = run_cli(spec)
    (case,) = report["cases"]
    assert case["status"] == "passed", case["message"]
    assert all(o.get("matching", {}).get("matched") == 2
               for o in case["outputs"] if o["name"] == "boxes")


def test_a_rollout_keeps_the_tensors_of_few_steps_and_the_judged_one_among_them() -> None:
    from onnx_parity.run.lockstep import KEPT_BEFORE, Seen

    errors = [1e-6 * (k % 7) for k in range(40)] + [5e-4] + [1e-3] * 59  # fails at step 41
    steps = [_step(e) for e in errors]
    seen = Seen(keep=KEPT_BEFORE)
    most = 0
    for k, found in enumerate(steps):
        seen.add(k, ((), [[k]]), found)
        most = max(most, len(seen.kept))
    judged = judge_rollout(steps, {"h": "h0"})
    assert judged.judged == 41
    assert sorted(seen.kept) == [38, 39, 40]  # the failing step and the 2 before it
    assert most <= KEPT_BEFORE + 2 and seen.step(40) == ((), [[40]])
    passing = Seen(keep=KEPT_BEFORE)  # none fails: the step nearest its tolerance is kept
    for k, found in enumerate(steps[:40]):
        passing.add(k, ((), [[k]]), found)
    step = (judge_rollout(steps[:40], {}).judged or 0) - 1
    assert list(passing.kept) == [step] and passing.step(step) == ((), [[step]])
