"""adapter: seq2seq-lm: tiny T5, BART and Whisper exported as two files each (the encoder with
the cross-attention cache it makes; the decoder with its caches) and checked over an 8-step
greedy rollout, as examples/seq2seq.yaml does; the reference decoding as generate() does;
both transformers cache contracts; the refusals and the spec's checks."""

from __future__ import annotations

import json
from typing import Any

import pytest

from helpers import EXAMPLES, by_id

# CI runs the tests marked `adapter` against the newest transformers too (.ci/run): the
# example end to end, and those that reach into transformers' model code cheaply.
MODELS = ("tiny-t5", "tiny-bart")


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """examples/seq2seq.yaml, as its header runs it: one run for the module."""
    from onnx_parity.cli.main import main

    report = tmp_path_factory.mktemp("seq2seq") / "report.json"
    code = main(["run", str(EXAMPLES / "seq2seq.yaml"), "--json", str(report)])
    return {"code": code, "report": json.loads(report.read_text())}


@pytest.mark.adapter
def test_the_example_passes_an_8_step_greedy_rollout_for_each_model(
        example: dict[str, Any]) -> None:
    cases = by_id(example["report"])
    assert example["code"] == 0, [c["message"] for c in cases.values()]
    assert sorted(c.split("[")[0] for c in cases) == sorted(MODELS)
    for case in cases.values():
        assert case["status"] == "passed", case["message"]
        assert "within tolerance at all 8 steps" in case["message"], case["message"]
        assert "greedy tokens agree for 8 of 8 steps" in case["notes"]
        assert case["details"]["tokens"]["agreed"] == 8
        assert any(n.startswith("the encoder's output within tolerance") for n in case["notes"])
        assert [o["name"] for o in case["outputs"]] == [
            "logits", *(f"present.{i}.decoder.{p}" for i in (0, 1) for p in ("key", "value"))]
