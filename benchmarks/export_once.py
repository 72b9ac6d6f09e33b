"""What exporting once per model saves: a small CNN's dynamo exports at two opsets, each traced
by torch.export (as before) against one torch.export whose program the second opset is
converted from (prepare/program.py), in one process after a warm-up export.

    python benchmarks/export_once.py [--repeat 5] [--opsets 18 20]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from onnx_parity.prepare.export import export_model
from onnx_parity.prepare.program import export_at, trace_program
from onnx_parity.spec import InputSpec


def small_cnn() -> nn.Module:
    """Four conv blocks and a linear head: no ReduceMean, so opset 17 converts too."""
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    channels = 3
    for width in (16, 32, 32, 64):
        layers += [nn.Conv2d(channels, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
                   nn.MaxPool2d(2)]
        channels = width
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(64 * 2 * 2, 10)).eval()


def per_opset(folder: Path, opsets: list[int]) -> float:
    """Each opset traced again, as every export did before."""
    module, how = _how()
    started = time.perf_counter()
    for opset in opsets:
        export_model(module, how["example"], how["inputs"], how["outputs"], opset, "dynamo",
                     folder / f"each{opset}.onnx")
    return time.perf_counter() - started


def once(folder: Path, opsets: list[int]) -> float:
    """torch.export once, at the first opset; the others converted from its program."""
    module, how = _how()
    started = time.perf_counter()
    program = trace_program(module, opset=opsets[0], path=folder / f"once{opsets[0]}.onnx", **how)
    for opset in opsets[1:]:
        export_at(program, opset, folder / f"once{opset}.onnx", module, **how)
    return time.perf_counter() - started


def _how() -> tuple[nn.Module, dict[str, Any]]:
    return small_cnn(), {"example": [torch.randn(2, 3, 32, 32)],
                         "inputs": [InputSpec("image", ("batch", 3, 32, 32))],
                         "outputs": ["logits"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--opsets", type=int, nargs="+", default=[18, 20])
    arguments = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as work:
        folder = Path(work)
        once(folder, arguments.opsets[:1])  # the exporter's warm-up, paid once per process
        before, after = [], []
        for _ in range(arguments.repeat):  # interleaved, so drift in the machine hits both
            before.append(per_opset(folder, arguments.opsets))
            after.append(once(folder, arguments.opsets))
    opsets = " and ".join(str(o) for o in arguments.opsets)
    old, new = statistics.median(before), statistics.median(after)
    print(f"small CNN, dynamo at opsets {opsets}, median of {arguments.repeat}, torch "
          f"{torch.__version__}")
    print(f"  torch.export at each opset   {old:6.2f} s")
    print(f"  torch.export once            {new:6.2f} s")
    print(f"  saved                        {old - new:6.2f} s  ({(old - new) / old:.0%})")


if __name__ == "__main__":
    main()
