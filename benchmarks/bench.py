"""How much time does onnx-parity add over the work a parity check cannot avoid?

Runs `onnx-parity run examples/parity.yaml` as a user would, then does the same checks the way a
hand-written script does: in one process, one export per model × opset, one session per file,
inference on both sides, no reports. The difference is the harness's overhead (worker processes,
their imports, the spec, the reports).

    python benchmarks/bench.py [--spec examples/parity.yaml] [--repeat 3] [--jobs 1]
    python benchmarks/bench.py --preflight-only   # the GPU preflight alone
    python benchmarks/bench.py --localize-only    # what --localize adds per failed case
    python benchmarks/bench.py --scale-only       # the ONNX node tests and a golden check,
                                                  # against bare scripts (and Polygraphy)

`--record` appends each measurement's row to its file under benchmarks/results/ (overhead,
preflight, localize, nodesuite, golden: see benchmarks/record.py).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import record  # noqa: E402  (beside this file, not a package)

Figures = dict[str, object]  # a measurement's row in benchmarks/results/, by column


def tool_seconds(spec: Path, jobs: int) -> tuple[float, dict[str, int]]:
    with tempfile.TemporaryDirectory() as work:
        report = Path(work) / "report.json"
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "onnx_parity", "run", str(spec), "--jobs", str(jobs),
             "--json", str(report)],
            check=False, stdout=subprocess.DEVNULL,
        )
        seconds = time.perf_counter() - started
        return seconds, json.loads(report.read_text())["summary"]


def unavoidable_seconds(spec_path: Path) -> dict[str, float]:
    """The same cases, done directly: imports, exports (and the reduced-precision variants made
    from them), sessions and inference, timed apart. No comparison, no report."""
    timings = dict.fromkeys(("imports", "load", "export", "sessions", "inference"), 0.0)
    started = time.perf_counter()
    import onnxruntime  # noqa: F401
    import torch

    timings["imports"] = time.perf_counter() - started
    from onnx_parity.backends import OrtTarget, load_module, torch_outputs
    from onnx_parity.plan.cases import plan
    from onnx_parity.prepare.export import export_model
    from onnx_parity.prepare.inputs import (
        EXPORT_BATCH,
        random_array,
        random_samples,
        recorded_samples,
    )
    from onnx_parity.prepare.precision import calibration_feeds, convert
    from onnx_parity.spec import PREDEFINED_DATASETS, load_spec

    spec = load_spec(spec_path)
    cases = plan(spec)
    modules: dict[str, Any] = {}
    files: dict[tuple[Any, ...], Path] = {}  # by model, opset, exporter (and precision)
    sessions: dict[tuple[Any, ...], Any] = {}
    references: dict[Any, Any] = {}

    def samples_of(dataset: Any, batch: int | None, inputs: Any, names: Any = ()) -> Any:
        if dataset.kind == "random":
            return random_samples(dataset, batch or 1, inputs, dict(dataset.dims))
        return recorded_samples(dataset, batch, inputs, names)

    with tempfile.TemporaryDirectory() as work:
        for case in cases:
            model = case.model
            tick = time.perf_counter()
            if model.torch and model.name not in modules:
                modules[model.name] = load_module(model, spec.root).module
            timings["load"] += time.perf_counter() - tick
            tick = time.perf_counter()
            key = (model.name, case.opset, case.exporter)
            if key not in files:
                if model.onnx is not None:
                    files[key] = model.onnx
                else:
                    example = [torch.from_numpy(random_array(
                        i, PREDEFINED_DATASETS["random"], EXPORT_BATCH, 0, {}))
                        for i in model.inputs]
                    files[key] = export_model(
                        modules[model.name], example, model.inputs, model.outputs,
                        case.opset or 18, case.exporter or "dynamo",
                        Path(work) / f"{model.name}-{case.opset}-{case.exporter}.onnx").path
            variant = (*key, case.precision)
            if case.precision == "fp32":
                files[variant] = files[key]
            if variant not in files:
                feeds = []
                if case.precision == "int8" and case.calibration is not None:
                    inputs = model.inputs or OrtTarget(files[key], case.target).input_specs()
                    batch = (case.calibration.batch_sizes or (None,))[0]
                    feeds = calibration_feeds(samples_of(case.calibration, batch, inputs))
                files[variant] = convert(files[key], case.precision,
                                         Path(work) / f"{'-'.join(map(str, variant))}.onnx",
                                         feeds)
            timings["export"] += time.perf_counter() - tick
            tick = time.perf_counter()
            if (variant, case.target.name) not in sessions:
                sessions[variant, case.target.name] = OrtTarget(files[variant], case.target)
            target = sessions[variant, case.target.name]
            timings["sessions"] += time.perf_counter() - tick
            inputs = model.inputs or target.input_specs()
            names = model.outputs or target.output_names()
            samples = samples_of(case.dataset, case.batch_size, inputs, names)
            tick = time.perf_counter()
            ref_key = (model.name, case.dataset.name, case.batch_size)
            if model.torch and ref_key not in references:
                references[ref_key] = [torch_outputs(modules[model.name], s.inputs)
                                       for s in samples]
            for sample in samples:
                target.run(sample.inputs)
            timings["inference"] += time.perf_counter() - tick
    return timings


def preflight_seconds(repeat: int) -> dict[str, float]:
    """The GPU preflight that `run` does before GPU targets and `doctor` prints: in a fresh
    process with its imports (what `run` pays), and `onnx-parity doctor` as a whole command
    (interpreter start included; on a GPU machine this includes the CUDA probe)."""
    code = ("import time; t = time.perf_counter(); "
            "from onnx_parity.backends import probe; "
            "from onnx_parity.machine.preflight import preflight; "
            "preflight(probe=probe.__name__); print(time.perf_counter() - t)")
    inside = [float(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                                   text=True).stdout) for _ in range(repeat)]
    whole = []
    for _ in range(repeat):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "onnx_parity", "doctor"], check=False,
                       stdout=subprocess.DEVNULL)
        whole.append(time.perf_counter() - started)
    return {"preflight, imports included": statistics.median(inside),
            "onnx-parity doctor, wall": statistics.median(whole)}


def print_preflight(repeat: int) -> Figures:
    found = preflight_seconds(repeat)
    for name, seconds in found.items():
        print(f"{name:<34}{seconds:8.2f} s")
    return {"runs": repeat, "preflight_s": found["preflight, imports included"],
            "doctor_s": found["onnx-parity doctor, wall"]}


def localize_run(spec: Path, jobs: int, mode: str) -> tuple[float, list[float]]:
    """Wall seconds of one run with `--localize MODE`, and each failed case's localization time
    as the worker measured it (details.divergence.seconds)."""
    with tempfile.TemporaryDirectory() as work:
        report = Path(work) / "report.json"
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "onnx_parity", "run", str(spec), "--jobs", str(jobs),
             "--json", str(report), "--localize", mode],
            check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        seconds = time.perf_counter() - started
        cases = json.loads(report.read_text())["cases"]
    return seconds, [c["details"]["divergence"]["seconds"] for c in cases
                     if c["status"] == "failed" and "divergence" in c["details"]]


def print_localization(spec: Path, repeat: int, jobs: int) -> Figures:
    """What finding where the drift starts costs: one extra run per failed case with every
    intermediate tensor kept, its PyTorch forward pass with hooks, and the comparison."""
    never: list[float] = []
    failed: list[tuple[float, list[float]]] = []
    for _ in range(repeat):  # interleaved, so drift in the machine's speed hits both alike
        never.append(localize_run(spec, jobs, "never")[0])
        failed.append(localize_run(spec, jobs, "failed"))
    per_case = [t for _, times in failed for t in times]
    count = len(failed[0][1])
    added = statistics.median(s for s, _ in failed) - statistics.median(never)
    shown = spec.relative_to(ROOT) if spec.is_relative_to(ROOT) else spec
    print(f"localization on {shown} ({count} failed cases), jobs {jobs}, median of {repeat}")
    print(f"{'  --localize never, wall':<34}{statistics.median(never):8.2f} s")
    print(f"{'  --localize failed, wall':<34}{statistics.median(s for s, _ in failed):8.2f} s")
    figures: Figures = {"spec": str(shown), "jobs": jobs, "runs": repeat, "failed_cases": count,
                        "never_s": statistics.median(never),
                        "failed_s": statistics.median(s for s, _ in failed)}
    if count:
        print(f"{'  added wall per failed case':<34}{added / count * 1000:8.0f} ms"
              "  (noisy: worker start-up varies more than this)")
        print(f"{'  localizing, per failed case':<34}{statistics.median(per_case) * 1000:8.1f} ms"
              f"  median, {max(per_case) * 1000:.1f} ms max (timed in the worker)")
        figures |= {"added_ms_per_case": added / count * 1000,
                    "localize_median_ms": statistics.median(per_case) * 1000,
                    "localize_max_ms": max(per_case) * 1000}
    return figures


# Every command runs as after a normal install, bytecode cached (pip compiles it; an editable
# checkout under PYTHONDONTWRITEBYTECODE would compile the tool's modules on every start).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


CPU: dict[tuple[str, ...], list[float]] = {}  # each command's CPU seconds, run after run


def timed(command: list[str], cwd: Path | None = None) -> tuple[float, float, str]:
    """Wall seconds and peak RSS in MiB of one command, its child processes included (wait4
    reports the largest of the process and the children it waited for), and its stdout. Its
    CPU seconds (user and system, the children it waited for included) go to CPU: on a loaded
    machine they say more than the wall time."""
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True, env=ENV)
    assert process.stdout is not None
    out = process.stdout.read()
    _, _, usage = os.wait4(process.pid, 0)
    process.returncode = 0  # reaped by wait4
    CPU.setdefault(tuple(command), []).append(usage.ru_utime + usage.ru_stime)
    return time.perf_counter() - started, usage.ru_maxrss / 1024, out


def load() -> str:
    """The machine's load while measuring: its cores and the 1-minute load average."""
    return f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}"


def node_suite(repeat: int, jobs: int) -> Figures:
    """The ONNX backend node tests (generated from the installed onnx package) as one spec,
    against the bare loop that a hand-written check is."""
    with tempfile.TemporaryDirectory() as work:
        folder = Path(work) / "nodes"
        spec = Path(subprocess.run([sys.executable, str(HERE / "nodesuite.py"), "generate",
                                    str(folder)], check=True, capture_output=True,
                                   text=True).stdout.strip())
        models = len(list(folder.glob("*/model.onnx")))
        tool, bare, report, outcomes = [], [], None, {}
        loads = [load()]
        tool_command = [sys.executable, "-m", "onnx_parity", "run", str(spec), "--jobs",
                        str(jobs), "--json", "report.json", "--junit", "junit.xml"]
        bare_command = [sys.executable, str(HERE / "nodesuite.py"), "bare", str(folder)]
        for _ in range(repeat):  # interleaved, so drift in the machine's speed hits both alike
            seconds, _, _ = timed(tool_command, cwd=Path(work))
            tool.append(seconds)
            report = json.loads((Path(work) / "report.json").read_text())
            seconds, _, out = timed(bare_command)
            bare.append(seconds)
            outcomes = json.loads(out)["outcomes"]
        loads.append(load())
    assert report is not None
    status = {case["model"]: case["status"] for case in report["cases"]}
    compared = [m for m, found in outcomes.items() if found in ("passed", "failed")]
    errors = sorted(m for m in compared if status[m] == "error")
    false_passes = sorted(m for m in compared if outcomes[m] == "failed"
                          and status[m] == "passed")
    beyond = sum(1 for m, found in outcomes.items() if found not in ("passed", "failed")
                 and status[m] in ("passed", "failed"))
    print(f"node suite: {models} one-node models of onnx "
          f"{importlib.metadata.version('onnx')}, jobs {jobs}, median of {repeat}")
    print(f"{'  onnx-parity run, wall (+JSON, JUnit)':<40}{statistics.median(tool):8.2f} s")
    print(f"{'  bare loop, wall':<40}{statistics.median(bare):8.2f} s")
    print(f"{'  ratio':<40}{statistics.median(tool) / statistics.median(bare):8.2f} ×")
    tool_cpu, bare_cpu = CPU[tuple(tool_command)], CPU[tuple(bare_command)]
    print(f"{'  best of each, wall':<40}{min(tool):8.2f} s against {min(bare):.2f} s: "
          f"{min(tool) / min(bare):.2f} ×")
    print(f"{'  best of each, CPU':<40}{min(tool_cpu):8.2f} s against {min(bare_cpu):.2f} s: "
          f"{min(tool_cpu) / min(bare_cpu):.2f} ×")
    # Each round's two runs against each other: the machine's slow spells hit both of a round.
    rounds = sorted(t / b for t, b in zip(tool, bare, strict=True))
    print(f"{'  each round, its ratio':<40}{statistics.median(rounds):8.2f} × median, "
          f"{rounds[0]:.2f} to {rounds[-1]:.2f}")
    print(f"  measured at {loads[0]} (start) and {loads[1]} (end)")
    print(f"  onnx-parity: {dict(Counter(status.values()))}")
    print(f"  bare loop:   {dict(Counter(outcomes.values()))}")
    print(f"  errors where the bare loop compares: {len(errors)} {errors[:5]}")
    print(f"  passes the bare loop fails: {len(false_passes)} {false_passes[:5]}")
    print(f"  compared where the bare loop cannot run the model: {beyond}")
    return {"models": models, "jobs": jobs, "rounds": repeat,
            "median_ratio": statistics.median(tool) / statistics.median(bare),
            "round_ratio": statistics.median(rounds), "best_ratio": min(tool) / min(bare),
            "cpu_ratio": min(tool_cpu) / min(bare_cpu), "tool_median_s": statistics.median(tool),
            "bare_median_s": statistics.median(bare), "bare_best_s": min(bare),
            "bare_best_cpu_s": min(bare_cpu), "errors_where_bare_compares": len(errors),
            "passes_bare_fails": len(false_passes), "compared_beyond_bare": beyond}


def golden_check(repeat: int) -> Figures:
    """One ONNX file against its recorded outputs, no PyTorch: onnx-parity, the bare script,
    and Polygraphy's equivalent command when Polygraphy is installed here."""
    golden = ROOT / "examples" / "golden"
    with tempfile.TemporaryDirectory() as work:
        root = Path(work)
        shutil.copytree(golden / "data", root / "head" / "data")
        shutil.copy(golden / "head.onnx", root / "head" / "model.onnx")
        for folder in (root / "head" / "data").iterdir():
            folder.rename(root / "head" / folder.name)
        spec = root / "parity.yaml"
        spec.write_text("version: 1\ndatasets: {golden: {kind: onnx-test-data, path: head}}\n"
                        "models: [{name: head, onnx: head/model.onnx, datasets: [golden]}]\n")
        commands = {
            "onnx-parity run": [sys.executable, "-m", "onnx_parity", "run", str(spec)],
            "bare script": [sys.executable, str(HERE / "nodesuite.py"), "bare", str(root)],
        }
        polygraphy = shutil.which("polygraphy")
        if importlib.util.find_spec("polygraphy") is not None and polygraphy:
            subprocess.run([sys.executable, str(HERE / "nodesuite.py"), "polygraphy",
                            str(root / "head")], check=True, capture_output=True)
            commands["polygraphy run"] = [
                polygraphy, "run", str(root / "head" / "model.onnx"), "--onnxrt",
                "--load-inputs", str(root / "head" / "inputs.json"),
                "--load-outputs", str(root / "head" / "outputs.json"),
                "--atol", "1e-4", "--rtol", "1e-3"]
        found: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        for command in commands.values():
            timed(command, cwd=root)  # once unmeasured: bytecode written, files in the cache
            CPU.pop(tuple(command))
        loads = [load()]
        for _ in range(repeat):  # interleaved, so drift in the machine's speed hits all alike
            for name, command in commands.items():
                seconds, peak, _ = timed(command, cwd=root)
                found[name].append((seconds, peak))
        loads.append(load())
    print(f"golden check: examples/golden/head.onnx against its recorded data, {repeat} runs "
          f"each, interleaved; median and best")
    base = statistics.median(s for s, _ in found["onnx-parity run"])
    best = min(s for s, _ in found["onnx-parity run"])
    base_cpu = min(CPU[tuple(commands["onnx-parity run"])])
    figures: Figures = {"runs": repeat}
    for name, runs in found.items():
        seconds = statistics.median(s for s, _ in runs)
        fastest = min(s for s, _ in runs)
        cpu = min(CPU[tuple(commands[name])])
        peak = statistics.median(p for _, p in runs)
        print(f"  {name:<22}{seconds:8.2f} s (best {fastest:.2f} s, CPU {cpu:.2f} s)  "
              f"{peak:6.0f} MiB peak  (onnx-parity ÷ this: {base / seconds:.2f} median, "
              f"{best / fastest:.2f} best, {base_cpu / cpu:.2f} CPU)")
        side = {"onnx-parity run": "tool", "bare script": "bare"}.get(name, "polygraphy")
        figures |= {f"{side}_median_s": seconds, f"{side}_best_s": fastest,
                    f"{side}_peak_mib": peak}
        if side != "tool":  # onnx-parity ÷ this side; against the bare script unprefixed
            prefix = "" if side == "bare" else f"{side}_"
            figures |= {f"{prefix}median_ratio": base / seconds,
                        f"{prefix}best_ratio": best / fastest, f"{prefix}cpu_ratio": base_cpu / cpu}
    ours = [s for s, _ in found["onnx-parity run"]]
    rounds = sorted(t / b for t, (b, _) in zip(ours, found["bare script"], strict=True))
    print(f"  each round, onnx-parity ÷ bare script: {statistics.median(rounds):.2f} median, "
          f"{rounds[len(rounds) // 4]:.2f} first quartile, {rounds[0]:.2f} to {rounds[-1]:.2f}")
    print(f"  measured at {loads[0]} (start) and {loads[1]} (end)")
    if "polygraphy run" not in found:
        print("  polygraphy run: not installed here (pip install polygraphy to compare)")
    return figures | {"round_ratio": statistics.median(rounds),
                      "round_first_quartile": rounds[len(rounds) // 4]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, default=ROOT / "examples" / "parity.yaml")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--preflight-only", action="store_true",
                        help="measure only the GPU preflight (`onnx-parity doctor`)")
    parser.add_argument("--localize-spec", type=Path, default=ROOT / "examples" / "faulty.yaml",
                        help="the spec whose failed cases time --localize")
    parser.add_argument("--localize-only", action="store_true",
                        help="measure only what --localize adds per failed case")
    parser.add_argument("--scale-only", action="store_true",
                        help="measure only the node suite and the ONNX-only golden check")
    parser.add_argument("--record", action="store_true",
                        help="append each measurement's row to benchmarks/results/")
    args = parser.parse_args()

    def recorded(workload: str, figures: Figures) -> None:
        if args.record:
            print(f"  recorded in {record.append(workload, figures).relative_to(ROOT)}")

    if args.preflight_only:
        recorded("preflight", print_preflight(max(args.repeat, 5)))
        return
    if args.localize_only:
        recorded("localize", print_localization(args.localize_spec, args.repeat, args.jobs))
        return
    if args.scale_only:
        recorded("nodesuite", node_suite(args.repeat, 2))
        recorded("golden", golden_check(max(args.repeat, 15)))
        return

    tool_runs = [tool_seconds(args.spec, args.jobs) for _ in range(args.repeat)]
    # Taken before the direct runs start: every process the tool started (workers included,
    # which the tool waits for) and nothing else. What a runner must hold per --jobs.
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    summary = tool_runs[0][1]
    tool = statistics.median(s for s, _ in tool_runs)
    direct = [subprocess.run(
        [sys.executable, __file__, "--direct-only", str(args.spec)],
        check=True, capture_output=True, text=True).stdout for _ in range(args.repeat)]
    parts = [json.loads(d) for d in direct]
    work = {k: statistics.median(p[k] for p in parts) for k in parts[0]}
    total = sum(work.values())
    cases = sum(summary.values())
    print(f"spec: {args.spec.relative_to(ROOT) if args.spec.is_relative_to(ROOT) else args.spec}"
          f" ({cases} cases), jobs {args.jobs}, median of {args.repeat}")
    print(f"{'onnx-parity run, wall':<34}{tool:8.2f} s")
    for name, seconds in work.items():
        print(f"  unavoidable: {name:<20}{seconds:8.2f} s")
    print(f"{'unavoidable work, one process':<34}{total:8.2f} s")
    print(f"{'harness overhead':<34}{tool - total:8.2f} s  ({(tool - total) / total:+.0%})")
    print(f"{'peak memory of one tool process':<34}{peak:8.0f} MiB  (RSS; a worker, with torch)")
    shown = args.spec.relative_to(ROOT) if args.spec.is_relative_to(ROOT) else args.spec
    recorded("overhead", {"spec": str(shown), "cases": cases, "jobs": args.jobs,
                          "runs": args.repeat, "tool_s": tool,
                          **{f"unavoidable_{name}_s": seconds for name, seconds in work.items()},
                          "unavoidable_s": total, "overhead_s": tool - total,
                          "overhead_share": f"{(tool - total) / total:+.0%}", "peak_mib": peak})
    recorded("preflight", print_preflight(max(args.repeat, 5)))
    recorded("localize", print_localization(args.localize_spec, args.repeat, args.jobs))
    recorded("nodesuite", node_suite(args.repeat, 2))
    recorded("golden", golden_check(max(args.repeat, 15)))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--direct-only":
        print(json.dumps(unavoidable_seconds(Path(sys.argv[2]))))
    else:
        main()
