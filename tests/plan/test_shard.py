"""Sharding a plan across runners, and merging the shards' reports back: unit, then end to end."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import ROOT
from onnx_parity.cli.main import main
from onnx_parity.plan.cases import Case, plan
from onnx_parity.plan.merge import MergeError, merge_reports
from onnx_parity.plan.shard import Shard, assign_models, parse_shard, shard_cases
from onnx_parity.report.jsonfile import read_json, write_json
from onnx_parity.results import CaseResult, RunReport
from onnx_parity.spec import DatasetSpec, ModelSpec, TargetSpec, load_spec
from report_fixtures import failing_case, passing_case, planned

# -- K/N -------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, shard", [("1/1", Shard(1, 1)), ("2/4", Shard(2, 4)),
                                         (" 3 / 3 ", Shard(3, 3))])
def test_parse_shard(text: str, shard: Shard) -> None:
    assert parse_shard(text) == shard
    assert str(shard) == f"{shard.index}/{shard.count}"


@pytest.mark.parametrize("text, says", [
    ("0/4", "between 1 and 4"), ("5/4", "between 1 and 4"), ("1/0", "at least 1"),
    ("2", "expected K/N"), ("a/b", "expected K/N"), ("-1/2", "expected K/N"), ("", "expected K/N"),
])
def test_parse_shard_refuses(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_shard(text)


# -- splitting -------------------------------------------------------------------------------

_TARGET = TargetSpec(name="cpu", providers=("CPUExecutionProvider",))
_DATASET = DatasetSpec(name="random", kind="random")


def _cases(sizes: list[int]) -> tuple[Case, ...]:
    """Model m0 with sizes[0] cases, m1 with sizes[1], ..., in plan order."""
    cases = []
    for index, size in enumerate(sizes):
        model = ModelSpec(name=f"m{index}", line=index + 1)
        cases += [Case(id=f"m{index}[opset18-cpu-random-b{b}]", model=model, opset=18,
                       exporter="dynamo", target=_TARGET, dataset=_DATASET, batch_size=b)
                  for b in range(1, size + 1)]
    return tuple(cases)


@given(sizes=st.lists(st.integers(1, 12), min_size=0, max_size=15), count=st.integers(1, 6))
def test_shards_partition_the_plan_keeping_models_whole(sizes: list[int], count: int) -> None:
    cases = _cases(sizes)
    shards = [shard_cases(cases, Shard(k, count)) for k in range(1, count + 1)]
    # Every case exactly once, each shard in plan order.
    assert sorted(c.id for s in shards for c in s) == sorted(c.id for c in cases)
    for shard in shards:
        assert list(shard) == [c for c in cases if c in shard]
    # A model's cases, and so its exports, never span two shards.
    owners: dict[str, set[int]] = {}
    for k, shard in enumerate(shards):
        for case in shard:
            owners.setdefault(case.model.name, set()).add(k)
    assert all(len(o) == 1 for o in owners.values())
    # Greedy largest-first: no shard exceeds another by more than the largest model.
    loads = [len(s) for s in shards]
    assert max(loads) - min(loads) <= max(sizes, default=0)
    # The same split every time, on every runner.
    assert [shard_cases(cases, Shard(k, count)) for k in range(1, count + 1)] == shards


def test_split_is_balanced_and_stable() -> None:
    # Largest first, to the lighter shard: 6 | 2, 2, 1, 1 balances at 6 against 6; the model
    # sizes tie (m0 and m3, m2 and m4) break by spec order.
    assert assign_models(_cases([2, 6, 1, 2, 1]), 2) == {
        "m1": 1, "m0": 2, "m3": 2, "m2": 2, "m4": 2,
    }
    assert assign_models(_cases([3, 3, 3]), 2) == {"m0": 1, "m1": 2, "m2": 1}
    # More shards than models: one model each, the rest empty.
    assert sorted(assign_models(_cases([3, 3]), 4).values()) == [1, 2]


def test_the_example_spec_splits_by_model() -> None:
    cases = plan(load_spec(ROOT / "examples" / "parity.yaml"))
    halves = [shard_cases(cases, Shard(k, 2)) for k in (1, 2)]
    assert [len(h) for h in halves] == [9, 9]
    models = [{c.model.name for c in h} for h in halves]
    assert not models[0] & models[1]
    assert models[0] | models[1] == {"mlp", "cnn", "attention", "shipped-mlp", "golden-head",
                                     "classifier"}


# -- merging ---------------------------------------------------------------------------------


def _report(cases: list[CaseResult], shard: str | None, spec: str = "parity.yaml",
            seconds: float = 1.0, plan: list[CaseResult] | None = None,
            **environment: Any) -> RunReport:
    """A report of `cases`, from a run that planned `plan` (default: those cases)."""
    env: dict[str, Any] = {"python": "3.11.9", **environment}
    report = RunReport(spec_path=spec, environment=env, cases=tuple(cases), seconds=seconds,
                       shard=shard)
    return planned(report, cases=None if plan is None else tuple(c.id for c in plan))


def test_merge_restores_spec_order_and_environment() -> None:
    a = [passing_case("a", 1, line=3), passing_case("a", 2, line=3)]
    b = [failing_case("b", 1, line=9)]
    c = [passing_case("c", 1, line=15), failing_case("c", 4, line=15)]
    whole = a + b + c
    merged = merge_reports([
        ("s1.json", _report(b, "1/3", seconds=4.0, plan=whole, gpu="H100")),
        ("s2.json", _report(c, "2/3", spec="./parity.yaml", seconds=2.0, plan=whole, gpu="L4")),
        ("s3.json", _report(a, "3/3", seconds=1.0, plan=whole, gpu="H100")),
    ])
    assert [case.id for case in merged.cases] == [case.id for case in whole]
    assert merged.spec_path == "parity.yaml"
    assert merged.seconds == 4.0  # the shards ran side by side: the slowest one
    assert merged.environment == {"python": "3.11.9", "gpu": ["H100", "L4"]}
    assert merged.counts == {"passed": 3, "failed": 2, "error": 0, "skipped": 0, "xfailed": 0}
    # The merged report is the whole plan's, unsharded: it merges again alone.
    assert merged.plan is not None and merged.plan.shard is None
    assert merged.plan.cases == tuple(case.id for case in whole)
    assert merge_reports([("merged.json", merged)]).cases == merged.cases


_M1, _M2 = passing_case("m", 1, 1), failing_case("n", 1, 2)


@pytest.mark.parametrize("reports, says", [
    ([], "no reports"),
    ([("a.json", _report([], "1/2")), ("b.json", _report([], "2/2", spec="other.yaml"))],
     "b.json is a report on other.yaml, but a.json is one on parity.yaml"),
    ([("a.json", _report([_M1], "1/2", plan=[_M1])),
      ("b.json", _report([_M1], "2/2", plan=[_M1]))],
     r"case m\[opset18-cpu-random-b1\] is in both a.json and b.json"),
    ([("a.json", _report([_M1, _M1], None))],
     r"case m\[opset18-cpu-random-b1\] is twice in a.json"),
    ([("a.json", _report([], "1/3")), ("c.json", _report([], "3/3"))],
     "no report for shard 2/3: its job may have failed"),
    ([("a.json", _report([], "1/300000000"))],
     "no report for shard 2/300000000, 3/300000000, .*, 11/300000000 and 299999989 more"),
    ([("a.json", _report([], "1/2")), ("b.json", _report([], "1/2"))],
     "shard 1/2 is in a.json and b.json"),
    ([("a.json", _report([], "1/2")), ("b.json", _report([], "2/3"))],
     "different numbers of shards: a.json is 1/2, b.json is 2/3"),
    ([("a.json", _report([], "1/1")), ("b.json", _report([], None))],
     "b.json did not come from a --shard run"),
    # A shard that planned other cases: another --select, or another spec's.
    ([("a.json", _report([_M1], "1/2", plan=[_M1, _M2])),
      ("b.json", _report([_M2], "2/2", plan=[_M2]))],
     "b.json and a.json are shards of different plans: they planned 1 and 2 cases"),
])
def test_merge_refuses(reports: list[tuple[str, RunReport]], says: str) -> None:
    with pytest.raises(MergeError, match=says):
        merge_reports(reports)


def _replan(report: RunReport, **changes: Any) -> RunReport:
    assert report.plan is not None
    return dataclasses.replace(report, plan=dataclasses.replace(report.plan, **changes))


def test_merge_refuses_what_the_plans_cannot_vouch_for() -> None:
    both = [_M1, _M2]
    one, two = _report([_M1], "1/2", plan=both), _report([_M2], "2/2", plan=both)
    assert len(merge_reports([("a.json", one), ("b.json", two)]).cases) == 2

    def refused(a: RunReport, b: RunReport) -> str:
        with pytest.raises(MergeError) as caught:
            merge_reports([("a.json", a), ("b.json", b)])
        message = str(caught.value)
        assert "\n" not in message  # one line, naming the file
        return message

    # The reported bug: shards balanced by different --durations reports split differently.
    by_time = _replan(two, split="durations", durations_sha256="a" * 64)
    assert "b.json and a.json are shards of different plans: one split by durations, the " \
        "other by count" in refused(one, by_time)
    assert "balanced by different --durations reports" in refused(
        _replan(one, split="durations", durations_sha256="b" * 64), by_time)
    assert "b.json and a.json are reports on different contents of parity.yaml" in refused(
        one, _replan(two, spec_sha256="6" * 64))
    assert "b.json was planned by onnx-parity 0.0.1, a.json by" in refused(
        one, _replan(two, version="0.0.1"))
    assert ("b.json has no plan record (it was written by an older onnx-parity), so merge "
            "cannot vouch") in refused(one, dataclasses.replace(two, plan=None))
    stray = passing_case("o", 1, 3)
    assert "b.json holds case o[opset18-cpu-random-b1], which its plan does not list" in \
        refused(one, _report([_M2, stray], "2/2", plan=both))
    # Every planned case exactly once: a shard that lost one is refused, naming it.
    assert ("1 of the 2 planned cases are in no report: n[opset18-cpu-random-b1]"
            in refused(one, _report([], "2/2", plan=both)))


def test_merge_of_separate_runs_needs_no_shards() -> None:
    merged = merge_reports([("a.json", _report([passing_case("a", 1, 2)], None)),
                            ("b.json", _report([passing_case("b", 1, 1)], None))])
    assert [c.model for c in merged.cases] == ["b", "a"]


# -- through the command line, with real ONNX Runtime sessions ---------------------------------


@pytest.fixture
def three_models(tmp_path: Path) -> Path:
    """Three ONNX-only models with recorded outputs (no export, so a run takes a second): one
    passes, one drifts, one cannot be loaded."""
    shutil.copytree(ROOT / "examples" / "golden", tmp_path / "golden")
    (tmp_path / "golden" / "broken.onnx").write_bytes(b"not an ONNX model")
    spec = tmp_path / "parity.yaml"
    spec.write_text(textwrap.dedent("""
        version: 1
        datasets:
          golden: {kind: onnx-test-data, path: golden/data, batch_sizes: [1, 4]}
          drifted: {kind: onnx-test-data, path: golden/drifted}
        models:
          - name: head
            onnx: golden/head.onnx
            datasets: [golden]
          - name: drifted-head
            onnx: golden/head.onnx
            datasets: [drifted]
          - name: broken
            onnx: golden/broken.onnx
            datasets: [golden]
    """).lstrip())
    return spec


def _json(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _ids(path: Path) -> list[str]:
    return [case["id"] for case in _json(path)["cases"]]


def test_shards_then_merge_equal_one_run(three_models: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    assert main(["run", str(three_models), "--list"]) == 0
    whole = capsys.readouterr().out.split()  # the unsharded plan, in spec order
    shards = []
    for k in (1, 2):
        path = tmp_path / f"shard-{k}.json"
        code = main(["run", str(three_models), "--shard", f"{k}/2", "--json", str(path),
                     "--fail-on", "never"])
        assert code == 0
        assert _json(path)["environment"]["shard"] == f"{k}/2"
        shards.append(path)
    assert sorted(_ids(shards[0]) + _ids(shards[1])) == sorted(whole)
    capsys.readouterr()

    merged, junit, summary = (tmp_path / n for n in ("merged.json", "merged.xml", "summary.md"))
    code = main(["merge", str(shards[1]), str(shards[0]), "--json", str(merged),
                 "--junit", str(junit), "--summary", str(summary)])
    out = capsys.readouterr().out
    assert code == 1  # drift and an error: the merge job fails the check
    assert "merged 2 reports: 5 cases" in out
    assert _ids(merged) == whole  # spec order, whichever order the shards came in
    assert [(c["model"], c["status"]) for c in _json(merged)["cases"]] == [
        ("head", "passed"), ("head", "passed"), ("drifted-head", "failed"),
        ("broken", "error"), ("broken", "error")]
    assert "shard" not in _json(merged)["environment"]
    assert read_json(merged).counts == {"passed": 2, "failed": 1, "error": 2, "skipped": 0,
                                        "xfailed": 0}
    assert 'tests="5"' in junit.read_text()
    assert "drifted-head" in summary.read_text()


def test_merge_refuses_a_missing_shard(three_models: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    first = tmp_path / "shard-1.json"
    main(["run", str(three_models), "--shard", "1/3", "--json", str(first)])
    capsys.readouterr()
    assert main(["merge", str(first), "--json", str(tmp_path / "merged.json")]) == 2
    err = capsys.readouterr().err
    assert "no report for shard 2/3, 3/3" in err
    assert not (tmp_path / "merged.json").exists()


def test_merge_needs_neither_torch_nor_onnxruntime(tmp_path: Path) -> None:
    report = tmp_path / "1.json"
    write_json(_report([failing_case("b", 1, 5)], "1/1"), report)
    code = ("import sys; from onnx_parity.cli.main import main;"
            f"code = main(['merge', {str(report)!r}]);"
            "heavy = {'torch', 'onnxruntime', 'onnx'} & set(sys.modules);"
            "assert not heavy, heavy; sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False, env={**os.environ, "GITHUB_ACTIONS": "false"})
    assert done.returncode == 1, done.stderr  # drift, and nothing heavy was imported


def test_a_shard_that_did_not_finish_leaves_the_merged_run_unfinished(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = passing_case("a", 1, 2), passing_case("b", 1, 5)
    whole = tmp_path / "1.json"
    write_json(_report([a], "1/2", plan=[a, b]), whole)
    killed = tmp_path / "2.json"
    write_json(dataclasses.replace(_report([b], "2/2", plan=[a, b]), complete=False), killed)
    merged = tmp_path / "merged.json"
    assert main(["merge", str(whole), str(killed), "--json", str(merged)]) == 1
    assert json.loads(merged.read_text())["complete"] is False
    assert "2.json comes from a run that did not finish" in capsys.readouterr().err


def test_merge_reports_unreadable_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": 1, "spec": "p.yaml", "environment": {}, "cases": [{"id": 3}]}')
    assert main(["merge", str(bad), str(tmp_path / "missing.json")]) == 2
    assert "bad.json.cases[0]" in capsys.readouterr().err


def test_merge_on_github_annotates_and_summarises_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    step_summary = tmp_path / "step_summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    monkeypatch.setenv("GITHUB_WORKSPACE", str(tmp_path))
    paths = []
    a, b = passing_case("a", 1, 2), failing_case("b", 1, 5)
    for k, case in enumerate((a, b), start=1):
        paths.append(tmp_path / f"{k}.json")
        write_json(_report([case], f"{k}/2", spec=str(tmp_path / "parity.yaml"), plan=[a, b]),
                   paths[-1])
    assert main(["merge", *map(str, paths)]) == 1
    out = capsys.readouterr().out
    assert out.count("::error file=parity.yaml,line=5,") == 1
    assert step_summary.read_text().count("## ❌ onnx-parity: 1 passed, 1 failed") == 1

    step_summary.unlink()
    assert main(["merge", *map(str, paths), "--no-annotations", "--no-step-summary",
                 "--fail-on", "error"]) == 0
    assert "::error" not in capsys.readouterr().out
    assert not step_summary.exists()


def test_an_empty_shard_writes_an_empty_report(three_models: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "shard-4.json"
    assert main(["run", str(three_models), "--shard", "4/4", "--json", str(report)]) == 0
    assert "shard 4/4 holds no case" in capsys.readouterr().err
    data = _json(report)
    assert data["cases"] == [] and data["environment"]["shard"] == "4/4"


def test_shard_and_targets_flags(three_models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ids = []
    for k in (1, 2, 3):
        assert main(["run", str(three_models), "--shard", f"{k}/3", "--list"]) == 0
        ids.append(capsys.readouterr().out.split())
    assert sorted(len(i) for i in ids) == [1, 2, 2]

    assert main(["run", str(three_models), "--shard", "4/3"]) == 2
    assert "argument --shard: '4/3': the shard number must be between 1 and 3" in \
        capsys.readouterr().err

    assert main(["run", str(three_models), "--targets", "cpu", "--list"]) == 0
    assert len(capsys.readouterr().out.split()) == 5
    assert main(["run", str(three_models), "--targets", "cpu,gpu"]) == 2
    assert ("--targets: no target named gpu; the spec has cpu, cuda, tensorrt"
            in capsys.readouterr().err)
    assert main(["run", str(three_models), "--targets", "cuda"]) == 1  # no case on cuda
    assert "no cases on cuda; nothing was checked" in capsys.readouterr().err


@pytest.mark.parametrize("fail_on, select, code", [
    ("error", "*head*", 0),  # drift alone does not fail `error`
    ("error", "*", 1),  # an errored case does; `never` is in the shard runs above
])
def test_fail_on(three_models: Path, run_cli: Callable[..., Any], fail_on: str, select: str,
                 code: int) -> None:
    got, _, _, report = run_cli(three_models, "--select", select, "--fail-on", fail_on)
    assert got == code
    assert report["cases"]  # the reports are written whatever the exit code
