"""A JSON report is untrusted data: read within bounds (file size, nesting, string length,
integer digits), and one past a bound is refused naming the file and the limit, by every
command that reads reports (report/jsonlimits.py)."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from onnx_parity.cli.main import main
from onnx_parity.report.jsonfile import ReportFormatError, read_json, write_json
from onnx_parity.report.jsonlimits import (
    REPORT_LIMITS,
    JsonLimits,
    parse_bounded_json,
    read_bounded_json,
)
from report_fixtures import sample_report

SMALL = JsonLimits(bytes=300_000, depth=8, string=100, digits=5)


def test_a_report_over_the_size_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "huge.json"
    with path.open("wb") as handle:  # sparse: no disk is spent on it
        handle.truncate(REPORT_LIMITS.bytes + 1)
    with pytest.raises(ReportFormatError, match=r"huge\.json: 128\.0 MiB is over the limit of "
                                                r"128\.0 MiB for a report"):
        read_json(path)


@pytest.mark.parametrize(("text", "says"), [
    ("[" * 9 + "]" * 9, "nested deeper than the limit of 8"),
    ("[" * 100_000 + "]" * 100_000, "nested deeper than the limit of 8"),
    ('{"k": "' + "x" * 101 + '"}', "a string of 101 characters, over the limit of 100"),
    ('{"' + "k" * 101 + '": 1}', "a string of 101 characters, over the limit of 100"),
    ('{"n": 123456}', "an integer of 6 digits, over the limit of 5"),
    ('{"n": NaN}', "NaN, which JSON does not have"),
    ('{"n": -Infinity}', "-Infinity, which JSON does not have"),
    ('{"n": 1', "not JSON: "),
    (" " * 300_001, "more than the limit of 300000 bytes for a report"),
])
def test_each_bound_is_named(text: str, says: str) -> None:
    with pytest.raises(ReportFormatError, match=r"^r\.json: ") as caught:
        parse_bounded_json(text.encode(), "r.json", SMALL)
    assert says in str(caught.value)


def test_within_bounds_the_value_is_as_json_reads_it() -> None:
    text = '{"a": [1, -12345, 2.5e300, "x", {"b": null}], "c": true}'
    assert parse_bounded_json(text.encode(), "r.json", SMALL) == json.loads(text)
    with pytest.raises(ReportFormatError, match=r"r\.json: not UTF-8"):
        parse_bounded_json(b'"\xff"', "r.json", SMALL)


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "report.json"
    os.mkfifo(fifo)
    done: list[BaseException] = []

    def read() -> None:
        try:
            read_bounded_json(fifo)
        except BaseException as exc:  # handed to the test's thread
            done.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert not reader.is_alive(), "reading a FIFO blocked"
    assert isinstance(done[0], ReportFormatError) and "not a regular file" in str(done[0])


def test_the_readers_of_reports_refuse_a_deep_one(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "good.json"
    write_json(sample_report(), good)
    deep = tmp_path / "deep.json"
    data = json.loads(good.read_text())
    nested: object = 1
    for _ in range(REPORT_LIMITS.depth):
        nested = [nested]
    data["environment"]["extra"] = nested
    deep.write_text(json.dumps(data))
    assert main(["merge", str(good), str(deep)]) == 2
    err = capsys.readouterr().err
    assert f"deep.json: nested deeper than the limit of {REPORT_LIMITS.depth}" in err
    assert main(["publish", str(deep)]) == 2
    assert "deep.json: nested deeper than the limit" in capsys.readouterr().err
