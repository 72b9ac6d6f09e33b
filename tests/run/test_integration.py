"""Real architectures from transformers (in the [dev] extra; the tests skip themselves where a
user's own install lacks it). Tiny configs, random weights, nothing downloaded."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers import FIXTURES, by_id

pytestmark = pytest.mark.slow


@pytest.fixture
def hub_spec(tmp_path: Path) -> Callable[[str], Path]:
    pytest.importorskip("transformers")
    shutil.copy(FIXTURES / "hub.py", tmp_path / "hub.py")

    def write(models: str) -> Path:
        spec = tmp_path / "parity.yaml"
        spec.write_text("version: 1\nmodels:\n" + models)
        return spec

    return write


IDS = "inputs: {input_ids: {shape: [batch, 8], dtype: int64, high: 64}}"


def test_bert_outputs_are_named_as_its_model_output_names_them(
        hub_spec: Callable[[str], Path], run_cli: Callable[..., Any]) -> None:
    spec = hub_spec(f"  - {{name: bert, torch: hub.py:make_bert, {IDS}}}\n")
    code, out, _, report = run_cli(spec)
    assert code == 0, out
    (case,) = report["cases"]
    assert [o["name"] for o in case["outputs"]] == ["last_hidden_state", "pooler_output"]


def test_gpt2_passes_without_its_cache_and_says_how_when_it_returns_one(
        hub_spec: Callable[[str], Path], run_cli: Callable[..., Any]) -> None:
    spec = hub_spec(
        f"  - {{name: gpt2, torch: hub.py:make_gpt2, {IDS}, forward_args: {{use_cache: false}}}}\n"
        f"  - {{name: cached, torch: hub.py:make_gpt2, {IDS}}}\n")
    code, _, _, report = run_cli(spec)
    cases = by_id(report)
    gpt2 = cases["gpt2[opset18-cpu-random-b1]"]
    assert gpt2["status"] == "passed" and [o["name"] for o in gpt2["outputs"]] == ["logits"]
    cached = cases["cached[opset18-cpu-random-b1]"]
    assert cached["status"] == "error" and cached["stage"] == "export"
    assert "forward_args: {use_cache: false}" in cached["message"]
    assert code == 1
