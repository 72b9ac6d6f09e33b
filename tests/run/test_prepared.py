"""A case resolved once (run/prepared.py): the memo is looked into while the case is resolved,
a few times for every case after a model file's first, and never after."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from helpers import ROOT

STEPS = 400  # the first calls of the package's own functions from run_case


def _memo_looks(memo: Any, case: Any) -> tuple[str, int, int]:
    """The case's status, the memo's entries in its first STEPS calls, and those after
    prepare_case returned."""
    import onnx_parity
    from onnx_parity.run import flow, prepared

    root = str(Path(onnx_parity.__file__).resolve().parent)
    memo_file = str(Path(root) / "run" / "memo.py")
    calls: list[tuple[str, str]] = []
    state = {"on": False, "resolved": False, "after": 0}

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        code = frame.f_code
        if event == "return" and code is prepared.prepare_case.__code__:
            state["resolved"] = True
        if event != "call":
            return
        state["on"] = state["on"] or code is flow.run_case.__code__
        if not state["on"] or not code.co_filename.startswith(root):
            return
        caller = frame.f_back.f_code.co_filename if frame.f_back is not None else ""
        if len(calls) < STEPS:
            calls.append((code.co_filename, caller))
        if state["resolved"] and code.co_filename == memo_file != caller:
            state["after"] += 1

    sys.setprofile(hook)
    try:
        result = flow.run_case(memo, case)
    finally:
        sys.setprofile(None)
    entries = sum(1 for callee, caller in calls if callee == memo_file != caller)
    return result.status, entries, state["after"]


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
