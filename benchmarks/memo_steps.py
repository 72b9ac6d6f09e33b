"""How often a case's flow looks into its model's memo (run/memo.py): the first 400 calls of
onnx-parity's own functions from `run_case`, counted as a profiler sees them, and how many of
those calls enter run/memo.py from outside it; and the entries after the case is resolved
(`prepare_case` returned), over the whole case. A model's first case makes its files through
the memo (the export, the check); every later case should only look up what it runs on:

    python benchmarks/memo_steps.py [--spec examples/parity.yaml] [--model mlp] [--cases 3]

Each line is one case of the model, in the order a worker runs them, on one memo: its status,
the calls counted (at most 400), the memo's entries among them, the calls the memo makes back
out of itself (a value's making, a key's hash), and the memo's entries after resolution.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from types import CodeType, FrameType
from typing import Any, NamedTuple

HERE = Path(__file__).resolve().parent
STEPS = 400


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, default=HERE.parent / "examples" / "parity.yaml")
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--cases", type=int, default=3)
    args = parser.parse_args()

    from onnx_parity.plan.cases import plan
    from onnx_parity.run.memo import ModelMemo
    from onnx_parity.run.scheduler import RunOptions, _by_model
    from onnx_parity.spec import load_spec

    spec_path = args.spec.resolve()
    os.chdir(spec_path.parent)
    spec = load_spec(spec_path)
    options = RunOptions(work_dir=Path(tempfile.mkdtemp()))
    tasks = [options.task(spec, model, cases) for model, cases in _by_model(plan(spec))]
    task = next(t for t in tasks if t.model.name == args.model)
    memo = ModelMemo(task)
    for case in task.cases[:args.cases]:
        looked = looks(memo, case)
        print(f"{case.id}: {looked.status}; {looked.calls} calls, {looked.entries} into the memo,"
              f" {looked.back} back out of it; {looked.after} into it after resolution")


class Looks(NamedTuple):
    """One case's looks into its memo: its status, the calls counted (at most STEPS), the
    memo's entries among them, the calls it makes back out of itself, and its entries after
    the case was resolved."""

    status: str
    calls: int
    entries: int
    back: int
    after: int


def looks(memo: Any, case: Any) -> Looks:
    """`case` run on `memo` under the profile hook (Counted), its looks counted."""
    import onnx_parity
    from onnx_parity.run import flow, prepared

    root = str(Path(onnx_parity.__file__).resolve().parent)
    memo_file = str(Path(root) / "run" / "memo.py")
    counted = Counted(root, memo_file, flow.run_case.__code__, prepared.prepare_case.__code__)
    sys.setprofile(counted.hook)
    try:
        result = flow.run_case(memo, case)
    finally:
        sys.setprofile(None)
    entries = sum(1 for callee, caller in counted.calls if callee == memo_file != caller)
    back = sum(1 for callee, caller in counted.calls if caller == memo_file != callee)
    return Looks(result.status, len(counted.calls), entries, back, counted.after)


class Counted:
    """A profile hook's count of one case: the package's calls from `start` on (callee's file,
    caller's file), the first STEPS of them, and the memo's entries once `resolve` returned."""

    def __init__(self, root: str, memo_file: str, start: CodeType, resolve: CodeType) -> None:
        self.root, self.memo_file, self.start, self.resolve = root, memo_file, start, resolve
        self.calls: list[tuple[str, str]] = []
        self.on = self.resolved = False
        self.after = 0

    def hook(self, frame: FrameType, event: str, arg: Any) -> None:
        code = frame.f_code
        if event == "return" and code is self.resolve:
            self.resolved = True
        if event != "call":
            return
        self.on = self.on or code is self.start
        if not self.on or not code.co_filename.startswith(self.root):
            return
        caller = frame.f_back.f_code.co_filename if frame.f_back is not None else ""
        if len(self.calls) < STEPS:
            self.calls.append((code.co_filename, caller))
        if self.resolved and code.co_filename == self.memo_file != caller:
            self.after += 1


if __name__ == "__main__":
    main()
