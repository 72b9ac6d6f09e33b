"""What the export cache (`run --cache DIR`) saves, and what it costs.

Runs `onnx-parity run SPEC` as a user would: without --cache, with --cache on an empty folder
(cold), and again on the folder the cold run filled (warm, every export a hit), interleaved so
that drift in the machine's speed hits all alike; and the same cases done by a bare script
(benchmarks/bench.py's, which exports). Then what the key costs per model, in one process: the
factory called once (its reads recorded), its first forward() recorded as a run does it before
the key (and once more without the hook, for the hook's cost), the key of its exports computed
(every parameter and buffer hashed, the user's files and the files its code read hashed, the
packages it imported) and the key of each variant (its float32 file and calibration data
hashed).

    python benchmarks/cache.py [--spec examples/parity.yaml] [--repeat 3] [--jobs 1] [--record]

`--record` appends the run's row to benchmarks/results/cache.csv (benchmarks/record.py).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import record  # noqa: E402  (beside this file, not a package)
from bench import ENV  # noqa: E402


def run_seconds(spec: Path, jobs: int, cache: Path | None) -> tuple[float, int, int]:
    """Wall seconds of one run, its passed cases and the cases whose export was a hit."""
    with tempfile.TemporaryDirectory() as work:
        report = Path(work) / "report.json"
        command = [sys.executable, "-m", "onnx_parity", "run", str(spec), "--jobs", str(jobs),
                   "--json", str(report)]
        if cache is not None:
            command += ["--cache", str(cache)]
        started = time.perf_counter()
        subprocess.run(command, check=False, stdout=subprocess.DEVNULL, env=ENV)
        seconds = time.perf_counter() - started
        cases = json.loads(report.read_text())["cases"]
    hits = sum(1 for c in cases if (c["details"].get("cache") or {}).get("export") == "hit")
    return seconds, sum(1 for c in cases if c["status"] == "passed"), hits


def bare_seconds(spec: Path) -> tuple[float, float]:
    """The bare script's work (bench.py --direct-only: imports, load, export, sessions,
    inference) as it times itself, and its process's wall time, interpreter start included."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, str(HERE / "bench.py"), "--direct-only", str(spec)],
                          check=True, capture_output=True, text=True, env=ENV)
    return sum(json.loads(done.stdout).values()), time.perf_counter() - started


def idle_hook_seconds(events: int = 200_000) -> float:
    """What the recording hook (prepare/reads.py) costs an audit event outside its window, where
    it stays for the rest of the worker's life: sys.audit timed before and after it is
    installed, in this process, before anything else installed a hook."""
    from onnx_parity.prepare.reads import Recording

    def timed() -> float:
        started = time.perf_counter()
        for _ in range(events):
            sys.audit("onnx_parity.benchmark")
        return (time.perf_counter() - started) / events

    before = min(timed() for _ in range(3))
    with Recording():
        pass
    return min(timed() for _ in range(3)) - before


def export_events(spec_path: Path) -> list[tuple[str, int, float]]:
    """Per exported model: the audit events one export at opset 18 with its own exporter
    raises, and its seconds (a counting hook, installed last: it stays)."""
    import torch

    from onnx_parity.backends import load_module
    from onnx_parity.prepare.export import export_model
    from onnx_parity.prepare.inputs import EXPORT_BATCH, random_array
    from onnx_parity.spec import PREDEFINED_DATASETS, load_spec

    counted = [0, False]

    def count(event: str, args: tuple[object, ...]) -> None:
        if counted[1]:
            counted[0] = int(counted[0]) + 1

    sys.addaudithook(count)
    spec = load_spec(spec_path)
    found = []
    with tempfile.TemporaryDirectory() as work:
        for model in spec.models:
            if model.torch is None or model.onnx is not None:
                continue
            module = load_module(model, spec.root).module
            example = [torch.from_numpy(random_array(i, PREDEFINED_DATASETS["random"],
                                                     EXPORT_BATCH, 0, {}))
                       for i in model.inputs]
            counted[:] = [0, True]
            started = time.perf_counter()
            export_model(module, example, model.inputs, model.outputs, 18,
                         model.exporters[0],
                         Path(work) / f"{model.name}.onnx")
            counted[1] = False
            found.append((model.name, int(counted[0]), time.perf_counter() - started))
    return found


def key_costs(spec_path: Path, repeat: int) -> list[tuple[str, float, float, float, float, int]]:
    """Per exported model: (name, seconds of its first forward() recorded (the hook on), of the
    same forward() without it, of its exports' keys, of its variants' keys, parameters), the
    median of `repeat`, in this process. A warm run pays the recorded forward and the keys."""
    from onnx_parity.backends import forward, import_torch, load_module
    from onnx_parity.plan.cases import plan
    from onnx_parity.prepare.cachekey import export_key, model_key, variant_key
    from onnx_parity.prepare.export import export_model
    from onnx_parity.prepare.inputs import EXPORT_BATCH, random_array
    from onnx_parity.prepare.reads import Recording
    from onnx_parity.spec import PREDEFINED_DATASETS, load_spec

    torch = import_torch(1)  # one compute thread, as in a worker
    spec = load_spec(spec_path)
    cases = plan(spec)
    found = []
    with tempfile.TemporaryDirectory() as work:
        for model in spec.models:
            if model.torch is None or model.onnx is not None:  # a shipped file: no export
                continue
            reads = Recording()
            with reads:
                loaded = load_module(model, spec.root)
            module = loaded.module
            example = [torch.from_numpy(random_array(i, PREDEFINED_DATASETS["random"],
                                                     EXPORT_BATCH, 0, {}))
                       for i in model.inputs]
            args, keywords = loaded.binding.call(
                {i.name: t for i, t in zip(model.inputs, example, strict=True)})
            recorded, plain = [], []
            for _ in range(repeat):
                started = time.perf_counter()
                with reads:
                    forward(module, args, {**keywords, **model.forward_args})
                recorded.append(time.perf_counter() - started)
                started = time.perf_counter()
                forward(module, args, {**keywords, **model.forward_args})
                plain.append(time.perf_counter() - started)
            settings = {"torch": model.torch, "args": model.args, "inputs": model.inputs}
            mine = [c for c in cases if c.model.name == model.name]
            seconds = []
            for _ in range(repeat):
                started = time.perf_counter()
                part = model_key(module, reads, settings, spec.root)
                for case in mine:
                    export_key(part, case.opset or 0, case.exporter or "", {})
                seconds.append(time.perf_counter() - started)
            variants = 0.0
            if any(c.precision != "fp32" for c in mine):
                path = export_model(module, example, model.inputs, model.outputs, 18,
                                    "torchscript", Path(work) / f"{model.name}.onnx").path
                timings = []
                for _ in range(repeat):
                    started = time.perf_counter()
                    for case in mine:
                        if case.precision != "fp32":
                            variant_key(path, case.precision, [])
                    timings.append(time.perf_counter() - started)
                variants = statistics.median(timings)
            parameters = sum(p.numel() for p in module.parameters())
            median = statistics.median
            found.append((model.name, median(recorded), median(plain), median(seconds),
                          variants, parameters))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", type=Path, default=ROOT / "examples" / "parity.yaml")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--record", action="store_true",
                        help="append the run's row to benchmarks/results/cache.csv")
    args = parser.parse_args()

    none, cold, warm, bare, bare_wall = [], [], [], [], []
    hits = passed = 0
    for _ in range(args.repeat):  # interleaved
        folder = Path(tempfile.mkdtemp(prefix="onnx-parity-cache-"))
        try:
            none.append(run_seconds(args.spec, args.jobs, None)[0])
            cold.append(run_seconds(args.spec, args.jobs, folder)[0])
            seconds, passed, hits = run_seconds(args.spec, args.jobs, folder)
            warm.append(seconds)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        work, wall = bare_seconds(args.spec)
        bare.append(work)
        bare_wall.append(wall)
    median = statistics.median
    shown = args.spec.relative_to(ROOT) if args.spec.is_relative_to(ROOT) else args.spec
    print(f"spec: {shown}, jobs {args.jobs}, median of {args.repeat} (each: "
          f"{min(none):.2f}-{max(none):.2f} s without the cache)")
    print(f"{'run, no --cache, wall':<38}{median(none):8.2f} s")
    print(f"{'run, --cache cold (empty), wall':<38}{median(cold):8.2f} s  "
          f"({median(cold) / median(none) - 1:+.1%} over no cache)")
    print(f"{'run, --cache warm, wall':<38}{median(warm):8.2f} s  "
          f"({hits} cases' exports from the cache, {passed} passed)")
    print(f"{'bare script, its own work':<38}{median(bare):8.2f} s")
    print(f"{'bare script, wall':<38}{median(bare_wall):8.2f} s  (interpreter start included)")
    print(f"{'warm / bare script work':<38}{median(warm) / median(bare):8.2f}")
    print(f"{'warm / bare script wall':<38}{median(warm) / median(bare_wall):8.2f}")
    idle = idle_hook_seconds()
    print("the key, per model (in one process, the factory already called):")
    costs = key_costs(args.spec, max(args.repeat, 5))
    for name, recorded, plain, export, variants, parameters in costs:
        extra = f", variants' keys {variants * 1000:.2f} ms" if variants else ""
        print(f"  {name:<14}{parameters:>9,} parameters: first forward recorded "
              f"{recorded * 1000:.2f} ms ({plain * 1000:.2f} ms unrecorded), export keys "
              f"{export * 1000:.2f} ms{extra}")
    whole = sum(recorded + export + variants for _, recorded, _, export, variants, _ in costs)
    print(f"{'the complete key on a warm run':<38}{whole * 1000:8.1f} ms  "
          f"({whole / median(warm):.1%} of the warm run; the factories' calls not counted)")
    print(f"the hook outside its window: {idle * 1e9:.0f} ns an audit event; one export raises:")
    for name, events, seconds in export_events(args.spec):
        print(f"  {name:<14}{events:>9,} events in {seconds:.2f} s: {events * idle * 1000:.2f} ms "
              f"({events * idle / seconds:.3%})")
    if args.record:
        path = record.append("cache", {
            "spec": str(shown), "jobs": args.jobs, "runs": args.repeat,
            "no_cache_s": median(none), "cold_s": median(cold),
            "cold_over_no_cache": f"{median(cold) / median(none) - 1:+.1%}",
            "warm_s": median(warm), "hits": hits, "passed": passed,
            "bare_work_s": median(bare), "bare_wall_s": median(bare_wall),
            "warm_over_bare_work": median(warm) / median(bare),
            "warm_over_bare_wall": median(warm) / median(bare_wall),
            "key_ms": whole * 1000, "key_share": f"{whole / median(warm):.1%}",
            "hook_ns": round(idle * 1e9)})
        print(f"recorded in {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
