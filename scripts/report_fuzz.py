"""Mutants of onnx-parity's JSON reports, fed to every reader of a report: `merge`, `--baseline`
and `--durations`. Each mutant must give a valid read or the reader's one clean refusal (merge:
exit 2 with one line; --baseline: "not compared"; --durations: balanced by case count), never
another exception. tests/test_report_fuzz.py runs a few hundred per reader on every test run;
the release checklist runs a larger corpus:

    python scripts/report_fuzz.py --count 3000 [--seed 1] [--keep DIR]

It prints the outcomes per reader and exits 1 with the first traceback if any mutant escaped.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import os
import random
import sys
import tempfile
import traceback
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from onnx_parity.findings import CaseDetails

READERS = ("merge", "baseline", "durations")

# Values that have broken readers, or could: types out of place, numbers past what a float or
# Python's int parsing holds, words a reader must refuse, text that looks like a workflow command.
_RAW = "@@raw@@"  # stands for the raw JSON text that follows, which json.dumps cannot write
HOSTILE: tuple[Any, ...] = (
    None, True, False, 0, -1, 1, 7, 2**63, -(2**63), 10**24 - 1, 1.5, -0.0, 0.0, -1.0, 1e308,
    -1e308, 5e-324, "", "inf", "-inf", "nan", "x" * 70, "1/300000000", "0/0", "3/2", "passed",
    "error", "compare", "count", "durations", "a" * 64,
    "\ud800", "\x00", "line\n::error::injected", [], {}, [None], {"": None}, [[[]]],
    _RAW + "9" * 5000, _RAW + "-" + "9" * 40, _RAW + "1e999", _RAW + "-1e999", _RAW + "NaN",
    _RAW + "-Infinity", _RAW + "[" * 3000 + "]" * 3000, _RAW + '{"a":' * 100 + "1" + "}" * 100,
    _RAW + '"' + "y" * (1 << 21) + '"',
)


def seed_reports() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """A rich report (every kind of detail a case can carry) and the two shards of one plan."""
    from onnx_parity import __version__
    from onnx_parity.findings import ExpectationRecord
    from onnx_parity.report.jsonfile import to_dict
    from onnx_parity.report.jsonvalues import Reader
    from onnx_parity.report.preflightjson import read_preflight
    from onnx_parity.results import (
        BaselineRun,
        CaseResult,
        CaseTrend,
        Histogram,
        Matching,
        OutputComparison,
        OutputTrend,
        PlanRecord,
        RunReport,
    )

    details = every_record()
    output = OutputComparison(
        name="y", passed=False, atol=1e-4, rtol=1e-3, elements=8, mismatches=2, max_abs=0.5,
        max_rel=0.1, mean_abs=0.01, required_atol=0.5, worst_index=(0, 1), worst_expected=1.0,
        worst_actual=1.5, expected_shape=(2, 4), actual_shape=(2, 4), expected_dtype="float32",
        actual_dtype="float32", metrics={"cosine": 0.99}, criteria=("atol/rtol",), scale=1.0,
        histogram=Histogram(edges=(1e-10, 1e-5, 10.0), counts=(6, 2), nonfinite=0),
        kind="elements", samples=2, placement=1, finite=8, thresholds={"cosine": 0.999},
        failed=("cosine",), quoted=("1.0", "1.5"), sample=1, where="at [0, 1]",
        actual_scale=1.5,
        matching=Matching(iou=0.5, matched=2, only_expected=1, only_actual=0,
                          best_expected=0.9, best_actual=0.8),
    )
    trend = CaseTrend("compared", check="on", factor=10.0, output="y", max_abs=0.05,
                      required_atol=0.05, ratio=10.0, trend="up", regressed=True,
                      outputs={"y": OutputTrend(0.05, 0.05, 10.0, 1e-7, "up", True,
                                                {"cosine": 0.999})}, notes=("n",))
    base = dict(model="m", opset=18, exporter="dynamo", target="cpu", dataset="random",
                line=3, precision="fp32")
    rich_cases = (
        CaseResult(id="m[a]", batch_size=1, status="failed", stage="compare", message="drift",
                   seconds=1.5, outputs=(output,), notes=("a note",), details=details,
                   baseline=trend, **base),
        CaseResult(id="m[b]", batch_size=2, status="passed", seconds=0.5,
                   outputs=(OutputComparison("y", True, 1e-4, 1e-3, elements=8),), **base),
        CaseResult(id="m[c]", batch_size=3, status="error", stage="export", message="boom",
                   seconds=0.1, **base),
    )
    environment = {"onnx_parity": __version__, "python": "3.11.7",
                   "packages": {"torch": "2.6.0", "onnxruntime": "1.22.0"}}
    preflight = read_preflight(Reader({
        "usable": False, "reason": "no driver",
        "findings": [{"check": "driver", "status": "fail", "found": "none", "fix": "install it"}],
        "seconds": 0.2, "gpu_cases": 1, "skipped_cases": 0,
        "facts": {"driver": {"version": "550", "gpus": [{"index": 0, "name": "H100"}]}}},
        "preflight"))
    ids = tuple(case.id for case in rich_cases)
    plan = PlanRecord(spec_sha256="a" * 64, cases=ids, version=__version__)
    rich = RunReport("parity.yaml", environment, rich_cases, seconds=2.5, preflight=preflight,
                     baseline=BaselineRun("base.json", True, spec="parity.yaml",
                                          environment=(("torch", "2.5", "2.6"),),
                                          gone=("m[z]",)),
                     unmatched=(ExpectationRecord("m", "error", "known", line=4),), plan=plan)
    shards = [RunReport("parity.yaml", environment, rich_cases[:2] if k == 1 else rich_cases[2:],
                        seconds=1.0, shard=f"{k}/2", plan=PlanRecord(
                            spec_sha256="a" * 64, cases=ids, version=__version__,
                            shard=(k, 2)))
              for k in (1, 2)]
    return to_dict(rich), to_dict(shards[0]), to_dict(shards[1])


def every_record() -> CaseDetails:
    """A case's details with every record the JSON holds, each field given, non-finite
    figures among them."""
    import math

    from onnx_parity.findings import (
        BundleRecord,
        CallTimes,
        CaseDetails,
        CauseRecord,
        DriftRecord,
        ExpectationRecord,
        Float16Record,
        LatencyRecord,
        NodeCost,
        NumericsRecord,
        PathStep,
        ProvidersRecord,
        RangeRecord,
        RolloutRecord,
        RolloutStep,
        TokenRecord,
    )


    step = PathStep(tensor="t", node="n", op_type="Add", module="m", within=False,
                    max_abs=math.inf, sqnr=12.5, nonfinite="inf")
    overflow = RangeRecord(tensor="t", kind="overflow", max_abs=7e4, node="n", op_type="Mul")
    cause = CauseRecord(kind="tf32", proven=True, message="m", setting="s", output="y",
                        before={"max_abs": 1.0}, after={"max_abs": 0.0, "passed": True},
                        provider_options={"CUDAExecutionProvider": {"use_tf32": "0"}})
    times = CallTimes(median_ms=2.0, q1_ms=1.5, q3_ms=2.5, repeats=9, device="cuda")
    return CaseDetails(
        divergence=DriftRecord(verdict="quality", headline="h", summary="s", reference="r",
                               sample=0, compared=3, node="n", op_type="Add", module="m",
                               module_type="Linear", tensor="t", max_abs=math.nan,
                               path=(step,), segment=("a", "b"), other_origins=2,
                               threshold_db=20.0, sqnr=-math.inf, worst=(step,), seconds=0.5),
        cause=cause,
        causes_ruled_out=(CauseRecord(kind="graph", proven=False, message="no"),),
        numerics=NumericsRecord(provider_options={"CUDAExecutionProvider": {"a": "1"}},
                                gpu="H200", compute_capability="9.0", tf32=True,
                                session_options={"intra_op_num_threads": 1},
                                tf32_override="0"),
        providers=ProvidersRecord(requested=("CUDAExecutionProvider",),
                                  active=("CUDAExecutionProvider", "CPUExecutionProvider"),
                                  nodes={"CPUExecutionProvider": {"Shape": 2}},
                                  cpu_shape_nodes={"Shape": 2}, fallback_reason="r",
                                  runtime={"python": "/usr/bin/python3"}),
        bundle=BundleRecord(path="b", command="c"),
        float16=Float16Record(nodes=4, float16_nodes=3, range_checked=True, leaving=1,
                              ranges=(overflow,), failing=overflow,
                              reference_overflow=("y",)),
        not_compared=("z",), export_log="log", worker_log=("last",),
        other={"newer": [1, "x"]},
        rollout=RolloutRecord(steps=2, feedback={"h": "h_in"},
                              per_step=(RolloutStep(step=1, passed=True, max_abs={"y": 0.0}),
                                        RolloutStep(step=2, passed=False,
                                                    max_abs={"y": math.inf},
                                                    failing=("y",))),
                              first_failing=2, judged=2, output="y", growth=math.inf,
                              growth_from=1, floor=1e-6),
        expectation=ExpectationRecord(model="m", status="failed", reason="r", until="2030-01-01",
                                      line=3, verdict="met", ended="failed"),
        latency=LatencyRecord(onnxruntime=times, pytorch=times, ratio=1.0, cpu=times,
                              seconds=0.1, baseline_ms=1.0, regressed=True,
                              costliest=(NodeCost(node="n", op_type="Add", provider="CUDA",
                                                  ms=0.5),),
                              profile="p.json", per="step"),
        tokens=TokenRecord(steps=4, agreed=2, comparable=4, step=3, sample=0, row=1,
                           expected=7, actual=8, gap=0.5, allowed=0.25, near_tie=False,
                           diverged=3),
        cache={"export": "hit"},
    )


def _places(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    children = value.items() if isinstance(value, dict) else (
        enumerate(value) if isinstance(value, list) else ())
    for key, child in children:
        yield from _places(child, (*path, key))


def mutant(doc: dict[str, Any], rng: random.Random) -> bytes:
    """One mutation of a report: a key gone, a value replaced by a hostile one, an entry
    doubled, or the file's bytes cut or damaged."""
    data = copy.deepcopy(doc)
    raw: str | None = None
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        place = rng.choice(list(_places(data))[1:])
        parent = data
        for key in place[:-1]:
            parent = parent[key]
        kind = rng.random()
        if kind < 0.2 and isinstance(parent, dict):
            del parent[place[-1]]
        elif kind < 0.28 and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[place[-1]]))
        else:
            # Half the time a value of the same type, which the schema lets through, to reach
            # the code that computes with it; else anything.
            alike = [v for v in HOSTILE if type(v) is type(parent[place[-1]])]
            value = rng.choice(alike if alike and rng.random() < 0.5 else HOSTILE)
            if isinstance(value, str) and value.startswith(_RAW):
                raw, value = value[len(_RAW):], _RAW
            parent[place[-1]] = value
    text = json.dumps(data, ensure_ascii=rng.random() < 0.5)
    if raw is not None:
        text = text.replace(json.dumps(_RAW), raw, 1)
    blob = text.encode("utf-8", "surrogatepass")
    damage = rng.random()
    if damage < 0.04:
        blob = blob[: rng.randrange(len(blob))]
    elif damage < 0.07:
        at = rng.randrange(len(blob))
        blob = blob[:at] + bytes([rng.randrange(256)]) + blob[at + 1:]
    elif damage < 0.08:
        blob = b"\xef\xbb\xbf" + blob
    return blob


def read_merge(folder: Path, blob: bytes, partner: dict[str, Any] | None) -> str:
    """`onnx-parity merge` of the mutant (with its partner shard, if any), writing every
    report; "merged" (exit 0 or 1) or "refused" (exit 2, one line saying why)."""
    from onnx_parity.cli.main import merge_command
    from onnx_parity.report.publish import ReportSettings

    paths = [folder / "mutant.json"]
    paths[0].write_bytes(blob)
    if partner is not None:
        paths.append(folder / "partner.json")
        paths[1].write_text(json.dumps(partner), encoding="utf-8")
    settings = ReportSettings(json=folder / "out.json", junit=folder / "out.xml",
                              summary=folder / "out.md")
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = merge_command(paths, settings)
    if code == 2:
        lines = err.getvalue().splitlines()
        assert len(lines) == 1 and lines[0].startswith("onnx-parity merge: error: "), lines
        return "refused"
    assert code in (0, 1), code
    return "merged"


def read_baseline(folder: Path, blob: bytes, current: Any) -> str:
    """The mutant as `--baseline` of a run whose results are `current`'s, through the reports
    written with it; "compared" or "not compared" (the warning)."""
    import dataclasses

    from onnx_parity.compare.baseline import gone_cases, run_record
    from onnx_parity.compare.chain import Rules, judge
    from onnx_parity.report import junit, summary
    from onnx_parity.report.comment import comment_markdown
    from onnx_parity.report.jsonfile import json_string, read_baseline
    from onnx_parity.report.publish import write_github
    from onnx_parity.results import RunReport

    path = folder / "baseline.json"
    path.write_bytes(blob)
    baseline = read_baseline(str(path))
    from onnx_parity.spec.model import Regression

    rules = Rules(baseline=baseline, regression=Regression(latency=1.5))
    cases = [judge(dataclasses.replace(case, baseline=None), rules) for case in current.cases]
    gone = gone_cases(baseline, [c.id for c in cases], lambda _: True)
    report = RunReport(current.spec_path, current.environment, tuple(cases),
                       baseline=run_record(baseline, current.environment, None, gone),
                       plan=current.plan)
    json_string(report)
    junit.junit_xml_string(report)
    summary.summary_markdown(report)
    comment_markdown(report, "key")
    from onnx_parity.report.publish import ReportSettings

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        write_github(ReportSettings(), report)
    return "compared" if baseline.usable else "not compared"


def read_durations(folder: Path, blob: bytes, cases: Any) -> str:
    """The mutant as `--durations` of a run's shards: "by seconds", or "by count" (the
    warning)."""
    from onnx_parity.cli.run import _durations
    from onnx_parity.plan.shard import assign_models

    path = folder / "durations.json"
    path.write_bytes(blob)
    with contextlib.redirect_stderr(io.StringIO()):
        durations = _durations(path)
    assign_models(cases, 3, durations.seconds if durations is not None else None)
    return "by count" if durations is None else "by seconds"


def run(count: int, seed: int, folder: Path, keep: Path | None = None,
        readers: tuple[str, ...] = READERS) -> dict[str, Counter[str]]:
    """`count` mutants per reader; the outcomes counted per reader. An escaped exception
    propagates, with the mutant kept under `keep` (or `folder`) as escaped-<reader>.json."""
    from onnx_parity.plan.cases import Case
    from onnx_parity.report.jsonfile import from_dict
    from onnx_parity.spec import DatasetSpec, ModelSpec, TargetSpec

    rich, first, second = seed_reports()
    current = from_dict(copy.deepcopy(rich))
    target, dataset = TargetSpec("cpu", ("CPUExecutionProvider",)), DatasetSpec("d", "random")
    cases = [Case(f"{name}[{b}]", ModelSpec(name=name, line=1), 18, "dynamo", target, dataset, b)
             for name in ("m", "n", "o", "p") for b in (1, 2)]
    rng = random.Random(seed)
    outcomes: dict[str, Counter[str]] = {reader: Counter() for reader in readers}
    calls: dict[str, Callable[[bytes], str]] = {
        "merge": lambda blob: read_merge(folder, blob, second if rng.random() < 0.5 else None),
        "baseline": lambda blob: read_baseline(folder, blob, current),
        "durations": lambda blob: read_durations(folder, blob, cases),
    }
    for index in range(count):
        for reader in readers:
            doc = first if reader == "merge" else rng.choice((rich, first))
            blob = mutant(doc, rng)
            if keep is not None:
                (keep / f"{reader}-{index:05d}.json").write_bytes(blob)
            try:
                outcomes[reader][calls[reader](blob)] += 1
            except BaseException:
                (keep or folder).joinpath(f"escaped-{reader}.json").write_bytes(blob)
                raise
    return outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=3000, help="mutants per reader")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", type=Path, help="write every mutant here")
    args = parser.parse_args(argv)
    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
    os.environ.update(GITHUB_ACTIONS="true")  # annotations too; no summary file, no comment
    with tempfile.TemporaryDirectory(prefix="report-fuzz-") as work:
        try:
            outcomes = run(args.count, args.seed, Path(work), args.keep)
        except BaseException:
            traceback.print_exc()
            print(f"a mutant escaped; it is kept as escaped-<reader>.json in "
                  f"{args.keep or 'the temporary folder'}", file=sys.stderr)
            return 1
    for reader, counted in outcomes.items():
        print(f"{reader:>10}: " + ", ".join(f"{n} {what}" for what, n in counted.most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
