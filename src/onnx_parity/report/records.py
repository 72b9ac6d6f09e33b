"""What a case's run found beside its verdict, and its trend against a baseline, to and from
the JSON report: CaseDetails, CaseTrend and BaselineRun as the report's `details`, `baseline`
objects. The one place these values meet JSON's keys; every report reads the typed values."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from onnx_parity.findings import (
    BundleRecord,
    CaseDetails,
    CauseRecord,
    DriftRecord,
    Float16Record,
    NumericsRecord,
    PathStep,
    RangeRecord,
)
from onnx_parity.report.jsonvalues import Reader, ReportFormatError, free, json_float, opt_float
from onnx_parity.results import BaselineRun, CaseTrend, OutputTrend, Trend

# The words a trend may hold, as the Literal types that hold them.
_TREND_STATUSES: dict[str | None, Literal["new", "compared", "not compared"]] = {
    "new": "new", "compared": "compared", "not compared": "not compared"}
_CHECKS: dict[str | None, Literal["on", "off"]] = {"on": "on", "off": "off"}
_TRENDS: dict[str | None, Trend] = {"up": "up", "down": "down", "same": "same"}
_DETAILS = ("divergence", "cause", "causes_ruled_out", "numerics", "providers", "bundle",
            "float16", "not_compared", "export_log", "worker_log", "cache")


# -- details --------------------------------------------------------------------------------------

def details_dict(d: CaseDetails) -> dict[str, Any]:
    """Only what the run found: an empty CaseDetails is {}."""
    out: dict[str, Any] = {}
    if d.numerics is not None:
        out["numerics"] = {"provider_options": free(d.numerics.provider_options),
                           "gpu": d.numerics.gpu,
                           "compute_capability": d.numerics.compute_capability,
                           "tf32": d.numerics.tf32}
        if d.numerics.session_options:
            out["numerics"]["session_options"] = free(d.numerics.session_options)
        if d.numerics.tf32_override is not None:
            out["numerics"]["tf32_override"] = d.numerics.tf32_override
    if d.providers is not None:
        out["providers"] = free(d.providers)
    if d.not_compared:
        out["not_compared"] = list(d.not_compared)
    if d.cause is not None:
        out["cause"] = _cause_dict(d.cause)
    if d.causes_ruled_out:
        out["causes_ruled_out"] = [_cause_dict(c) for c in d.causes_ruled_out]
    if d.divergence is not None:
        out["divergence"] = _drift_dict(d.divergence)
    if d.bundle is not None:
        out["bundle"] = {k: v for k, v in (("path", d.bundle.path), ("command", d.bundle.command),
                                           ("error", d.bundle.error)) if v is not None}
    if d.float16 is not None:
        out["float16"] = _float16_dict(d.float16)
    if d.export_log is not None:
        out["export_log"] = d.export_log
    if d.worker_log:
        out["worker_log"] = list(d.worker_log)
    if d.cache is not None:
        out["cache"] = dict(d.cache)
    out.update({k: free(v) for k, v in d.other.items() if k not in out})
    return out


def read_details(r: Reader) -> CaseDetails:
    data = r.data
    return CaseDetails(
        divergence=_read_drift(r.at("divergence")) if data.get("divergence") else None,
        cause=_read_cause(r.at("cause")) if data.get("cause") else None,
        causes_ruled_out=tuple(_read_cause(c) for c in r.objects("causes_ruled_out")),
        numerics=_read_numerics(r.at("numerics")) if data.get("numerics") else None,
        providers=r.mapping("providers") if data.get("providers") is not None else None,
        bundle=_read_bundle(r.at("bundle")) if data.get("bundle") else None,
        float16=_read_float16(r.at("float16")) if data.get("float16") else None,
        not_compared=r.texts("not_compared"),
        export_log=r.opt_text("export_log"),
        worker_log=r.texts("worker_log"),
        other={k: v for k, v in data.items() if k not in _DETAILS},
        cache={k: str(v) for k, v in r.mapping("cache").items()}
        if data.get("cache") is not None else None,
    )


def _cause_dict(c: CauseRecord) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": c.kind, "proven": c.proven, "setting": c.setting,
                           "output": c.output, "before": free(c.before),
                           "after": free(c.after), "message": c.message}
    if c.provider_options:
        out["provider_options"] = free(c.provider_options)
    return out


def _read_cause(r: Reader) -> CauseRecord:
    return CauseRecord(kind=r.text("kind"), proven=r.flag("proven"), message=r.text("message", ""),
                       setting=r.text("setting", ""), output=r.opt_text("output"),
                       before=r.mapping("before"), after=r.mapping("after"),
                       provider_options=r.mapping("provider_options"))


def _read_numerics(r: Reader) -> NumericsRecord:
    tf32 = r.data.get("tf32")
    return NumericsRecord(provider_options=r.mapping("provider_options"), gpu=r.opt_text("gpu"),
                          compute_capability=r.opt_text("compute_capability"),
                          tf32=tf32 if isinstance(tf32, bool) else None,
                          session_options=r.mapping("session_options"),
                          tf32_override=r.opt_text("tf32_override"))


def _read_bundle(r: Reader) -> BundleRecord:
    return BundleRecord(path=r.opt_text("path"), command=r.opt_text("command"),
                        error=r.opt_text("error"))


def _float16_dict(f: Float16Record) -> dict[str, Any]:
    out: dict[str, Any] = {"nodes": f.nodes, "float16_nodes": f.float16_nodes,
                           "range_checked": f.range_checked, "leaving": f.leaving,
                           "ranges": [_range_dict(r) for r in f.ranges]}
    if f.failing is not None:
        out["failing"] = _range_dict(f.failing)
    if f.reference_overflow:
        out["reference_overflow"] = list(f.reference_overflow)
    return out


def _range_dict(r: RangeRecord) -> dict[str, Any]:
    return {"tensor": r.tensor, "kind": r.kind, "max_abs": json_float(r.max_abs),
            "node": r.node, "op_type": r.op_type, "module": r.module}


def _read_float16(r: Reader) -> Float16Record:
    return Float16Record(
        nodes=r.opt_integer("nodes"), float16_nodes=r.opt_integer("float16_nodes"),
        range_checked=r.flag("range_checked", False), leaving=r.integer("leaving", 0),
        ranges=tuple(_read_range(x) for x in r.objects("ranges")),
        failing=_read_range(r.at("failing")) if r.data.get("failing") else None,
        reference_overflow=r.texts("reference_overflow"))


def _read_range(r: Reader) -> RangeRecord:
    return RangeRecord(tensor=r.text("tensor"), kind=r.text("kind"), max_abs=r.number("max_abs"),
                       node=r.opt_text("node"), op_type=r.opt_text("op_type"),
                       module=r.opt_text("module"))


def _drift_dict(d: DriftRecord) -> dict[str, Any]:
    out: dict[str, Any] = {
        "node": d.node, "op_type": d.op_type, "module": d.module, "max_abs": opt_float(d.max_abs),
        "path": [_step_dict(s) for s in d.path], "verdict": d.verdict, "headline": d.headline,
        "summary": d.summary, "reference": d.reference, "sample": d.sample,
        "compared": d.compared,
    }
    optional = {"tensor": d.tensor, "module_type": d.module_type,
                "other_origins": d.other_origins or None,
                "segment": list(d.segment) if d.segment else None,
                "threshold_db": opt_float(d.threshold_db), "sqnr_db": opt_float(d.sqnr_db),
                "worst": [_step_dict(s) for s in d.worst] if d.worst else None,
                "seconds": d.seconds}
    out.update({k: v for k, v in optional.items() if v is not None})
    return out


def _read_drift(r: Reader) -> DriftRecord:
    return DriftRecord(
        verdict=r.text("verdict"), headline=r.text("headline", ""), summary=r.text("summary", ""),
        reference=r.text("reference", ""), sample=r.opt_integer("sample"),
        compared=r.integer("compared", 0), node=r.opt_text("node"), op_type=r.opt_text("op_type"),
        module=r.opt_text("module"), module_type=r.opt_text("module_type"),
        tensor=r.opt_text("tensor"), max_abs=r.opt_number("max_abs"),
        path=tuple(_read_step(s) for s in r.objects("path")),
        segment=r.texts("segment"), other_origins=r.integer("other_origins", 0),
        threshold_db=r.opt_number("threshold_db"), sqnr_db=r.opt_number("sqnr_db"),
        worst=tuple(_read_step(s) for s in r.objects("worst")),
        seconds=r.opt_number("seconds"),
    )


def _step_dict(s: PathStep) -> dict[str, Any]:
    out: dict[str, Any] = {"node": s.node, "op_type": s.op_type, "module": s.module,
                           "tensor": s.tensor}
    if s.max_abs is not None:
        out["max_abs"] = json_float(s.max_abs)
    if s.sqnr_db is not None:
        out["sqnr_db"] = json_float(s.sqnr_db)
    if s.nonfinite:
        out["nonfinite"] = s.nonfinite
    out["within"] = s.within
    return out


def _read_step(r: Reader) -> PathStep:
    within = r.data.get("within", True)
    return PathStep(tensor=r.text("tensor", ""), node=r.opt_text("node"),
                    op_type=r.opt_text("op_type"), module=r.opt_text("module"),
                    within=bool(within), max_abs=r.opt_number("max_abs"),
                    sqnr_db=r.opt_number("sqnr_db"), nonfinite=r.opt_text("nonfinite") or "")


# -- against the baseline -------------------------------------------------------------------------

def trend_dict(t: CaseTrend) -> dict[str, Any]:
    out: dict[str, Any] = {"status": t.status}
    if t.reason:
        out["reason"] = t.reason
    if t.check is not None:
        out["check"] = t.check
    if t.factor is not None:
        out["factor"] = json_float(t.factor)
    if t.status == "compared":
        out.update(output=t.output, max_abs=opt_float(t.max_abs),
                   required_atol=opt_float(t.required_atol), ratio=opt_float(t.ratio),
                   trend=t.trend, regressed=t.regressed,
                   outputs={name: _output_trend_dict(o) for name, o in t.outputs.items()})
    if t.notes:
        out["notes"] = list(t.notes)
    return out


def _output_trend_dict(o: OutputTrend) -> dict[str, Any]:
    out: dict[str, Any] = {"max_abs": json_float(o.max_abs),
                           "required_atol": opt_float(o.required_atol),
                           "ratio": json_float(o.ratio), "floor": json_float(o.floor),
                           "trend": o.trend, "regressed": o.regressed}
    if o.metrics:
        out["metrics"] = {k: json_float(v) for k, v in o.metrics.items()}
    return out


def read_trend(r: Reader) -> CaseTrend:
    status = _TREND_STATUSES.get(r.text("status"))
    if status is None:
        raise ReportFormatError(f"{r.where}.status: {r.data['status']!r} is not new, compared "
                                "or not compared")
    return CaseTrend(
        status=status, reason=r.text("reason", ""), check=_CHECKS.get(r.opt_text("check")),
        factor=r.opt_number("factor"), output=r.opt_text("output"),
        max_abs=r.opt_number("max_abs"), required_atol=r.opt_number("required_atol"),
        ratio=r.opt_number("ratio"), trend=_TRENDS.get(r.opt_text("trend")),
        regressed=r.flag("regressed", False),
        outputs={name: _read_output_trend(r.at("outputs").at(name))
                 for name in r.mapping("outputs")},
        notes=r.texts("notes"),
    )


def _read_output_trend(r: Reader) -> OutputTrend:
    return OutputTrend(
        max_abs=r.number("max_abs"), required_atol=r.opt_number("required_atol"),
        ratio=r.number("ratio"), floor=r.number("floor", 0.0),
        trend=_TRENDS.get(r.text("trend", "same"), "same"),
        regressed=r.flag("regressed", False),
        metrics={k: r.at("metrics").number(k) for k in r.mapping("metrics")})


def baseline_run_dict(b: BaselineRun) -> dict[str, Any]:
    if not b.done:
        return {"path": b.path, "done": False, "problem": b.problem}
    return {"path": b.path, "done": True, "spec": b.spec,
            "environment": [list(change) for change in b.environment], "gone": list(b.gone)}


def read_baseline_run(r: Reader) -> BaselineRun:
    changes = []
    for index, change in enumerate(r.data.get("environment") or ()):
        if not (isinstance(change, list) and len(change) == 3
                and all(v is None or isinstance(v, str) for v in change)):
            raise ReportFormatError(f"{r.where}.environment[{index}]: expected "
                                    f"[what, before, after], found {change!r}")
        changes.append((str(change[0]), change[1], change[2]))
    return BaselineRun(path=r.text("path", "?"), done=r.flag("done", False),
                       problem=r.text("problem", ""), spec=r.opt_text("spec"),
                       environment=tuple(changes), gone=r.texts("gone"))


def read_environment(r: Reader) -> tuple[dict[str, Any], dict[str, Any] | None, str | None]:
    """The report's `environment` object as the versions, the preflight and the shard."""
    environment = r.mapping("environment")
    preflight, shard = environment.get("preflight"), environment.get("shard")
    if preflight is not None and not isinstance(preflight, dict):
        raise ReportFormatError(f"{r.where}.environment.preflight: expected an object")
    versions = {k: v for k, v in environment.items() if k not in ("preflight", "shard")}
    return versions, preflight, None if shard is None else str(shard)


def environment_dict(environment: Mapping[str, Any], preflight: Mapping[str, Any] | None,
                     shard: str | None) -> dict[str, Any]:
    """The report's `environment` object: the versions, then the preflight and the shard."""
    out = {k: free(v) for k, v in environment.items()}
    if preflight is not None:
        out["preflight"] = free(preflight)
    if shard is not None:
        out["shard"] = shard
    return out
