"""The JSON report: a RunReport to and from a versioned, lossless file (shard merging reads it)."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from onnx_parity.frozen import frozen
from onnx_parity.literals import EXPORTERS, PRECISIONS, STAGES, STATUSES
from onnx_parity.plan.shard import model_seconds
from onnx_parity.report.jsonlimits import read_bounded
from onnx_parity.report.jsonvalues import Reader as _Reader
from onnx_parity.report.jsonvalues import ReportFormatError as ReportFormatError
from onnx_parity.report.jsonvalues import json_float as _float
from onnx_parity.report.jsonvalues import json_ints as _ints
from onnx_parity.report.jsonvalues import opt_float as _opt_float
from onnx_parity.report.records import (
    details_dict,
    expectation_dict,
    read_details,
    read_expectation,
)
from onnx_parity.report.trend import regressed_outputs
from onnx_parity.report.trendjson import (
    baseline_run_dict,
    environment_dict,
    read_baseline_run,
    read_environment,
    read_trend,
    trend_dict,
)
from onnx_parity.report.untrusted import load_report, parse_report
from onnx_parity.results import (
    OUTPUT_KINDS,
    CaseResult,
    Histogram,
    Matching,
    OutputComparison,
    PlanRecord,
    RunReport,
)

if TYPE_CHECKING:
    from onnx_parity.compare.baseline import Baseline
    from onnx_parity.report.texts import CaseTexts

FORMAT_VERSION = 1


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write `text` as UTF-8 so that readers see the old file or the new one, never half of one.

    The temporary file lives in the target's folder because os.replace is only atomic within
    one file system.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        # mkstemp makes the file private (0600); a report should get the usual permissions.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temp, 0o666 & ~umask)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _output_dict(o: OutputComparison, keep_histogram: bool) -> dict[str, Any]:
    """One output; its error histogram only where it failed or regressed (keep_histogram)."""
    return {
        "name": o.name, "passed": o.passed, "max_abs": _float(o.max_abs),
        "max_rel": _float(o.max_rel), "mean_abs": _float(o.mean_abs),
        "mismatches": int(o.mismatches), "elements": int(o.elements),
        "mismatch_share": _float(o.mismatch_share), "atol": _float(o.atol),
        "rtol": _float(o.rtol), "required_atol": _opt_float(o.required_atol),
        "worst_index": _ints(o.worst_index), "worst_expected": _opt_float(o.worst_expected),
        "worst_actual": _opt_float(o.worst_actual), "expected_shape": _ints(o.expected_shape),
        "actual_shape": _ints(o.actual_shape), "expected_dtype": o.expected_dtype,
        "actual_dtype": o.actual_dtype, "message": o.message, "powerless": o.powerless,
        "metrics": {name: _float(value) for name, value in o.metrics.items()},
        "criteria": list(o.criteria), "scale": _opt_float(o.scale),
        "histogram": _histogram_dict(o.histogram) if keep_histogram else None,
        # What wording needs to say the verdict again (sentences.output_sentence)
        "kind": o.kind, "samples": int(o.samples), "placement": int(o.placement),
        "finite": None if o.finite is None else int(o.finite),
        "thresholds": {n: _float(v) for n, v in o.thresholds.items()}, "failed": list(o.failed),
        "quoted": None if o.quoted is None else list(o.quoted), "sample": o.sample,
        "where": o.where, "actual_scale": _opt_float(o.actual_scale),
        "matching": _matching_dict(o.matching),
    }


def _matching_dict(m: Matching | None) -> dict[str, Any] | None:
    if m is None:
        return None
    return {"iou": _float(m.iou), "matched": m.matched, "only_expected": m.only_expected,
            "only_actual": m.only_actual, "best_expected": _opt_float(m.best_expected),
            "best_actual": _opt_float(m.best_actual), "reference": m.reference}


def _read_matching(r: _Reader) -> Matching | None:
    if r.data.get("matching") is None:
        return None
    m = r.at("matching")
    return Matching(iou=m.number("iou"), matched=m.integer("matched"),
                    only_expected=m.integer("only_expected", 0),
                    only_actual=m.integer("only_actual", 0),
                    best_expected=m.opt_number("best_expected"),
                    best_actual=m.opt_number("best_actual"),
                    reference=m.text("reference", "the reference"))


def _histogram_dict(h: Histogram | None) -> dict[str, Any] | None:
    if h is None:
        return None
    return {"edges": [_float(edge) for edge in h.edges], "counts": list(h.counts),
            "nonfinite": h.nonfinite}


def _case_dict(c: CaseResult) -> dict[str, Any]:
    regressed = regressed_outputs(c)
    return {
        "id": c.id,
        "model": c.model,
        "opset": c.opset,
        "exporter": c.exporter,
        "target": c.target,
        "dataset": c.dataset,
        "batch_size": c.batch_size,
        "precision": c.precision,
        "status": c.status,
        "stage": c.stage,
        "message": c.message,
        "seconds": _float(c.seconds),
        "line": c.line,
        "notes": list(c.notes),
        "details": details_dict(c.details),
        "outputs": [_output_dict(o, not o.passed or o.name in regressed) for o in c.outputs],
        "baseline": trend_dict(c.baseline) if c.baseline is not None else None,
        "settings": dict(c.settings),
        "tolerance_line": c.tolerance_line,
    }


def to_dict(report: RunReport) -> dict[str, Any]:
    """The report as JSON-ready values; key order is fixed so the file is byte-stable."""
    return {**_head_dict(report), "cases": [_case_dict(c) for c in report.cases]}


def _head_dict(report: RunReport) -> dict[str, Any]:
    """Everything but the cases, which come last."""
    counts = report.counts
    return {
        "version": FORMAT_VERSION,
        "spec": report.spec_path,
        "seconds": _float(report.seconds),
        "complete": report.complete,
        "environment": environment_dict(report.environment, report.preflight, report.shard),
        "summary": {
            "passed": counts["passed"],
            "failed": counts["failed"],
            "errors": counts["error"],
            "skipped": counts["skipped"],
            "xfailed": counts["xfailed"],
        },
        "baseline": baseline_run_dict(report.baseline) if report.baseline is not None else None,
        "unmatched_expectations": [expectation_dict(e) for e in report.unmatched],
        "plan": _plan_dict(report.plan) if report.plan is not None else None,
    }


def _plan_dict(p: PlanRecord) -> dict[str, Any]:
    return {"spec_sha256": p.spec_sha256, "onnx_parity": p.version, "split": p.split,
            "durations_sha256": p.durations_sha256,
            "shard": None if p.shard is None else {"index": p.shard[0], "count": p.shard[1]},
            "cases": list(p.cases)}


def _read_plan(r: _Reader) -> PlanRecord:
    split = r.text("split")
    if split not in ("count", "durations"):
        raise ReportFormatError(f"{r.where}.split: {split!r} is not count or durations")
    shard = None
    if r.data.get("shard") is not None:
        s = r.at("shard")
        index, count = s.integer("index"), s.integer("count")
        if not 1 <= index <= count:
            raise ReportFormatError(f"{s.where}: shard {index} of {count} is not one of 1 to "
                                    f"{count}")
        shard = (index, count)
    return PlanRecord(spec_sha256=r.text("spec_sha256"), cases=r.texts("cases"),
                      version=r.text("onnx_parity"),
                      split="durations" if split == "durations" else "count",
                      durations_sha256=r.opt_text("durations_sha256"), shard=shard)


def case_line(case: CaseResult, texts: CaseTexts | None = None) -> str:
    """A case as the JSON report's line of it, made once where `texts` keeps it
    (report/texts.py)."""
    if texts is None:
        return _case_line(case)
    return texts.part("json", case, _case_line)


def _case_line(case: CaseResult) -> str:
    # ensure_ascii keeps the file valid UTF-8 even when a message holds a lone surrogate.
    return json.dumps(_case_dict(case), ensure_ascii=True, allow_nan=False)


def json_string(report: RunReport, texts: CaseTexts | None = None) -> str:
    """The report as JSON text: indented, each case on a line of its own. json writes a value
    without indentation in C, and with it in Python, 3 to 4 times slower: the cases are most
    of a large report, and the report is written again as cases end (report/live.py), each
    case's line made once where `texts` keeps them (report/texts.py)."""
    cases = [case_line(case, texts) for case in report.cases]
    head = json.dumps(_head_dict(report), indent=2, ensure_ascii=True, allow_nan=False)
    body = "[\n" + ",\n".join("    " + case for case in cases) + "\n  ]" if cases else "[]"
    return head.removesuffix("\n}") + f',\n  "cases": {body}\n}}\n'


def write_json(report: RunReport, path: str | os.PathLike[str],
               texts: CaseTexts | None = None) -> None:
    """Write the JSON report atomically."""
    write_text_atomic(path, json_string(report, texts))


def _read_output(r: _Reader) -> OutputComparison:
    # mismatch_share is derived from mismatches/elements, so it is written but not read.
    return OutputComparison(
        name=r.text("name"), passed=r.flag("passed"), atol=r.number("atol"),
        rtol=r.number("rtol"), elements=r.integer("elements", 0),
        mismatches=r.integer("mismatches", 0), max_abs=r.number("max_abs", 0.0),
        max_rel=r.number("max_rel", 0.0), mean_abs=r.number("mean_abs", 0.0),
        required_atol=r.opt_number("required_atol"), worst_index=r.opt_integers("worst_index"),
        worst_expected=r.opt_number("worst_expected"), worst_actual=r.opt_number("worst_actual"),
        expected_shape=r.opt_integers("expected_shape"),
        actual_shape=r.opt_integers("actual_shape"), expected_dtype=r.opt_text("expected_dtype"),
        actual_dtype=r.opt_text("actual_dtype"), message=r.text("message", ""),
        powerless=r.flag("powerless", False),
        metrics={name: r.at("metrics").number(name) for name in r.mapping("metrics")},
        criteria=r.texts("criteria"), scale=r.opt_number("scale"), histogram=_read_histogram(r),
        # Reports from before kinds lack the rest: wording reads those outputs from the figures.
        kind=r.opt_one_of("kind", OUTPUT_KINDS), samples=r.integer("samples", 1),
        placement=r.integer("placement", 0),
        finite=r.opt_integer("finite"), failed=r.texts("failed"), where=r.text("where", ""),
        thresholds={n: r.at("thresholds").number(n) for n in r.mapping("thresholds")},
        quoted=_read_quoted(r), sample=r.opt_integer("sample"),
        actual_scale=r.opt_number("actual_scale"), matching=_read_matching(r),
    )


def _read_quoted(r: _Reader) -> tuple[str, str] | None:
    quoted = r.texts("quoted") if r.data.get("quoted") is not None else None
    if quoted is not None and len(quoted) != 2:
        raise ReportFormatError(f"{r.where}.quoted: expected two strings, found {len(quoted)}")
    return None if quoted is None else (quoted[0], quoted[1])


def _read_histogram(r: _Reader) -> Histogram | None:
    if r.data.get("histogram") is None:
        return None
    h = r.at("histogram")
    edges = h.numbers("edges")
    counts = h.opt_integers("counts") or ()
    if len(counts) != len(edges) - 1:
        raise ReportFormatError(f"{h.where}: {len(edges)} edges need {len(edges) - 1} counts, "
                                f"found {len(counts)}")
    return Histogram(edges=edges, counts=counts, nonfinite=h.integer("nonfinite", 0))


def _read_case(r: _Reader) -> CaseResult:
    return CaseResult(
        id=r.text("id"),
        model=r.text("model"),
        opset=r.opt_integer("opset"),
        exporter=r.opt_one_of("exporter", EXPORTERS),
        target=r.text("target"),
        dataset=r.text("dataset"),
        batch_size=r.opt_integer("batch_size"),
        precision=r.one_of("precision", PRECISIONS, "fp32"),
        status=r.one_of("status", STATUSES),
        stage=r.opt_one_of("stage", STAGES),
        message=r.text("message", ""),
        seconds=r.number("seconds", 0.0),
        outputs=tuple(_read_output(o) for o in r.objects("outputs")),
        notes=r.texts("notes"),
        line=r.opt_integer("line"),
        details=read_details(r.at("details")),
        baseline=read_trend(r.at("baseline")) if r.data.get("baseline") is not None else None,
        settings=_read_settings(r),
        tolerance_line=r.opt_integer("tolerance_line"),
    )


def _read_settings(r: _Reader) -> dict[str, str]:
    """The case's effective settings; none in a report from before they were recorded."""
    found = r.mapping("settings")
    for key, value in found.items():
        if not isinstance(value, str):
            raise ReportFormatError(f"{r.where}.settings.{key}: expected a string")
    return dict(found)


def from_dict(data: Any, where: str = "report") -> RunReport:
    """The RunReport that `to_dict` turned into `data`."""
    r = _Reader(data, where)
    version = r.integer("version")
    if version != FORMAT_VERSION:
        raise ReportFormatError(
            f"{where}: report format version {version}; this onnx-parity reads version "
            f"{FORMAT_VERSION}"
        )
    environment, preflight, shard = read_environment(r)
    return RunReport(
        spec_path=r.text("spec"),
        environment=environment,
        cases=tuple(_read_case(c) for c in r.objects("cases")),
        seconds=r.number("seconds", 0.0),
        baseline=(read_baseline_run(r.at("baseline")) if r.data.get("baseline") is not None
                  else None),
        preflight=preflight,
        shard=shard,
        complete=r.flag("complete", True),
        unmatched=tuple(read_expectation(e) for e in r.objects("unmatched_expectations")),
        plan=_read_plan(r.at("plan")) if r.data.get("plan") is not None else None,
    )


def read_json(path: str | os.PathLike[str]) -> RunReport:
    """Read a report written by `write_json`, as untrusted input (report/untrusted.py); raises
    ReportFormatError naming the file and the bad field, or OSError for a file not there."""
    return from_dict(load_report(path), str(path))


@frozen
class Durations:
    """What `--durations` balances the shards by: each model's seconds in an earlier report,
    and that report's digest, which every shard records (PlanRecord)."""

    seconds: dict[str, float]
    sha256: str


def read_durations(path: str | os.PathLike[str]) -> Durations:
    """Each model's seconds in a JSON report (plan/shard.py's model_seconds); raises as
    read_json does. The digest is of the bytes read, once."""
    data = read_bounded(path)
    report = from_dict(parse_report(data, str(path)), str(path))
    return Durations(model_seconds(report.cases), hashlib.sha256(data).hexdigest())


def read_baseline(path: str) -> Baseline:
    """Read a JSON report as the baseline. A missing or unreadable file is not an error of the
    run: the Baseline says why, and the reports say the check was not done."""
    from onnx_parity.compare.baseline import Baseline  # numpy: only a run with --baseline

    try:
        report = read_json(path)
    except FileNotFoundError:
        return Baseline(path, problem=f"{path} does not exist (no run on the base branch has "
                                      "left a report yet?)")
    except (OSError, ReportFormatError) as exc:
        return Baseline(path, problem=f"{path} cannot be read as an onnx-parity JSON report: "
                                      f"{exc}")
    return Baseline(path, report, cases={case.id: case for case in report.cases})
