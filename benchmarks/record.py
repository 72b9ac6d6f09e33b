"""The benchmarks' history as data: a CSV file per workload under benchmarks/results/, a row a run.

A benchmark run with `--record` appends its row: the date and time (UTC), the commit it measured
(`git rev-parse --short HEAD`, `-dirty` where the tree differs from it; empty outside a
checkout), the machine (its cores, and its GPU where one is named), the load average, the
figures the run printed, and the command that reproduces it. A file's header is the contract:
a row with a figure its file has no column for is refused, not written under the wrong column,
and a column the run did not measure is left empty.
"""

from __future__ import annotations

import csv
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def commit(tree: Path | None = None) -> str:
    """The short commit of the checkout `tree` lies in, with `-dirty` where its tracked files
    differ from it; empty where there is no checkout or no git."""
    where = str(tree or Path(__file__).resolve().parent)
    try:
        head = subprocess.run(["git", "-C", where, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=False)
        if head.returncode != 0:
            return ""
        same = subprocess.run(["git", "-C", where, "diff", "--quiet", "HEAD", "--"],
                              capture_output=True, check=False)
    except OSError:
        return ""
    return head.stdout.strip() + ("" if same.returncode == 0 else "-dirty")


def machine(gpu: str = "") -> str:
    """The machine in words a reader can compare: its cores, and the GPU a figure ran on."""
    return f"{os.cpu_count()} cores" + (f", {gpu}" if gpu else "")


def command_line(argv: Sequence[str] | None = None) -> str:
    """The command that reproduces this run, as typed from the repository's root, without
    `--record` (reproducing a run need not add a row)."""
    argv = list(sys.argv if argv is None else argv)
    script = Path(argv[0])
    shown = f"benchmarks/{script.name}" if script.suffix == ".py" else argv[0]
    return shlex.join(["python", shown, *(a for a in argv[1:] if a != "--record")])


def append(workload: str, figures: Mapping[str, object], *, note: str = "",
           folder: Path = RESULTS, when: datetime | None = None, tree: Path | None = None,
           gpu: str = "", argv: Sequence[str] | None = None) -> Path:
    """Append one run's row to `folder/<workload>.csv` (made, with its header, on its first
    row) and return the file. Floats are written with three significant decimals' worth of
    precision, as the benchmarks print them."""
    when = when or datetime.now(timezone.utc)
    row: dict[str, object] = {
        "date": when.strftime("%Y-%m-%d"), "time_utc": when.strftime("%H:%M"),
        "commit": commit(tree), "machine": machine(gpu), "load": f"{os.getloadavg()[0]:.1f}",
        **{name: _written(value) for name, value in figures.items()},
        "note": note, "command": command_line(argv)}
    path = folder / f"{workload}.csv"
    if path.exists() and path.stat().st_size:
        with path.open(newline="", encoding="utf-8") as file:
            header = next(csv.reader(file))
        unknown = [name for name in row if name not in header]
        if unknown:
            raise ValueError(f"{path.name} has no column for {unknown}; its columns: {header}")
        with path.open("a", newline="", encoding="utf-8") as file:
            csv.DictWriter(file, header, restval="").writerow(row)
        return path
    folder.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, list(row))
        writer.writeheader()
        writer.writerow(row)
    return path


def _written(value: object) -> object:
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1000 else f"{value:.1f}"
    return "" if value is None else value
