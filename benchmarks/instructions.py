"""Instructions per model in the node suite: a worker's against the bare loop's, on one thread.

Wall and CPU time on a shared machine move with its neighbours (the 2-core machine's hypervisor
takes up to half its cycles at times), so that two runs of one tree differ by more than most
changes make. The instructions a process executes do not: valgrind's callgrind counts them.
Each side runs the node suite's models (benchmarks/nodesuite.py) in one process, once over a
few models to warm up and once more over N models after them; the count of a run over N models
less the count of a run over none, divided by N, is what a model costs, imports and warm-up
cancelled:

    python benchmarks/instructions.py [--models 300] [--src DIR ...] [--record]

onnx-parity's side is the worker's own `run_model` on each model's task, as a worker gets it
(the check, the session, the recorded data, the run, the latency timing, the comparison, the
result); the bare loop's is nodesuite.py's loop, with ONNX Runtime on one thread, as the
worker's sessions run (its default pool spins, which valgrind would count). `--src` counts
onnx-parity from each source tree given (an older checkout, say). Needs valgrind
(`apt-get install valgrind`); the counts are made one at a time, about three minutes a side
on the 2-core machine. `--record` appends a row per source tree to
benchmarks/results/instructions.csv (benchmarks/record.py).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent / "src"
sys.path.insert(0, str(HERE))

import record  # noqa: E402  (beside this file, not a package)

WARM = 20  # models run first, in both counts: the first sessions, imports made on first use

OURS = """\
import os, sys, tempfile
from pathlib import Path
folder, count = Path(sys.argv[1]), int(sys.argv[2])
os.chdir(folder)
from onnx_parity.backends import timing
from onnx_parity.plan.cases import plan
from onnx_parity.run.scheduler import RunOptions, _by_model
from onnx_parity.run.worker import run_model
from onnx_parity.spec import load_spec
# Under valgrind a call takes some fifty times as long: the latency timing's 100 ms budget
# would cut its calls short where, on the machine, five one-node calls take a fraction of it.
timing.BUDGET_SECONDS = float("inf")
spec = load_spec(Path("parity.yaml"))
options = RunOptions(work_dir=Path(tempfile.mkdtemp()))
tasks = [options.task(spec, model, cases) for model, cases in _by_model(plan(spec))]
step = max(1, (len(tasks) - {warm}) // max(count, 1))
for task in tasks[:{warm}] + tasks[{warm}::step][:count]:
    run_model(task, lambda message: None)
""".replace("{warm}", str(WARM))

BARE = """\
import sys
from pathlib import Path
sys.path.insert(0, {here})
import nodesuite
folder, count = Path(sys.argv[1]), int(sys.argv[2])
models = sorted(folder.glob("*/model.onnx"))
step = max(1, (len(models) - {warm}) // max(count, 1))
nodesuite.bare(folder, models[:{warm}] + models[{warm}::step][:count], threads=1)
""".replace("{warm}", str(WARM)).replace("{here}", repr(str(HERE)))


def counted(script: str, folder: Path, count: int, env: dict[str, str], work: Path) -> int:
    """The instructions `script` executes over `count` models (after the warm-up ones)."""
    out = work / "callgrind.out"
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                    sys.executable, "-c", script, str(folder), str(count)],
                   check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    found = re.search(r"^summary: (\d+)$", out.read_text(), re.MULTILINE)
    out.unlink()
    if found is None:
        raise SystemExit(f"callgrind wrote no summary for {script[:40]!r}")
    return int(found.group(1))


def per_model(script: str, folder: Path, count: int, env: dict[str, str], work: Path) -> float:
    # One pass outside valgrind first: it compiles what the models import (a tree without its
    # bytecode would otherwise compile, in the longer count alone, the modules only its later
    # models use), and fills the file cache.
    subprocess.run([sys.executable, "-c", script, str(folder), str(count)], check=True,
                   env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return (counted(script, folder, count, env, work)
            - counted(script, folder, 0, env, work)) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=int, default=300, help="models counted after the warm-up")
    parser.add_argument("--src", type=Path, nargs="*", default=[SOURCE],
                        help="onnx-parity source trees to count")
    parser.add_argument("--record", action="store_true",
                        help="append a row per tree to benchmarks/results/instructions.csv")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed here (apt-get install valgrind)")
    # numpy's BLAS on one thread, as a worker's; one hash seed, so that two counts of one tree
    # on one generated suite agree (to 0.02%, one after the other: counts made side by side do
    # not, as valgrind's slowed clock then reaches what a clock decides). Each run generates
    # the suite afresh, with onnx's own random data: compare trees within one run (--src).
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        folder = work / "nodes"
        subprocess.run([sys.executable, str(HERE / "nodesuite.py"), "generate", str(folder)],
                       check=True, capture_output=True)
        bare = per_model(BARE, folder, args.models, env, work)
        print(f"node suite, {args.models} models after {WARM} to warm up, instructions a model")
        print(f"  {'bare loop (one thread)':<44}{bare / 1e6:8.2f} million")
        for src in args.src:
            ours = per_model(OURS, folder, args.models, {**env, "PYTHONPATH": str(src)}, work)
            label = "onnx-parity worker" + ("" if src == SOURCE else f" ({src})")
            print(f"  {label:<44}{ours / 1e6:8.2f} million  ({ours / bare:.2f} x the bare loop)")
            if args.record:
                path = record.append(
                    "instructions", {"models": args.models, "warm_up": WARM,
                                     "bare_million": bare / 1e6, "worker_million": ours / 1e6,
                                     "ratio": ours / bare},
                    note="" if src == SOURCE else f"--src {src}", tree=src)
                print(f"  recorded in {path.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
