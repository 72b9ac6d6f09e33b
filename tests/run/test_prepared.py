"""A case resolved once (run/prepared.py): the memo is looked into while the case is resolved,
a few times for every case after a model file's first, and never after."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import ROOT


def _counted() -> Any:
    """benchmarks/memo_steps.py's count of one case, the measurement the docs quote."""
    spec = importlib.util.spec_from_file_location("memo_steps",
                                                  ROOT / "benchmarks" / "memo_steps.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Counted


def _memo_looks(memo: Any, case: Any) -> tuple[str, int, int]:
    """The case's status, the memo's entries in its first 400 calls from run_case, and those
    after prepare_case returned."""
    import onnx_parity
    from onnx_parity.run import flow, prepared

    root = str(Path(onnx_parity.__file__).resolve().parent)
    memo_file = str(Path(root) / "run" / "memo.py")
    counted = _counted()(root, memo_file, flow.run_case.__code__, prepared.prepare_case.__code__)
    sys.setprofile(counted.hook)
    try:
        result = flow.run_case(memo, case)
    finally:
        sys.setprofile(None)
    entries = sum(1 for callee, caller in counted.calls if callee == memo_file != caller)
    return result.status, entries, counted.after


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
    looks = [_memo_looks(memo, case) for case in cases]
    assert [status for status, _, _ in looks] == ["passed"] * 4
    assert [after for _, _, after in looks] == [0] * 4  # the reference, the timings: resolved
    # A file's first case makes it through the memo; a later case of the file, on a new batch
    # size or dataset, looks up its file, its session and its samples, once each.
    files = [(c.opset, c.exporter, c.precision) for c in cases]
    later = [looks[k][1] for k in range(len(cases)) if files[k] in files[:k]]
    assert len(later) >= 2 and max(later) <= 3, looks
