"""A small ONNX-only check costs little more than a bare script: its first worker is forked, not
spawned, and the run's own process imports nothing the check does not use."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import onnx_parity
from helpers import ROOT
from onnx_parity.run.isolation import SECRETS

SOURCE = Path(onnx_parity.__file__).resolve().parent.parent

# What an ONNX-only run's own process must not import: the schema validator (a spec that
# conforms needs none of its messages), the regression check and the metrics (no --baseline;
# the workers compare), the machine's facts (no GPU target), the numeric stack and the models'
# runtimes (the workers' own), the spawn machinery (its first worker is forked), and a report
# no one asked for (JUnit).
KEPT_OUT = ("jsonschema", "onnx_parity.compare.baseline", "onnx_parity.compare.metrics",
            "onnx_parity.machine.facts", "numpy", "onnxruntime", "torch",
            "multiprocessing.popen_spawn_posix", "multiprocessing.resource_tracker",
            "onnx_parity.report.junit")


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/golden/head.onnx and its 3 recorded data sets, as one spec."""
    root = tmp_path_factory.mktemp("golden")
    shutil.copytree(ROOT / "examples" / "golden" / "data", root / "head")
    shutil.copy(ROOT / "examples" / "golden" / "head.onnx", root / "head" / "model.onnx")
    (root / "parity.yaml").write_text(
        "version: 1\ndatasets: {golden: {kind: onnx-test-data, path: head}}\n"
        "models: [{name: head, onnx: head/model.onnx, datasets: [golden]}]\n")
    return root


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in SECRETS and k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPATH": str(SOURCE)}


def _timed(command: list[str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU seconds of a command, its waited-for children included."""
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, env=_env(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = 0
    assert os.waitstatus_to_exitcode(status) == 0, command
    return time.perf_counter() - started, usage.ru_utime + usage.ru_stime


def test_an_onnx_only_run_forks_its_worker_and_imports_only_what_it_uses(golden: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "onnx_parity", "run", "parity.yaml",
         "--json", "report.json"],
        cwd=golden, env=_env(), capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [c["status"] for c in json.loads((golden / "report.json").read_text())["cases"]] \
        == ["passed"]
    # The worker's stderr is its log: what -X importtime printed here is the run's process.
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines()
                if line.startswith("import time:")}
    assert "onnx_parity.cli.run" in imported and "onnx_parity.run.pool" in imported
    assert sorted(imported & set(KEPT_OUT)) == []


# What the worker of an ONNX-only run must not import: the spec's reader (YAML, its wording of
# problems) and the PyTorch reference's module, the workers' share of a small check's time.
WORKER_KEPT_OUT = ("yaml", "jsonschema", "onnx_parity.spec.violations",
                   "onnx_parity.backends.pytorch", "torch", "onnx_parity.run.adapters.causal_lm",
                   "onnx_parity.run.adapters.seq2seq")


def _worker_imports(golden: Path, tmp_path: Path, spec: str = "parity.yaml",
                    *args: str) -> dict[int, set[str]]:
    """What each process other than the run's own (its workers) imported, by process id:
    written down by a finder that site imports into the run's process before anything else,
    and that a forked worker inherits (a spawned one imports it afresh)."""
    hooks, seen = tmp_path / "hooks", tmp_path / "imported.txt"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(textwrap.dedent(f"""\
        import os, sys
        RUN = os.getpid() if "RUN" not in os.environ else int(os.environ["RUN"])
        os.environ["RUN"] = str(RUN)
        class Watch:
            def find_spec(self, name, path=None, target=None):
                if os.getpid() != RUN:
                    with open({str(seen)!r}, "a") as out:
                        out.write(f"{{os.getpid()}} {{name}}\\n")
                return None
        sys.meta_path.insert(0, Watch())
        """))
    env = {**_env(), "PYTHONPATH": os.pathsep.join([str(hooks), str(SOURCE)])}
    done = subprocess.run([sys.executable, "-m", "onnx_parity", "run", spec, *args],
                          cwd=golden, env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    found: dict[int, set[str]] = {}
    for line in seen.read_text().splitlines():
        pid, name = line.split()
        found.setdefault(int(pid), set()).add(name)
    return found


def test_the_worker_of_an_onnx_only_run_imports_no_spec_reader_and_no_torch(
        golden: Path, tmp_path: Path) -> None:
    (imported,) = _worker_imports(golden, tmp_path).values()  # one worker, forked
    assert "onnxruntime" in imported and "onnx_parity.run.flow" in imported  # it is the worker
    assert sorted(imported & set(WORKER_KEPT_OUT)) == []


def test_jobs_starts_its_workers_forked_before_the_spec_is_read(golden: Path,
                                                                 tmp_path: Path) -> None:
    # --jobs 2: both workers import numpy, onnx and ONNX Runtime while the spec is read, and
    # neither pays a second interpreter (a spawned worker imports the command line afresh,
    # and multiprocessing's resource tracker with it).
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: --jobs 2 starts one worker before the spec is read")
    (golden / "two.yaml").write_text(
        "version: 1\ndatasets: {golden: {kind: onnx-test-data, path: head}}\n"
        "models: [{name: head, onnx: head/model.onnx, datasets: [golden]},\n"
        "         {name: again, onnx: head/model.onnx, datasets: [golden]}]\n")
    workers = _worker_imports(golden, tmp_path, "two.yaml", "--jobs", "2")
    assert len(workers) == 2
    for imported in workers.values():
        assert "onnxruntime" in imported and "onnx_parity.run.flow" in imported
        assert "onnx_parity.cli.main" not in imported  # inherited, not imported again
        assert "multiprocessing.resource_tracker" not in imported


def test_a_worker_imports_what_a_case_needs_before_its_first_model(golden: Path,
                                                                   tmp_path: Path) -> None:
    # run/worker.py imports them while the parent reads the spec: a case (the golden one, with
    # its recorded data, comparison, latency and float16 check) then imports nothing more.
    script = textwrap.dedent(f"""\
        import sys, tempfile
        from pathlib import Path
        import onnxruntime
        from onnx_parity.plan.cases import plan
        from onnx_parity.run.scheduler import RunOptions, _by_model
        from onnx_parity.run.worker import _ready_for_cases, run_model
        from onnx_parity.spec import load_spec
        spec = load_spec(Path("parity.yaml"))
        options = RunOptions(work_dir=Path({str(tmp_path)!r}))
        (model, cases), = _by_model(plan(spec))
        _ready_for_cases(onnxruntime)
        import gc
        print(gc.get_freeze_count())
        before = set(sys.modules)
        sent = []
        run_model(options.task(spec, model, cases), sent.append)
        print(sorted(m for m in set(sys.modules) - before if m.startswith("onnx_parity")))
        print(sorted(message[1].status for message in sent if message[0] == "result"))
        """)
    done = subprocess.run([sys.executable, "-c", script], cwd=golden, env=_env(),
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    frozen, new, statuses = done.stdout.splitlines()[-3:]
    assert statuses == "['passed']"
    assert new == "[]"
    # what it holds by then, its modules, is left out of the cycle collector's full walks
    assert int(frozen) > 10_000


def test_a_warm_up_that_fails_leaves_the_failure_to_the_first_case(monkeypatch) -> None:
    # A module that does not import, an ONNX Runtime that makes no session: the worker lives
    # on, and the case that meets the same failure reports it as its own error.
    import gc

    from onnx_parity.run import worker

    monkeypatch.setattr(worker, "CASE_MODULES", ("onnx_parity.run.no_such_module",))
    gc.unfreeze()
    try:
        worker._ready_for_cases(object())  # raises nothing
        # and still sets aside what the worker holds, as a warm-up that succeeds does
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
    assert "onnx_parity.run.no_such_module" not in sys.modules


def _blas_threads_at_numpy_import(golden: Path, tmp_path: Path, **extra: str) -> set[str]:
    """OPENBLAS_NUM_THREADS as each worker had it when it imported numpy (its BLAS reads it
    then, to start its pool of threads)."""
    hooks, seen = tmp_path / "hooks", tmp_path / "blas.txt"
    hooks.mkdir(parents=True)
    (hooks / "sitecustomize.py").write_text(textwrap.dedent(f"""\
        import os, sys
        RUN = os.getpid()
        class Watch:
            def find_spec(self, name, path=None, target=None):
                if name == "numpy" and os.getpid() != RUN:
                    with open({str(seen)!r}, "a") as out:
                        out.write(os.environ.get("OPENBLAS_NUM_THREADS", "unset") + "\\n")
                return None
        sys.meta_path.insert(0, Watch())
        """))
    env = {**{k: v for k, v in _env().items() if k != "OPENBLAS_NUM_THREADS"}, **extra,
           "PYTHONPATH": os.pathsep.join([str(hooks), str(SOURCE)])}
    done = subprocess.run([sys.executable, "-m", "onnx_parity", "run", "parity.yaml"],
                          cwd=golden, env=env, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return set(seen.read_text().split())


def test_a_worker_s_numpy_computes_with_one_thread_unless_the_user_says(golden: Path,
                                                                        tmp_path: Path) -> None:
    # As torch and ONNX Runtime do in a worker; numpy's pool of BLAS threads cost each worker
    # 0.06-0.1 s of CPU at its import, for threads no check uses.
    assert _blas_threads_at_numpy_import(golden, tmp_path / "default") == {"1"}
    assert _blas_threads_at_numpy_import(golden, tmp_path / "own",
                                         OPENBLAS_NUM_THREADS="3") == {"3"}


def test_a_small_onnx_only_check_stays_within_three_times_a_bare_script(golden: Path) -> None:
    """The CI's guard against a slipped promise: the golden check against a bare script that
    does its unavoidable work (docs/performance.md), side by side, the best of 3 runs each,
    wall and CPU time alike. The goal is 1.5x; the margin absorbs a loaded runner."""
    tool = [sys.executable, "-m", "onnx_parity", "run", "parity.yaml"]
    bare = [sys.executable, str(ROOT / "benchmarks" / "nodesuite.py"), "bare", str(golden)]
    runs: dict[str, list[tuple[float, float]]] = {"tool": [], "bare": []}
    for _ in range(3):
        runs["tool"].append(_timed(tool, golden))
        runs["bare"].append(_timed(bare, golden))
    for index, what in enumerate(("wall", "CPU")):
        best = {name: min(run[index] for run in found) for name, found in runs.items()}
        assert best["tool"] <= 3 * best["bare"], (what, runs)
