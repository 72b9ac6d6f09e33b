"""Report files read as untrusted input (report/untrusted.py, report/schema.py): seeded mutants
through every reader of a report (`merge`, `--baseline`, `--durations`) give a read or the
reader's one clean refusal, never a traceback; the hostile files that used to give one; and the
package's schema check (spec/conforms.py, both its answers) against jsonschema's.
scripts/report_fuzz.py makes the mutants (and a larger corpus for the release checklist)."""

from __future__ import annotations

import dataclasses
import json
import random
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import ROOT
from onnx_parity.cli.main import main
from onnx_parity.report.jsonfile import ReportFormatError, read_baseline, read_json, to_dict
from onnx_parity.report.jsonlimits import JsonLimits
from onnx_parity.report.schema import report_schema
from onnx_parity.report.untrusted import parse_report
from onnx_parity.spec.conforms import conforms, violation

sys.path.insert(0, str(ROOT / "scripts"))
import report_fuzz  # beside the other scripts, not a package

MUTANTS = 150  # per reader: about a second each


@pytest.fixture(scope="module")
def seeds() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    return report_fuzz.seed_reports()


@pytest.mark.parametrize("reader, seed", [("merge", 1), ("baseline", 2), ("durations", 3)])
def test_mutated_reports_read_or_are_refused_cleanly(
        reader: str, seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")  # the annotations are written from it too
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    outcomes = report_fuzz.run(MUTANTS, seed, tmp_path, readers=(reader,))[reader]
    assert sum(outcomes.values()) == MUTANTS  # none escaped: run() raises what escapes
    assert len(outcomes) == 2, outcomes  # both a read and the refusal came up


def test_the_schema_is_json_schema_and_its_check_agrees_with_jsonschema(
        seeds: tuple[dict[str, Any], ...]) -> None:
    from jsonschema import Draft202012Validator

    schema = report_schema()
    Draft202012Validator.check_schema(schema)
    validator = Draft202012Validator(schema)
    used = set()
    stack: list[Any] = [schema]
    while stack:
        part = stack.pop()
        if isinstance(part, dict):
            used |= set(part) - {"properties"}
            stack += [v for k, v in part.items() if k == "properties" for v in v.values()]
            stack += [v for k, v in part.items() if k in ("items", "additionalProperties")]
    assert used <= {"$schema", "title", "type", "required", "additionalProperties", "items",
                    "enum", "pattern", "minimum", "exclusiveMinimum", "minItems", "maxItems"}
    rng = random.Random(4)
    agreed = {True: 0, False: 0}
    for _ in range(250):
        blob = report_fuzz.mutant(rng.choice(seeds), rng)
        try:
            value = json.loads(blob)
        except (ValueError, RecursionError):
            continue
        valid = validator.is_valid(value)
        assert (violation(value, schema) is None) == valid, blob[:300]
        assert conforms(value, schema) == valid, blob[:300]
        agreed[valid] += 1
    for seed in seeds:
        assert violation(seed, schema) is None and validator.is_valid(seed)
        assert conforms(seed, schema)
    assert agreed[True] > 10 and agreed[False] > 50


# -- the hostile files that gave a traceback, through each reader ------------------------------

def _hostile(seeds: tuple[dict[str, Any], ...]) -> dict[str, bytes]:
    rich, first, _ = seeds
    shard = json.dumps(first)
    latency = json.loads(json.dumps(rich))
    latency["cases"][0]["details"]["latency"]["onnxruntime"]["median_ms"] = "-inf"
    zero = json.loads(json.dumps(rich))
    zero["cases"][0]["details"]["latency"]["onnxruntime"]["median_ms"] = 0
    no_cases = json.loads(shard)
    del no_cases["cases"]
    return {
        "deep": b'{"version": 1, "cases": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        "deep-inside": shard.replace('"notes": []', '"notes": ' + "[" * 70 + "]" * 70,
                                     1).encode(),
        "digits": shard.replace('"version": 1', '"version": 1' + "0" * 5000, 1).encode(),
        "-inf latency": json.dumps(latency).encode(),
        "zero latency": json.dumps(zero).encode(),
        "no cases": json.dumps(no_cases).encode(),
        "NaN": shard.replace('"seconds": 1.0', '"seconds": NaN', 1).encode(),
        "1e999": shard.replace('"seconds": 1.0', '"seconds": 1e999', 1).encode(),
        "not UTF-8": shard.encode().replace(b'"m[a]"', b'"m[\xff]"', 1),
        "junk": b"PK\x03\x04",
    }


@pytest.mark.parametrize("name", ["deep", "deep-inside", "digits", "-inf latency",
                                  "zero latency", "no cases", "NaN", "1e999", "not UTF-8",
                                  "junk"])
def test_a_hostile_report_is_a_clean_refusal_everywhere(
        name: str, seeds: tuple[dict[str, Any], ...], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "hostile.json"
    path.write_bytes(_hostile(seeds)[name])
    with pytest.raises(ReportFormatError, match=r"hostile\.json"):
        read_json(path)
    baseline = read_baseline(str(path))
    assert not baseline.usable and "hostile.json cannot be read" in baseline.problem
    assert main(["merge", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("onnx-parity merge: error: ") and err.count("\n") == 1
    assert "hostile.json" in err
    durations = report_fuzz.read_durations(tmp_path, path.read_bytes(), [])
    assert durations == "by count"


def test_a_shard_of_300000000_shards_is_counted_not_listed(
        seeds: tuple[dict[str, Any], ...], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A valid file that claims a split into 300,000,000 shards: merge names ten missing ones
    and counts the rest, allocating nothing per shard."""
    import resource

    first = json.loads(json.dumps(seeds[1]))
    first["environment"]["shard"] = "1/300000000"
    first["plan"]["shard"] = {"index": 1, "count": 300_000_000}
    path = tmp_path / "shard.json"
    path.write_text(json.dumps(first))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert main(["merge", str(path)]) == 2
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000  # KiB
    assert ("no report for shard 2/300000000, 3/300000000, 4/300000000, 5/300000000, "
            "6/300000000, 7/300000000, 8/300000000, 9/300000000, 10/300000000, 11/300000000 "
            "and 299999989 more") in capsys.readouterr().err


def test_the_bounds(tmp_path: Path) -> None:
    small = JsonLimits(bytes=200, depth=3, string=11, digits=3)
    cases = '"environment": {}, "spec": "p", "cases": []'
    assert parse_report(b'{"version": 1, ' + cases.encode() + b"}", "r", small)
    for body, says in [(b'{"version": 1000, ' + cases.encode() + b"}",
                        "4 digits, over the limit of 3"),
                       (b'{"version": 1, "spec": "pppppppppppp"}', "12 characters"),
                       (b'{"version": 1, "x": {"y": [[]]}}', "deeper than the limit of 3"),
                       (b'{"version": 1, "xxxxxxxxxxxxx": 1}', "13 characters")]:
        with pytest.raises(ReportFormatError, match=f"r: .*{says}"):
            parse_report(body, "r", small)
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 300)
    from onnx_parity.report.untrusted import load_report

    with pytest.raises(ReportFormatError,
                       match=r"big\.json: 300 bytes is over the limit of 200 bytes"):
        load_report(big, small)


def test_a_report_of_an_older_writer_still_reads_as_a_baseline(
        seeds: tuple[dict[str, Any], ...], tmp_path: Path) -> None:
    """Keys added since (the plan, `complete`, kinds) may be missing in a baseline: it reads."""
    from onnx_parity.report.jsonfile import from_dict

    old = json.loads(json.dumps(seeds[0]))
    for key in ("plan", "complete", "unmatched_expectations", "baseline", "summary"):
        del old[key]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    baseline = read_baseline(str(path))
    assert baseline.usable and set(baseline.cases) == {"m[a]", "m[b]", "m[c]"}
    back = from_dict(seeds[0])
    assert to_dict(dataclasses.replace(back)) == seeds[0]
