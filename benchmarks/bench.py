"""How much time does onnx-parity add over the work a parity check cannot avoid?

Runs `onnx-parity run examples/parity.yaml` as a user would, then does the same checks the way a
hand-written script does: in one process, one export per model × opset, one session per file,
inference on both sides, no reports. The difference is the harness's overhead (worker processes,
their imports, the spec, the reports).

    python benchmarks/bench.py [--spec examples/parity.yaml] [--repeat 3] [--jobs 1]
    python benchmarks/bench.py --preflight-only   # the GPU preflight alone
    python benchmarks/bench.py --localize-only    # what --localize adds per failed case
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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
    """The same cases, done directly: imports, exports, sessions and inference, timed apart."""
    timings = dict.fromkeys(("imports", "load", "export", "sessions", "inference"), 0.0)
    started = time.perf_counter()
    import onnxruntime  # noqa: F401
    import torch

    timings["imports"] = time.perf_counter() - started
    from onnx_parity.backends import OrtTarget, load_module, torch_outputs
    from onnx_parity.export import export_model
    from onnx_parity.inputs import EXPORT_BATCH, random_array, random_samples, recorded_samples
    from onnx_parity.plan import plan
    from onnx_parity.spec import PREDEFINED_DATASETS, load_spec

    spec = load_spec(spec_path)
    cases = plan(spec)
    modules, files, sessions, references = {}, {}, {}, {}
    with tempfile.TemporaryDirectory() as work:
        for case in cases:
            model = case.model
            tick = time.perf_counter()
            if model.torch and model.name not in modules:
                modules[model.name] = load_module(model, spec.root).module
            timings["load"] += time.perf_counter() - tick
            tick = time.perf_counter()
            key = (model.name, case.opset)
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
                        Path(work) / f"{model.name}-{case.opset}.onnx").path
            timings["export"] += time.perf_counter() - tick
            tick = time.perf_counter()
            if key not in sessions:
                sessions[key] = OrtTarget(files[key], case.target)
            target = sessions[key]
            timings["sessions"] += time.perf_counter() - tick
            inputs = model.inputs or target.input_specs()
            names = model.outputs or target.output_names()
            assert case.batch_size is not None
            samples = (random_samples(case.dataset, case.batch_size, inputs, {})
                       if case.dataset.kind == "random" else
                       recorded_samples(case.dataset, case.batch_size, inputs, names))
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
    code = ("import time; t = time.perf_counter(); from onnx_parity.doctor import preflight; "
            "preflight(); print(time.perf_counter() - t)")
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


def print_preflight(repeat: int) -> None:
    for name, seconds in preflight_seconds(repeat).items():
        print(f"{name:<34}{seconds:8.2f} s")


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


def print_localization(spec: Path, repeat: int, jobs: int) -> None:
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
    if count:
        print(f"{'  added wall per failed case':<34}{added / count * 1000:8.0f} ms"
              "  (noisy: worker start-up varies more than this)")
        print(f"{'  localizing, per failed case':<34}{statistics.median(per_case) * 1000:8.1f} ms"
              f"  median, {max(per_case) * 1000:.1f} ms max (timed in the worker)")


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
    args = parser.parse_args()
    if args.preflight_only:
        print_preflight(max(args.repeat, 5))
        return
    if args.localize_only:
        print_localization(args.localize_spec, args.repeat, args.jobs)
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
    print_preflight(max(args.repeat, 5))
    print_localization(args.localize_spec, args.repeat, args.jobs)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--direct-only":
        print(json.dumps(unavoidable_seconds(Path(sys.argv[2]))))
    else:
        main()
