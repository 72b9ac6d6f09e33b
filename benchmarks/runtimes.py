"""What a target in another interpreter costs per case: the same model, data and ONNX Runtime
on the CPU provider, once in the worker's own process (`cpu`) and once through a `python:`
target whose interpreter is this one (`cpu-elsewhere`), so that the only difference is the
runner: its start, and the feeds and outputs through its pipes. Each case's own seconds are read
from the JSON report; a model's first case on the other interpreter also starts its runner.

    python benchmarks/runtimes.py [--repeat 3] [--width 512] [--python PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np

BATCHES = (1, 8, 64)


def _model(folder: Path, width: int) -> None:
    """mlp.onnx: four MatMul + Relu layers of `width`; data.npz: 64 rows and their outputs."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, weights, last = [], [], "x"
    for k in range(4):
        w = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
        weights.append(numpy_helper.from_array(w, f"w{k}"))
        nodes += [helper.make_node("MatMul", [last, f"w{k}"], [f"h{k}"]),
                  helper.make_node("Relu", [f"h{k}"], [f"y{k}" if k < 3 else "y"])]
        last = f"y{k}"
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, ["batch", width])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, ["batch", width])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, str(folder / "mlp.onnx"))
    import onnxruntime as ort

    x = rng.standard_normal((64, width)).astype(np.float32)
    y = ort.InferenceSession(str(folder / "mlp.onnx")).run(None, {"x": x})[0]
    np.savez(folder / "data.npz", x=x, y=y)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--python", default=sys.executable,
                        help="the other interpreter (default: this one, the same onnxruntime)")
    args = parser.parse_args()
    per: dict[str, list[float]] = {}
    walls = []
    with tempfile.TemporaryDirectory() as work:
        folder = Path(work)
        _model(folder, args.width)
        (folder / "parity.yaml").write_text(textwrap.dedent(f"""\
            version: 1
            targets:
              cpu-elsewhere: {{python: {args.python}, providers: [CPUExecutionProvider]}}
            datasets:
              rows: {{kind: npz, path: data.npz, batch_sizes: {list(BATCHES)}}}
            models:
              - name: mlp
                onnx: mlp.onnx
                datasets: [rows]
                targets: [cpu, cpu-elsewhere]
            """))
        for _ in range(args.repeat):
            report = folder / "report.json"
            subprocess.run([sys.executable, "-m", "onnx_parity", "run", str(folder / "parity.yaml"),
                            "--jobs", "1", "--allow-outside-repo", "--json", str(report)],
                           check=False, stdout=subprocess.DEVNULL, cwd=folder)
            data = json.loads(report.read_text())
            walls.append(float(data.get("seconds") or 0.0))
            for order, case in enumerate(data["cases"]):
                if case["status"] != "passed":
                    raise SystemExit(f"{case['id']}: {case['status']}: {case.get('message')}")
                where = "elsewhere" if "cpu-elsewhere" in case["id"] else "in process"
                first = "first" if order % len(BATCHES) == 0 else "later"
                per.setdefault(f"{where}, {first} case", []).append(case["seconds"])
    print(f"mlp {args.width} wide, 4 layers; batches {', '.join(map(str, BATCHES))}; "
          f"median of {args.repeat} runs; other interpreter: {args.python}")
    for key in ("in process, first case", "in process, later case",
                "elsewhere, first case", "elsewhere, later case"):
        print(f"  {key:<24} {statistics.median(per[key]) * 1000:8.1f} ms")
    later = statistics.median(per["elsewhere, later case"]) - statistics.median(
        per["in process, later case"])
    first = statistics.median(per["elsewhere, first case"]) - statistics.median(
        per["in process, first case"])
    print(f"  added per case: {later * 1000:.1f} ms; the first (the runner's start) "
          f"{first * 1000:.1f} ms")


if __name__ == "__main__":
    main()
