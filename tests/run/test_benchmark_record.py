"""The benchmarks' row writer (benchmarks/record.py) and the history it appends to."""

from __future__ import annotations

import csv
import importlib.util
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"


@pytest.fixture(scope="module")
def record() -> ModuleType:
    spec = importlib.util.spec_from_file_location("record", ROOT / "benchmarks" / "record.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as file:
        return list(csv.DictReader(file))


def test_a_first_row_makes_the_file_and_a_later_one_fills_its_columns(
        record: ModuleType, tmp_path: Path) -> None:
    when = datetime(2026, 11, 28, 9, 5, tzinfo=timezone.utc)
    argv = ["benchmarks/bench.py", "--scale-only", "--record", "--repeat", "9"]
    path = record.append("nodesuite", {"rounds": 9, "median_ratio": 1.1049, "bare_s": 4.5},
                         folder=tmp_path, when=when, argv=argv)
    record.append("nodesuite", {"median_ratio": 1.2, "bare_s": None}, note="a busy hour",
                  folder=tmp_path, when=when, argv=argv)
    assert path == tmp_path / "nodesuite.csv"
    header = path.read_text(encoding="utf-8").splitlines()[0].split(",")
    assert header == ["date", "time_utc", "commit", "machine", "load", "rounds",
                      "median_ratio", "bare_s", "note", "command"]
    first, second = _rows(path)
    assert (first["date"], first["time_utc"]) == ("2026-11-28", "09:05")
    assert (first["rounds"], first["median_ratio"], first["bare_s"]) == ("9", "1.105", "4.5")
    assert first["command"] == "python benchmarks/bench.py --scale-only --repeat 9"
    assert first["machine"].endswith("cores")
    assert (second["rounds"], second["bare_s"], second["note"]) == ("", "", "a busy hour")


def test_a_figure_its_file_has_no_column_for_is_refused(
        record: ModuleType, tmp_path: Path) -> None:
    record.append("golden", {"median_ratio": 1.2}, folder=tmp_path, argv=["bench.py"])
    with pytest.raises(ValueError, match="no column for \\['best_ratio'\\]"):
        record.append("golden", {"best_ratio": 1.3}, folder=tmp_path, argv=["bench.py"])
    assert len(_rows(tmp_path / "golden.csv")) == 1


def test_the_commit_is_empty_outside_a_checkout(record: ModuleType, tmp_path: Path) -> None:
    assert record.commit(tmp_path) == ""


def test_the_machine_names_its_gpu_where_a_figure_ran_on_one(record: ModuleType) -> None:
    assert record.machine("NVIDIA H200").endswith("cores, NVIDIA H200")


@pytest.mark.parametrize("path", sorted(RESULTS.glob("*.csv")), ids=lambda p: p.name)
def test_each_recorded_history_takes_the_writers_rows(path: Path) -> None:
    """The files the benchmarks append to: the writer's leading and trailing columns, and
    every row as wide as its header."""
    with path.open(newline="", encoding="utf-8") as file:
        header, *rows = list(csv.reader(file))
    assert header[:5] == ["date", "time_utc", "commit", "machine", "load"]
    assert header[-2:] == ["note", "command"]
    assert rows
    assert all(len(row) == len(header) for row in rows)
