"""A case resolved once (run/prepared.py): the memo is looked into while the case is resolved,
a few times for every case after a model file's first, and never after."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest

from helpers import ROOT


def _memo_steps() -> Any:
    """benchmarks/memo_steps.py, the measurement the docs quote."""
    spec = importlib.util.spec_from_file_location("memo_steps",
                                                  ROOT / "benchmarks" / "memo_steps.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("model", ["mlp", "classifier"])
def test_a_case_looks_into_the_memo_only_while_it_is_resolved(
        model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from onnx_parity.plan.cases import plan
    from onnx_parity.run.memo import ModelMemo
    from onnx_parity.run.scheduler import RunOptions, _by_model
    from onnx_parity.spec import load_spec

    monkeypatch.chdir(ROOT / "examples")
    spec = load_spec(Path(os.getcwd()) / "parity.yaml")
    options = RunOptions(work_dir=tmp_path)
    task = next(options.task(spec, m, cases) for m, cases in _by_model(plan(spec))
                if m.name == model)
    memo = ModelMemo(task)
    cases = task.cases[:4]
    looks = [_memo_steps().looks(memo, case) for case in cases]
    assert [looked.status for looked in looks] == ["passed"] * 4
    assert [looked.after for looked in looks] == [0] * 4  # the reference, the timings: resolved
    # A later case of the file, on a new batch size or dataset, looks up its file, its session
    # and its samples, once each; a file's first case makes it below the file's entry, from
    # what the model's files share (ModelMemo.files), without looking into the memo again.
    files = [(c.opset, c.exporter, c.precision) for c in cases]
    later = [looks[k].entries for k in range(len(cases)) if files[k] in files[:k]]
    assert len(later) >= 2 and max(later) <= 3, looks
    assert max(looked.entries for looked in looks) <= 3, looks
