"""Shards balanced by time (`--durations`) and read from the CI runner (`--shard auto`)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from test_shard import _cases, three_models

from onnx_parity.cli.main import main
from onnx_parity.plan.shard import (
    AUTO_COUNT,
    Shard,
    assign_models,
    model_seconds,
    shard_cases,
    shard_from_environment,
)
from report_fixtures import failing_case, passing_case, planned

__all__ = ["three_models"]  # the fixture, used here by name

# -- balancing by seconds --------------------------------------------------------------------


def test_durations_outweigh_case_counts() -> None:
    cases = _cases([1, 1, 1, 5])  # by count, m3 alone against m0, m1, m2
    assert assign_models(cases, 2) == {"m3": 1, "m0": 2, "m1": 2, "m2": 2}
    # By seconds m0 is the heavy one: it goes alone, the rest together.
    durations = {"m0": 60.0, "m1": 2.0, "m2": 3.0, "m3": 4.0}
    assert assign_models(cases, 2, durations) == {"m0": 1, "m3": 2, "m2": 2, "m1": 2}
    # The same split every time, and every case exactly once.
    shards = [shard_cases(cases, Shard(k, 2), durations) for k in (1, 2)]
    assert [shard_cases(cases, Shard(k, 2), durations) for k in (1, 2)] == shards
    assert sorted(c.id for s in shards for c in s) == sorted(c.id for c in cases)


def test_unknown_models_weigh_the_median() -> None:
    cases = _cases([1, 1, 1, 1])
    # m3 is new: it weighs the median of 10, 1 and 2, which is 2; ties keep spec order.
    assert assign_models(cases, 2, {"m0": 10.0, "m1": 1.0, "m2": 2.0}) == {
        "m0": 1, "m2": 2, "m3": 2, "m1": 2}
    # A report that knows none of the models: the split counts cases, as without one.
    assert assign_models(cases, 2, {"gone": 5.0}) == assign_models(cases, 2)


def test_model_seconds_sum_a_models_cases() -> None:
    results = [replace(passing_case("a", 1), seconds=1.5),
               replace(failing_case("a", 2), seconds=2.0),
               replace(passing_case("b", 1), seconds=0.25)]
    assert model_seconds(results) == {"a": 3.5, "b": 0.25}


# -- `--shard auto` ----------------------------------------------------------------------------


@pytest.mark.parametrize("env, text, shard", [
    ({"BUILDKITE_PARALLEL_JOB": "0", "BUILDKITE_PARALLEL_JOB_COUNT": "3"}, "auto", Shard(1, 3)),
    ({"BUILDKITE_PARALLEL_JOB": "2", "BUILDKITE_PARALLEL_JOB_COUNT": "3"}, "auto/3", Shard(3, 3)),
    ({"CI_NODE_INDEX": "1", "CI_NODE_TOTAL": "2"}, "auto", Shard(1, 2)),
    ({"CI_NODE_INDEX": "2", "CI_NODE_TOTAL": "2"}, "AUTO", Shard(2, 2)),
    ({"JOB_COMPLETION_INDEX": "0", AUTO_COUNT: "4"}, "auto", Shard(1, 4)),
    ({"JOB_COMPLETION_INDEX": "3"}, "auto/4", Shard(4, 4)),
])
def test_shard_auto_reads_the_runner(env: dict[str, str], text: str, shard: Shard) -> None:
    assert shard_from_environment(text, env) == shard


@pytest.mark.parametrize("env, text, says", [
    ({}, "auto", "found no shard index: set BUILDKITE_PARALLEL_JOB and "
                 "BUILDKITE_PARALLEL_JOB_COUNT (Buildkite), CI_NODE_INDEX"),
    ({"GITHUB_ACTIONS": "true"}, "auto", "on GitHub Actions pass the matrix's own --shard K/N"),
    ({"JOB_COMPLETION_INDEX": "1"}, "auto", f"set {AUTO_COUNT}, or pass --shard auto/N"),
    ({"BUILDKITE_PARALLEL_JOB": "1"}, "auto", "set BUILDKITE_PARALLEL_JOB_COUNT or"),
    ({"CI_NODE_INDEX": "3", "CI_NODE_TOTAL": "2"}, "auto", "counted from 1"),
    ({"CI_NODE_INDEX": "1", "CI_NODE_TOTAL": "2"}, "auto/3", "CI_NODE_TOTAL=2 says otherwise"),
    ({"JOB_COMPLETION_INDEX": "x", AUTO_COUNT: "2"}, "auto", "must be whole numbers"),
])
def test_shard_auto_says_what_to_set(env: dict[str, str], text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)")):
        shard_from_environment(text, env)


def test_shard_auto_on_the_command_line(three_models: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("BUILDKITE_PARALLEL_JOB", "CI_NODE_INDEX", "JOB_COMPLETION_INDEX"):
        monkeypatch.delenv(name, raising=False)
    assert main(["run", str(three_models), "--shard", "auto", "--list"]) == 2
    assert "found no shard index" in capsys.readouterr().err
    listed = []
    for index in ("1", "2"):
        monkeypatch.setenv("CI_NODE_INDEX", index)
        monkeypatch.setenv("CI_NODE_TOTAL", "2")
        assert main(["run", str(three_models), "--shard", "auto", "--list"]) == 0
        listed.append(capsys.readouterr().out.split())
        assert main(["run", str(three_models), "--shard", f"{index}/2", "--list"]) == 0
        assert capsys.readouterr().out.split() == listed[-1]  # the same as K/N
    assert listed[0] and listed[1] and not set(listed[0]) & set(listed[1])


def test_durations_needs_a_shard_and_an_unreadable_report_balances_by_count(
        three_models: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.json"
    assert main(["run", str(three_models), "--durations", str(missing), "--list"]) == 2
    assert "give --shard" in capsys.readouterr().err
    assert main(["run", str(three_models), "--shard", "1/2", "--list"]) == 0
    by_count = capsys.readouterr().out
    broken = tmp_path / "broken.json"
    broken.write_text('{"version": 1, "cases": [' + "[" * 100_000)
    for path in (missing, broken):
        assert main(["run", str(three_models), "--shard", "1/2", "--durations", str(path),
                     "--list"]) == 0
        out, err = capsys.readouterr()
        assert out == by_count
        assert f"warning: --durations {path} cannot be read (" in err
        assert "the shards are balanced by case count; `merge` refuses shards" in err


# -- end to end: the merged shards are the unsharded run -----------------------------------------


def _json(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def test_shards_by_durations_merge_into_the_unsharded_run(
        three_models: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    whole = tmp_path / "whole.json"
    assert main(["run", str(three_models), "--json", str(whole), "--fail-on", "never"]) == 0
    # An earlier run where head and drifted-head were slow and broken was not checked: broken
    # weighs the median, so drifted-head moves to the second shard (by count it joins head).
    earlier = _json(whole)
    earlier["cases"] = [case for case in earlier["cases"] if case["model"] != "broken"]
    for case in earlier["cases"]:
        case["seconds"] = {"head": 5.0, "drifted-head": 9.0}[case["model"]]
    durations = tmp_path / "durations.json"
    durations.write_text(json.dumps(earlier))
    capsys.readouterr()
    by_count, by_time = [], []
    for k in (1, 2):
        assert main(["run", str(three_models), "--shard", f"{k}/2", "--list"]) == 0
        by_count.append(capsys.readouterr().out.split())
        assert main(["run", str(three_models), "--shard", f"{k}/2", "--durations",
                     str(durations), "--list"]) == 0
        by_time.append(capsys.readouterr().out.split())
    assert by_time != by_count
    assert [{i.split("[")[0] for i in ids} for ids in by_time] == [
        {"head"}, {"drifted-head", "broken"}]

    shards = []
    for k in (1, 2):
        path = tmp_path / f"shard-{k}.json"
        assert main(["run", str(three_models), "--shard", f"{k}/2", "--durations",
                     str(durations), "--json", str(path), "--fail-on", "never"]) == 0
        shards.append(str(path))
    merged = tmp_path / "merged.json"
    assert main(["merge", *shards, "--json", str(merged)]) == 1
    fields = ("id", "model", "status", "stage", "outputs")
    assert [{f: c[f] for f in fields} for c in _json(merged)["cases"]] == [
        {f: c[f] for f in fields} for c in _json(whole)["cases"]]
    assert _json(merged)["summary"] == _json(whole)["summary"]


def test_merged_unmatched_expectations_are_in_spec_order_whatever_the_split() -> None:
    """The unsharded run lists them in spec order; so does a merge, whichever shard (and
    whichever report given first) holds which model."""
    from onnx_parity.findings import ExpectationRecord
    from onnx_parity.plan.merge import merge_reports
    from onnx_parity.results import RunReport

    early = ExpectationRecord("a", "failed", "tracked", cases="opset9-*", line=6)
    late = ExpectationRecord("b", "error", "known", cases="nothing", line=14)

    def shard(k: int, *unmatched: ExpectationRecord) -> tuple[str, RunReport]:
        return f"s{k}.json", planned(RunReport(spec_path="parity.yaml", environment={},
                                               cases=(), shard=f"{k}/2", unmatched=unmatched))

    for reports in ([shard(1, late), shard(2, early)], [shard(2, early), shard(1, late)],
                    [shard(1, early), shard(2, late)]):
        assert merge_reports(reports).unmatched == (early, late)


def test_a_model_that_did_not_run_in_the_durations_report_counts_as_unknown() -> None:
    """A killed run's report holds its unfinished cases at 0 s, and a report may say "nan":
    such a model is not known to be light; it weighs the median, as one the report lacks."""
    results = [replace(passing_case("a", 1), seconds=4.0),
               replace(passing_case("b", 1), seconds=2.0),
               replace(failing_case("c", 1), seconds=0.0),  # not run: the run did not finish
               replace(passing_case("d", 1), seconds=float("nan")),
               replace(passing_case("d", 2), seconds=1.0)]
    assert model_seconds(results) == {"a": 4.0, "b": 2.0, "d": 1.0}


def test_shards_balanced_by_different_durations_do_not_merge(
        three_models: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The reported bug: each shard read another --durations report, so they planned different
    splits and the drifting model fell in neither; merge used to exit 0. Now each shard records
    its split, and merge refuses, naming the files."""
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    spec = three_models.read_text().replace("  - name: broken\n    onnx: golden/broken.onnx",
                                            "  - name: head2\n    onnx: golden/head.onnx")
    spec += "  - name: head3\n    onnx: golden/head.onnx\n    datasets: [golden]\n"
    three_models.write_text(spec)
    whole = tmp_path / "whole.json"
    assert main(["run", str(three_models), "--json", str(whole), "--fail-on", "never"]) == 0
    weights = [{"head": 2, "drifted-head": 5, "head2": 5, "head3": 13},
               {"head": 8, "drifted-head": 3, "head2": 5, "head3": 13}]
    shards = []
    for k, weight in enumerate(weights, start=1):
        earlier = _json(whole)
        for case in earlier["cases"]:
            case["seconds"] = weight[case["model"]] / 2 ** (case["model"] != "drifted-head")
        durations = tmp_path / f"durations-{k}.json"
        durations.write_text(json.dumps(earlier))
        shards.append(tmp_path / f"shard-{k}.json")
        assert main(["run", str(three_models), "--shard", f"{k}/2", "--durations",
                     str(durations), "--json", str(shards[-1])]) == 0  # both shards pass
    assert "drifted-head" not in {case["model"] for s in shards for case in _json(s)["cases"]}
    capsys.readouterr()
    assert main(["merge", *map(str, shards), "--json", str(tmp_path / "merged.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert (f"{shards[1]} and {shards[0]} are shards of different plans: they were balanced "
            "by different --durations reports") in err
    assert not (tmp_path / "merged.json").exists()
