"""A rollout's cost per step and its memory, against a bare loop of the same steps.

The model's state grows at every step, as a decoder's key-value cache does: `present` is `past`
with one more row, fed back. onnx-parity checks it as a `rollout:` (PyTorch and ONNX Runtime
each feeding back their own state, every output compared at every step); the bare loop does the
same calls and an np.allclose per output and step, in one process, keeping nothing. Both run at
two step counts, interleaved, and the cost per step is the difference between the two over
the difference in steps, so that the fixed costs (imports, the export, the worker) cancel.

    python benchmarks/rollout.py [--steps 200 800] [--repeat 3] [--src DIR ...] [--per-step-only]

First the cost per step alone, in one process (both sides' steps, through onnx-parity's own
PyTorch call and ONNX Runtime target, and the comparison, by run/lockstep.py's loop as
run/rolled.py calls it, against the bare loop's steps), then the whole runs.

`--src` runs onnx-parity from each source tree given (an older checkout, say) side by side.
`--record` appends a row per source tree to benchmarks/results/rollout.csv (benchmarks/record.py).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent / "src"
sys.path.insert(0, str(HERE))

import record  # noqa: E402  (beside this file, not a package)

MODEL = textwrap.dedent("""\
    import torch

    class Grow(torch.nn.Module):
        \"\"\"present = past with one more row; y, a summary of it, is the next x.\"\"\"

        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.w = torch.nn.Linear(64, 64)

        def forward(self, x, past):
            present = torch.cat([past, self.w(x)], dim=1)
            return torch.tanh(present.mean(dim=1, keepdim=True)), present

    def make():
        return Grow().eval()
    """)

SPEC = textwrap.dedent("""\
    version: 1
    datasets: {{d: {{kind: random, seed: 0, samples: 1, dims: {{t: 1}}}}}}
    models:
      - name: grow
        torch: models.py:make
        exporter: torchscript
        inputs:
          x: {{shape: [batch, 1, 64]}}
          past: {{shape: [batch, t, 64]}}
        outputs: [y, present]
        datasets: [d]
        rollout: {{steps: {steps}, feedback: {{y: x, present: past}}}}
        tolerance: {{atol: 1.0e-3, rtol: 1.0e-3}}
    """)

BARE = textwrap.dedent("""\
    import sys
    import numpy as np
    import onnxruntime as ort
    import torch
    sys.path.insert(0, sys.argv[2])
    from models import make

    steps = int(sys.argv[1])
    module = make()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 1, 64)).astype(np.float32)
    past = rng.standard_normal((1, 1, 64)).astype(np.float32)
    path = sys.argv[2] + "/bare.onnx"
    torch.onnx.export(module, (torch.from_numpy(x), torch.from_numpy(past)), path,
                      input_names=["x", "past"], output_names=["y", "present"],
                      dynamic_axes={"past": {1: "t"}, "present": {1: "t"}}, dynamo=False)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    torch.set_num_threads(1)
    ok = True
    mine, theirs = (x, past), (x, past)
    for _ in range(steps):
        with torch.no_grad():
            expected = [t.numpy() for t in module(*map(torch.from_numpy, mine))]
        actual = session.run(None, {"x": theirs[0], "past": theirs[1]})
        ok = ok and all(np.allclose(a, e, rtol=1e-3, atol=1e-3) for a, e in zip(actual, expected))
        mine, theirs = tuple(expected), tuple(actual)
    print("passed" if ok else "failed")
    """)


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, float]:
    """Wall and CPU seconds and the largest resident set in MiB of one command (its
    waited-for children included: the tool's worker)."""
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = 0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command)} failed")
    return (time.perf_counter() - started, usage.ru_utime + usage.ru_stime,
            usage.ru_maxrss / 1024)


PER_STEP = textwrap.dedent("""\
    import sys, time
    import numpy as np
    import onnxruntime as ort
    import torch
    sys.path.insert(0, sys.argv[2])
    from models import make
    from onnx_parity.compare.blind import Watch, distinct_inputs
    from onnx_parity.compare.outputs import compare_case
    from onnx_parity.run.adapters.plain import Feedback
    from onnx_parity.results import Tolerance
    try:  # run/rolled.py's loop itself, and what it does after: the judged step in full
        from multiprocessing.sharedctypes import RawArray
        from onnx_parity.compare.quick import quick_judged
        from onnx_parity.run.lockstep import lockstep, steps_of
        from onnx_parity.run.protocol import Progress
        from onnx_parity.run.record import CaseRecord
    except ImportError:  # an older tree: its loop as it was, around its own functions
        lockstep = None
        from onnx_parity.run.rolled import KEPT_BEFORE, _Seen, steps_of
        try:
            from onnx_parity.compare.quick import Nearest, quick_case
        except ImportError:  # older still: every step compared in full
            Nearest = quick_case = None

    steps, repeat = int(sys.argv[1]), int(sys.argv[3])
    torch.set_num_threads(1)
    module = make()
    rng = np.random.default_rng(0)
    first = {"x": rng.standard_normal((1, 1, 64)).astype(np.float32),
             "past": rng.standard_normal((1, 1, 64)).astype(np.float32)}
    path = sys.argv[2] + "/step.onnx"
    torch.onnx.export(module, (torch.from_numpy(first["x"]), torch.from_numpy(first["past"])),
                      path, input_names=["x", "past"], output_names=["y", "present"],
                      dynamic_axes={"past": {1: "t"}, "present": {1: "t"}}, dynamo=False)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    names = ["y", "present"]

    def reference(feed):
        with torch.no_grad():
            return [t.numpy() for t in module(*(torch.from_numpy(feed[n]) for n in ("x", "past")))]

    def run(feed):
        return session.run(None, feed)

    # onnx-parity's own calls, as a run makes them: its PyTorch call and its ONNX Runtime target
    # (the same settings: the CPU, one thread), with their checks and conversions
    from pathlib import Path
    from onnx_parity.backends.pytorch import torch_outputs
    from onnx_parity.backends.target import OrtTarget
    from onnx_parity.spec import PREDEFINED_TARGETS
    target = OrtTarget(Path(path), PREDEFINED_TARGETS["cpu"], threads=1)

    def tool_reference(feed):
        return torch_outputs(module, feed)

    def bare():
        mine, theirs, ok = dict(first), dict(first), True
        for _ in range(steps):
            expected, actual = reference(mine), run(theirs)
            ok = ok and all(np.allclose(a, e, rtol=1e-3, atol=1e-3)
                            for a, e in zip(actual, expected))
            mine = {"x": expected[0], "past": expected[1]}
            theirs = {"x": actual[0], "past": actual[1]}

    def tool():  # what run/rolled.py does at every step, both sides and the comparison
        stepper = Feedback(steps, {"y": "x", "present": "past"})
        leader = (step for _, step in steps_of(stepper, [first], tool_reference, names))
        # as run/rolled.py watches: one sample, so no two samples to tell apart
        watch = Watch(distinct=distinct_inputs([first]), from_model=True, constant=frozenset())
        tolerance = lambda _: Tolerance(1e-3, 1e-3)  # noqa: E731
        if lockstep is not None:
            # a worker's record: its stage written to shared memory at every step; one case of
            # the model, so no reference kept for a next one (as run/rolled.py decides)
            record = CaseRecord(case=None, progress=Progress(RawArray("d", 4)))
            stepped = lockstep(stepper, leader, [first], target.run, names, names, tolerance,
                               watch, (None, "PyTorch"), record.enter, keep_reference=False)
            at = quick_judged(stepped.steps, stepped.quick)
            if at is not None and stepped.best.pair is not None:  # the judged step, in full
                compare_case(names, *stepped.best.pair, tolerance, watch)
            return
        seen = _Seen(keep=KEPT_BEFORE)
        best = Nearest() if Nearest is not None else None
        for k, (led, mine) in enumerate(steps_of(stepper, [first], target.run, names, leader)):
            found = quick_case(names, led[1], mine[1], tolerance, watch) if quick_case else None
            pair = None if found is None else (led[1], mine[1])
            if found is None:
                found = compare_case(names, led[1], mine[1], tolerance, watch)
            seen.add(k, mine, found)
            if best is not None:
                best.add(k, found, pair)
        if best is not None and best.pair is not None:  # the judged step, compared in full
            compare_case(names, *best.pair, tolerance, watch)

    best = {"bare": float("inf"), "tool": float("inf")}
    for _ in range(repeat):  # alternating, in one process: the machine's load hits both alike
        for name, work in (("bare", bare), ("tool", tool)):
            started = time.process_time()
            work()
            best[name] = min(best[name], time.process_time() - started)
    print(best["bare"], best["tool"])
    """)


def time_steps(steps: int, repeat: int, root: Path, env: dict[str, str]) -> dict[str, object]:
    """The per-step cost alone, in one process (no export, no worker): the steps of both sides
    and the comparison as run/rolled.py makes them, against the bare loop's, CPU seconds; its
    figures, none where the tree cannot be measured so."""
    (root / "per_step.py").write_text(PER_STEP)
    done = subprocess.run([sys.executable, "per_step.py", str(steps), str(root), str(repeat)],
                          cwd=root, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:  # an older tree, without run/rolled.py's steps_of
        print(f"  per step, in one process: not measurable from this tree "
              f"({done.stderr.strip().splitlines()[-1]})")
        return {}
    out = done.stdout
    bare, tool = map(float, out.split()[-2:])
    print(f"  per step, in one process, {steps} steps, best of {repeat} (CPU): bare loop "
          f"{bare / steps * 1e3:.3f} ms, onnx-parity's steps {tool / steps * 1e3:.3f} ms: "
          f"{tool / bare:.2f}x")
    return {"per_step_steps": steps, "per_step_bare_ms": bare / steps * 1e3,
            "per_step_ms": tool / steps * 1e3, "per_step_ratio": tool / bare}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, nargs=2, default=(200, 800))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--src", type=Path, nargs="*", default=[SOURCE])
    parser.add_argument("--per-step-only", action="store_true",
                        help="only the per-step cost in one process, not the whole runs")
    parser.add_argument("--record", action="store_true",
                        help="append a row per source tree to benchmarks/results/rollout.csv")
    args = parser.parse_args()
    figures: dict[Path, dict[str, object]] = {}
    base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start")
    with tempfile.TemporaryDirectory() as work:
        root = Path(work)
        (root / "models.py").write_text(MODEL)
        for src in args.src:
            print(f"onnx-parity from {src}")
            figures[src] = {"repeat": args.repeat, **time_steps(
                args.steps[1], args.repeat, root, {**base, "PYTHONPATH": str(src)})}
        if args.per_step_only:
            recorded(figures, args.record)
            return
        (root / "bare.py").write_text(BARE)
        for steps in args.steps:
            (root / f"spec{steps}.yaml").write_text(SPEC.format(steps=steps))
        runs: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
        commands: dict[str, tuple[list[str], dict[str, str]]] = {
            "bare loop": ([sys.executable, "bare.py"], base)}
        for src in args.src:
            commands[f"onnx-parity ({src})"] = (
                [sys.executable, "-m", "onnx_parity", "run"], {**base, "PYTHONPATH": str(src)})
        for _ in range(args.repeat):  # interleaved: drift in the machine hits all alike
            for steps in args.steps:
                for name, (command, env) in commands.items():
                    extra = [str(steps), str(root)] if name == "bare loop" else [
                        f"spec{steps}.yaml"]
                    runs.setdefault((name, steps), []).append(
                        timed(command + extra, root, env))
    low, high = args.steps
    print(f"rollout of a state growing by one row a step, {low} and {high} steps, best of "
          f"{args.repeat}")
    per_step: dict[str, tuple[float, float]] = {}
    memory: dict[str, tuple[float, float]] = {}
    for name in commands:
        best = {steps: [min(run[i] for run in runs[(name, steps)]) for i in range(3)]
                for steps in args.steps}
        wall = (best[high][0] - best[low][0]) / (high - low)
        cpu = (best[high][1] - best[low][1]) / (high - low)
        per_step[name] = (wall, cpu)
        memory[name] = (best[low][2], best[high][2])
        print(f"  {name}")
        print(f"    wall {best[low][0]:6.2f} s / {best[high][0]:6.2f} s; per step "
              f"{wall * 1e3:6.2f} ms wall, {cpu * 1e3:6.2f} ms CPU")
        print(f"    peak RSS {best[low][2]:6.0f} MiB / {best[high][2]:6.0f} MiB")
    bare = per_step["bare loop"]
    for name, (wall, cpu) in per_step.items():
        if name != "bare loop":
            print(f"  {name}: per step {wall / bare[0]:.2f}x the bare loop's wall, "
                  f"{cpu / bare[1]:.2f}x its CPU")
    for src in args.src:
        wall, cpu = per_step[f"onnx-parity ({src})"]
        figures[src] |= {
            "steps_low": low, "steps_high": high, "wall_per_step_ms": wall * 1e3,
            "cpu_per_step_ms": cpu * 1e3, "bare_wall_per_step_ms": bare[0] * 1e3,
            "bare_cpu_per_step_ms": bare[1] * 1e3, "wall_ratio": wall / bare[0],
            "cpu_ratio": cpu / bare[1],
            "rss_low_mib": memory[f"onnx-parity ({src})"][0],
            "rss_high_mib": memory[f"onnx-parity ({src})"][1],
            "bare_rss_low_mib": memory["bare loop"][0],
            "bare_rss_high_mib": memory["bare loop"][1]}
    recorded(figures, args.record)


def recorded(figures: dict[Path, dict[str, object]], wanted: bool) -> None:
    """Each source tree's row in benchmarks/results/rollout.csv, its own commit beside it."""
    if not wanted:
        return
    for src, found in figures.items():
        note = "" if src == SOURCE else f"--src {src}"
        path = record.append("rollout", found, note=note, tree=src)
        print(f"  recorded in {path.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
