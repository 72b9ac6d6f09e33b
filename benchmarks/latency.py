"""What latency timing adds to a run: `onnx-parity run examples/parity.yaml` as a user runs
it, with each case's own record of the time its timing took (details.latency.seconds) summed
against the run's total and the cases' own seconds. Each side's timing is capped at
FEW_REPEATS calls (MAX_REPEATS where the latency check is on) and BUDGET_SECONDS
(backends/timing.py), after one warm-up call (none for ONNX Runtime on the case's target: the
case's own calls on that session warm it up).

    python benchmarks/latency.py [--spec examples/parity.yaml] [--jobs 1]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from onnx_parity.backends.timing import BUDGET_SECONDS, FEW_REPEATS, MAX_REPEATS

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spec", type=Path, default=ROOT / "examples" / "parity.yaml")
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        report = Path(work) / "report.json"
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "onnx_parity", "run", str(args.spec), "--jobs",
                        str(args.jobs), "--json", str(report)], check=False,
                       stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - started
        cases = json.loads(report.read_text())["cases"]
    timed = [c["details"]["latency"] for c in cases if c.get("details", {}).get("latency")]
    timing = sum(t["seconds"] for t in timed)
    in_cases = sum(c["seconds"] for c in cases)
    print(f"cap: {FEW_REPEATS} calls ({MAX_REPEATS} under the latency check) or "
          f"{BUDGET_SECONDS * 1000:.0f} ms per side and case, after one warm-up call (none where "
          "the case has just made the calls)")
    print(f"{len(cases)} cases, {len(timed)} timed; run {wall:.1f} s wall, cases {in_cases:.1f} s")
    print(f"timing: {timing:.2f} s in all ({timing / max(in_cases, 1e-9):.1%} of the cases' "
          f"time, {timing / wall:.1%} of the run), at most "
          f"{max((t['seconds'] for t in timed), default=0):.3f} s in one case")


if __name__ == "__main__":
    main()
