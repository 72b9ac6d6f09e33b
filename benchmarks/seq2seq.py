"""What does `adapter: seq2seq-lm` cost over a bare script, for one rollout?

Runs `onnx-parity run` on one model of examples/seq2seq.yaml (one case: a tiny encoder-decoder,
both halves exported with the TorchScript exporter, the encoder compared, 8 greedy decoder
steps on each side), then the same work as a bare script does it, in a fresh process too: the
imports, the model, the two exports, two sessions, the encoder and the 8-step rollout on both
sides, one np.abs(a - b).max() per output and step, no reports. Both are timed from the
process's start to its end, in wall-clock seconds and in CPU seconds (user + system, the
process and its workers: the figure that holds on a machine others share), each the median of
--repeat runs.

    python benchmarks/seq2seq.py [--model tiny-t5] [--repeat 3]
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
EXAMPLE = ROOT / "examples" / "seq2seq.yaml"
STEPS = 8


def timed(command: list[str]) -> tuple[float, float]:
    """Wall-clock and CPU seconds of `command` and every process it starts."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def tool_seconds(model: str) -> tuple[float, float, dict[str, int]]:
    with tempfile.TemporaryDirectory() as work:
        report = Path(work) / "report.json"
        wall, cpu = timed([sys.executable, "-m", "onnx_parity", "run", str(EXAMPLE), "--jobs",
                           "1", "--select", f"{model}*", "--json", str(report)])
        return wall, cpu, json.loads(report.read_text())["summary"]


def bare_seconds(model: str) -> tuple[float, float]:
    return timed([sys.executable, __file__, "--bare", model])


def bare(model: str) -> None:
    """The rollout as a hand-written script does it, with the adapter's wrappers standing in
    for the ones such a script has to write (their cost is the work, not the harness)."""
    import numpy as np
    import onnxruntime as ort
    import torch

    from onnx_parity.prepare.export import export_model
    from onnx_parity.run.adapters.seq2seq import Seq2SeqDecode
    from onnx_parity.run.adapters.two_halves import (
        decoder_example,
        decoder_module,
        encoder_example,
        encoder_feed,
        encoder_module,
        layout_of_model,
    )

    torch.set_num_threads(1)
    sys.path.insert(0, str(EXAMPLE.parent))
    import seq2seq as makers

    torch.manual_seed(0)
    lm = getattr(makers, f"make_{model.replace('-', '_')}")()
    layout = layout_of_model(lm)
    encoder, decoder = encoder_module(lm, layout), decoder_module(lm, layout)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    with tempfile.TemporaryDirectory() as work:
        files = (Path(work) / "encoder.onnx", Path(work) / "decoder.onnx")
        export_model(encoder, encoder_example(layout, 2, 64), layout.encoder_inputs,
                     layout.encoder_outputs, 18, "torchscript", files[0])
        export_model(decoder, decoder_example(layout, 2, 64), layout.inputs, layout.outputs,
                     18, "torchscript", files[1])
        sessions = [ort.InferenceSession(str(f), options, providers=["CPUExecutionProvider"])
                    for f in files]
    rng = np.random.default_rng(0)
    sample = ({"input_features": rng.standard_normal((1, *layout.features), np.float32)}
              if layout.speech else {"input_ids": rng.integers(0, 64, (1, 6))})
    feed = encoder_feed(layout, sample)

    def torch_call(module: torch.nn.Module, values: dict[str, np.ndarray]) -> list[np.ndarray]:
        with torch.no_grad():
            return [t.numpy() for t in module(*(torch.from_numpy(v) for v in values.values()))]

    worst = 0.0
    encoded = [torch_call(encoder, feed), sessions[0].run(None, feed)]
    worst = max(float(np.abs(a - b).max()) for a, b in zip(*encoded, strict=True))
    decode = Seq2SeqDecode(layout, STEPS)
    feeds = [decode.first_feed(feed, dict(zip(layout.encoder_outputs, e, strict=True)))
             for e in encoded]
    for step in range(STEPS):
        expected = dict(zip(layout.outputs, torch_call(decoder, feeds[0]), strict=True))
        actual = dict(zip(layout.outputs, sessions[1].run(None, feeds[1]), strict=True))
        worst = max(worst, *(float(np.abs(expected[n] - actual[n]).max()) for n in expected))
        feeds = [decode.next_feed(step, feeds[0], expected),
                 decode.forced_feed(step, feeds[1], actual, expected)]
    print(f"bare: worst max abs {worst:.1e}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-t5")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--bare", metavar="MODEL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare:
        bare(args.bare)
        return
    tool, script = [], []
    for _ in range(args.repeat):
        wall, cpu, summary = tool_seconds(args.model)
        assert summary.get("passed") == 1, summary
        tool.append((wall, cpu))
        script.append(bare_seconds(args.model))
    for kind, k in (("wall-clock", 0), ("CPU", 1)):
        t = statistics.median(x[k] for x in tool)
        s = statistics.median(x[k] for x in script)
        print(f"{args.model}, one rollout of {STEPS} steps, {kind}: onnx-parity {t:.2f} s "
              f"(runs {', '.join(f'{x[k]:.2f}' for x in tool)}), bare script {s:.2f} s "
              f"(runs {', '.join(f'{x[k]:.2f}' for x in script)}): {t / s:.2f}x")

if __name__ == "__main__":
    main()
