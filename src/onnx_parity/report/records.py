"""What a case's run found beside its verdict, to and from the JSON report, with its JSON Schema:
CaseDetails as the report's `details` object. The one place these values meet JSON's keys; every
report reads the typed values (the trend against a baseline: report/trendjson.py).

Each record of findings.py has its schema fragment, its writer and its reader here, side by side,
so a field is added in two places: its type and here. (Not on the type itself: findings.py is a
leaf every stage reads, and the reader and the schema's words are the report's.) report/schema.py
takes `details`' schema from here.
"""

from __future__ import annotations

from typing import Any

from onnx_parity.findings import (
    ENDINGS,
    EXPECTATION_VERDICTS,
    EXPECTED_STATUSES,
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
from onnx_parity.metrics.sqnr import KEY as SQNR_KEY
from onnx_parity.report.jsonvalues import (
    BOOL,
    COUNT,
    INT,
    MS,
    NUMBER,
    NUMS,
    OBJ,
    OPT_INT,
    OPT_NUM,
    OPT_STR,
    STR,
    STRS,
    Reader,
    ReportFormatError,
    free,
    json_float,
    list_of,
    object_of,
    opt_float,
    or_null,
)

_DETAILS = ("divergence", "cause", "causes_ruled_out", "numerics", "providers", "bundle",
            "float16", "not_compared", "export_log", "worker_log", "rollout",
            "expectation", "latency", "tokens", "cache")


# -- details --------------------------------------------------------------------------------------

def details_dict(d: CaseDetails) -> dict[str, Any]:
    """Only what the run found: an empty CaseDetails is {}."""
    out: dict[str, Any] = {}
    if d.numerics is not None:
        out["numerics"] = _numerics_dict(d.numerics)
    if d.providers is not None:
        out["providers"] = _providers_dict(d.providers)
    if d.not_compared:
        out["not_compared"] = list(d.not_compared)
    if d.cause is not None:
        out["cause"] = _cause_dict(d.cause)
    if d.causes_ruled_out:
        out["causes_ruled_out"] = [_cause_dict(c) for c in d.causes_ruled_out]
    if d.divergence is not None:
        out["divergence"] = _drift_dict(d.divergence)
    if d.bundle is not None:
        out["bundle"] = _bundle_dict(d.bundle)
    if d.float16 is not None:
        out["float16"] = _float16_dict(d.float16)
    if d.export_log is not None:
        out["export_log"] = d.export_log
    if d.worker_log:
        out["worker_log"] = list(d.worker_log)
    if d.rollout is not None:
        out["rollout"] = _rollout_dict(d.rollout)
    if d.expectation is not None:
        out["expectation"] = expectation_dict(d.expectation)
    if d.latency is not None:
        out["latency"] = _latency_dict(d.latency)
    if d.tokens is not None:
        out["tokens"] = _tokens_dict(d.tokens)
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
        providers=_read_providers(r.at("providers")) if data.get("providers") is not None
        else None,
        bundle=_read_bundle(r.at("bundle")) if data.get("bundle") else None,
        float16=_read_float16(r.at("float16")) if data.get("float16") else None,
        not_compared=r.texts("not_compared"),
        export_log=r.opt_text("export_log"),
        worker_log=r.texts("worker_log"),
        other={k: v for k, v in data.items() if k not in _DETAILS},
        rollout=_read_rollout(r.at("rollout")) if data.get("rollout") else None,
        expectation=read_expectation(r.at("expectation")) if data.get("expectation") else None,
        latency=_read_latency(r.at("latency")) if data.get("latency") else None,
        tokens=_read_tokens(r.at("tokens")) if data.get("tokens") else None,
        cache={k: str(v) for k, v in r.mapping("cache").items()}
        if data.get("cache") is not None else None,
    )


# -- each record's schema, its JSON and its reading, together -------------------------------------

# Left open: the nodes' op types and the runtime's facts are whatever the session reported.
_PROVIDERS_SCHEMA = OBJ


def _providers_dict(p: ProvidersRecord) -> dict[str, Any]:
    """What the record holds, in the judge's order; what it lacks stays out."""
    values = {"requested": None if p.requested is None else list(p.requested),
              "active": None if p.active is None else list(p.active),
              "nodes": None if p.nodes is None else {
                  provider: {op: int(n) for op, n in ops.items()}
                  for provider, ops in p.nodes.items()},
              "cpu_shape_nodes": None if p.cpu_shape_nodes is None else {
                  op: int(n) for op, n in p.cpu_shape_nodes.items()},
              "fallback_reason": p.fallback_reason,
              "runtime": None if p.runtime is None else dict(p.runtime)}
    return {key: value for key, value in values.items() if value is not None}


def _read_providers(r: Reader) -> ProvidersRecord:
    def counts(c: Reader) -> dict[str, int]:
        return {op: c.integer(op) for op in c.data}

    has = r.data.keys()
    nodes = r.at("nodes")
    return ProvidersRecord(
        requested=r.texts("requested") if "requested" in has else None,
        active=r.texts("active") if "active" in has else None,
        nodes={p: counts(nodes.at(p)) for p in nodes.data} if "nodes" in has else None,
        cpu_shape_nodes=counts(r.at("cpu_shape_nodes")) if "cpu_shape_nodes" in has else None,
        fallback_reason=r.opt_text("fallback_reason"),
        runtime={k: r.at("runtime").text(k) for k in r.at("runtime").data}
        if "runtime" in has else None)


_ROLLOUT_SCHEMA = object_of({
    "steps": COUNT, "feedback": {"type": "object", "additionalProperties": STR},
    "first_failing": OPT_INT, "judged": OPT_INT, "output": OPT_STR,
    "growth": OPT_NUM, "growth_from": OPT_INT, "floor": NUMBER,
    "per_step": list_of(object_of({"step": INT, "passed": BOOL, "max_abs": NUMS,
                                   "failing": STRS}, ("step", "passed"))),
}, ("steps",))


def _rollout_dict(r: RolloutRecord) -> dict[str, Any]:
    return {"steps": r.steps, "feedback": dict(r.feedback), "first_failing": r.first_failing,
            "judged": r.judged, "output": r.output, "growth": opt_float(r.growth),
            "growth_from": r.growth_from, "floor": json_float(r.floor),
            "per_step": [{"step": s.step, "passed": s.passed,
                          "max_abs": {k: json_float(v) for k, v in s.max_abs.items()},
                          "failing": list(s.failing)} for s in r.per_step]}


def _read_rollout(r: Reader) -> RolloutRecord:
    return RolloutRecord(
        steps=r.integer("steps"),
        feedback={str(k): str(v) for k, v in r.mapping("feedback").items()},
        first_failing=r.opt_integer("first_failing"), judged=r.opt_integer("judged"),
        output=r.opt_text("output"), growth=r.opt_number("growth"),
        growth_from=r.opt_integer("growth_from"), floor=r.number("floor", 0.0),
        per_step=tuple(RolloutStep(step=s.integer("step"), passed=s.flag("passed"),
                                   max_abs={k: s.at("max_abs").number(k)
                                            for k in s.mapping("max_abs")},
                                   failing=s.texts("failing"))
                       for s in r.objects("per_step")))


EXPECTATION_SCHEMA = object_of({"model": STR, "cases": STR, "status": STR, "reason": STR,
                                "until": OPT_STR, "line": OPT_INT, "stage": OPT_STR,
                                "verdict": STR, "ended": STR}, ("status",))


def expectation_dict(e: ExpectationRecord) -> dict[str, Any]:
    """A known failure on record: on a case (`details.expectation`, with its verdict and how
    the case ended) or in the run's `unmatched_expectations`."""
    out: dict[str, Any] = {"model": e.model, "cases": e.cases, "status": e.status,
                           "reason": e.reason, "until": e.until, "line": e.line,
                           "stage": e.stage}
    if e.verdict:
        out.update(verdict=e.verdict, ended=e.ended)
    return out


def read_expectation(r: Reader) -> ExpectationRecord:
    return ExpectationRecord(model=r.text("model", ""),
                             status=r.one_of("status", EXPECTED_STATUSES),
                             reason=r.text("reason", ""), cases=r.text("cases", "*"),
                             until=r.opt_text("until"), line=r.opt_integer("line"),
                             verdict=r.one_of("verdict", EXPECTATION_VERDICTS, ""),
                             ended=r.one_of("ended", ENDINGS, ""), stage=r.opt_text("stage"))


_TIMES_SCHEMA = or_null(object_of({
    "median_ms": {"type": "number", "exclusiveMinimum": 0}, "q1_ms": MS, "q3_ms": MS,
    "repeats": {"type": "integer", "minimum": 1}, "device": STR,
}, ("median_ms", "q1_ms", "q3_ms", "repeats")))
_LATENCY_SCHEMA = object_of({
    "onnxruntime": _TIMES_SCHEMA, "pytorch": _TIMES_SCHEMA, "cpu": _TIMES_SCHEMA,
    "ratio": OPT_NUM, "seconds": MS,
    "baseline_ms": or_null({"type": "number", "exclusiveMinimum": 0}),
    "regressed": BOOL, "profile": OPT_STR, "per": {"enum": ["call", "step"]},
    "costliest": list_of(object_of({"node": STR, "op_type": STR, "provider": STR,
                                    "ms": MS}, ("node", "op_type", "provider", "ms"))),
}, ("onnxruntime",))


def _latency_dict(x: LatencyRecord) -> dict[str, Any]:
    """Milliseconds per call: each side's median, quartiles and repeats, and the ratio."""
    def times(t: CallTimes | None) -> dict[str, Any] | None:
        return None if t is None else {"median_ms": t.median_ms, "q1_ms": t.q1_ms,
                                       "q3_ms": t.q3_ms, "repeats": t.repeats,
                                       "device": t.device}

    out: dict[str, Any] = {"onnxruntime": times(x.onnxruntime), "pytorch": times(x.pytorch),
                           "ratio": opt_float(x.ratio), "seconds": x.seconds}
    if x.cpu is not None:
        out["cpu"] = times(x.cpu)
    if x.baseline_ms is not None:
        out |= {"baseline_ms": x.baseline_ms, "regressed": x.regressed}
    if x.costliest:
        out["costliest"] = [{"node": n.node, "op_type": n.op_type, "provider": n.provider,
                             "ms": n.ms} for n in x.costliest]
    if x.profile is not None:
        out["profile"] = x.profile
    if x.per != "call":
        out["per"] = x.per
    return out


def _read_latency(r: Reader) -> LatencyRecord:
    def times(key: str) -> CallTimes | None:
        if not r.data.get(key):
            return None
        t = r.at(key)
        return CallTimes(median_ms=t.number("median_ms"), q1_ms=t.number("q1_ms"),
                         q3_ms=t.number("q3_ms"), repeats=t.integer("repeats"),
                         device=t.text("device", "cpu"))

    ort = times("onnxruntime")
    if ort is None:
        raise ReportFormatError("latency without its onnxruntime times")
    return LatencyRecord(
        onnxruntime=ort, pytorch=times("pytorch"), ratio=r.opt_number("ratio"),
        cpu=times("cpu"), seconds=r.number("seconds", 0.0),
        baseline_ms=r.opt_number("baseline_ms"), regressed=r.flag("regressed", False),
        costliest=tuple(NodeCost(node=c.text("node"), op_type=c.text("op_type"),
                                 provider=c.text("provider"), ms=c.number("ms"))
                        for c in r.objects("costliest")),
        profile=r.opt_text("profile"), per="step" if r.opt_text("per") == "step" else "call")


_TOKENS_SCHEMA = object_of({
    "steps": COUNT, "agreed": COUNT, "comparable": COUNT, "step": OPT_INT,
    "sample": OPT_INT, "row": OPT_INT, "expected": OPT_INT, "actual": OPT_INT,
    "gap": OPT_NUM, "allowed": OPT_NUM, "near_tie": BOOL,
}, ("steps", "agreed", "comparable"))


def _tokens_dict(t: TokenRecord) -> dict[str, Any]:
    return {"steps": t.steps, "agreed": t.agreed, "comparable": t.comparable, "step": t.step,
            "sample": t.sample, "row": t.row, "expected": t.expected, "actual": t.actual,
            "gap": opt_float(t.gap), "allowed": opt_float(t.allowed), "near_tie": t.near_tie,
            "diverged": t.diverged}


def _read_tokens(r: Reader) -> TokenRecord:
    return TokenRecord(steps=r.integer("steps"), agreed=r.integer("agreed"),
                       comparable=r.integer("comparable"), step=r.opt_integer("step"),
                       sample=r.opt_integer("sample"), row=r.opt_integer("row"),
                       expected=r.opt_integer("expected"), actual=r.opt_integer("actual"),
                       gap=r.opt_number("gap"), allowed=r.opt_number("allowed"),
                       near_tie=r.flag("near_tie", False),
                       diverged=r.opt_integer("diverged") or 0)


_CAUSE_SCHEMA = object_of({"kind": STR, "proven": BOOL, "message": STR, "setting": STR,
                           "output": OPT_STR, "before": OBJ, "after": OBJ,
                           "provider_options": OBJ}, ("kind", "proven"))


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


_NUMERICS_SCHEMA = object_of({"provider_options": OBJ, "gpu": OPT_STR,
                              "compute_capability": OPT_STR, "session_options": OBJ,
                              "tf32_override": OPT_STR})


def _numerics_dict(n: NumericsRecord) -> dict[str, Any]:
    out: dict[str, Any] = {"provider_options": free(n.provider_options), "gpu": n.gpu,
                           "compute_capability": n.compute_capability, "tf32": n.tf32}
    if n.session_options:
        out["session_options"] = free(n.session_options)
    if n.tf32_override is not None:
        out["tf32_override"] = n.tf32_override
    return out


def _read_numerics(r: Reader) -> NumericsRecord:
    tf32 = r.data.get("tf32")
    return NumericsRecord(provider_options=r.mapping("provider_options"), gpu=r.opt_text("gpu"),
                          compute_capability=r.opt_text("compute_capability"),
                          tf32=tf32 if isinstance(tf32, bool) else None,
                          session_options=r.mapping("session_options"),
                          tf32_override=r.opt_text("tf32_override"))


_BUNDLE_SCHEMA = object_of({"path": OPT_STR, "command": OPT_STR, "error": OPT_STR})


def _bundle_dict(b: BundleRecord) -> dict[str, Any]:
    return {k: v for k, v in (("path", b.path), ("command", b.command), ("error", b.error))
            if v is not None}


def _read_bundle(r: Reader) -> BundleRecord:
    return BundleRecord(path=r.opt_text("path"), command=r.opt_text("command"),
                        error=r.opt_text("error"))


_RANGE_SCHEMA = object_of({"tensor": STR, "kind": STR, "max_abs": NUMBER, "node": OPT_STR,
                           "op_type": OPT_STR, "module": OPT_STR}, ("tensor", "kind", "max_abs"))

_FLOAT16_SCHEMA = object_of({"nodes": or_null(COUNT), "float16_nodes": or_null(COUNT),
                             "range_checked": BOOL, "leaving": COUNT,
                             "ranges": list_of(_RANGE_SCHEMA), "failing": or_null(_RANGE_SCHEMA),
                             "reference_overflow": STRS})


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


_STEP_SCHEMA = object_of({"tensor": STR, "node": OPT_STR, "op_type": OPT_STR, "module": OPT_STR,
                          "within": BOOL, "max_abs": OPT_NUM, SQNR_KEY: OPT_NUM,
                          "nonfinite": OPT_STR})

_DRIFT_SCHEMA = object_of({
    "verdict": STR, "headline": STR, "summary": STR, "reference": STR,
    "sample": OPT_INT, "compared": COUNT, "node": OPT_STR, "op_type": OPT_STR,
    "module": OPT_STR, "module_type": OPT_STR, "tensor": OPT_STR, "max_abs": OPT_NUM,
    "path": list_of(_STEP_SCHEMA), "segment": STRS, "other_origins": COUNT,
    "threshold_db": OPT_NUM, SQNR_KEY: OPT_NUM, "worst": list_of(_STEP_SCHEMA),
    "seconds": or_null({"type": "number"}),
}, ("verdict",))


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
                "threshold_db": opt_float(d.threshold_db), SQNR_KEY: opt_float(d.sqnr),
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
        threshold_db=r.opt_number("threshold_db"), sqnr=r.opt_number(SQNR_KEY),
        worst=tuple(_read_step(s) for s in r.objects("worst")),
        seconds=r.opt_number("seconds"),
    )



def _step_dict(s: PathStep) -> dict[str, Any]:
    out: dict[str, Any] = {"node": s.node, "op_type": s.op_type, "module": s.module,
                           "tensor": s.tensor}
    if s.max_abs is not None:
        out["max_abs"] = json_float(s.max_abs)
    if s.sqnr is not None:
        out[SQNR_KEY] = json_float(s.sqnr)
    if s.nonfinite:
        out["nonfinite"] = s.nonfinite
    out["within"] = s.within
    return out


def _read_step(r: Reader) -> PathStep:
    within = r.data.get("within", True)
    return PathStep(tensor=r.text("tensor", ""), node=r.opt_text("node"),
                    op_type=r.opt_text("op_type"), module=r.opt_text("module"),
                    within=bool(within), max_abs=r.opt_number("max_abs"),
                    sqnr=r.opt_number(SQNR_KEY), nonfinite=r.opt_text("nonfinite") or "")


# The schema of `details` (report/schema.py reads it), each record's own above.
DETAILS_SCHEMA = object_of({
    "divergence": or_null(_DRIFT_SCHEMA), "cause": or_null(_CAUSE_SCHEMA),
    "causes_ruled_out": list_of(_CAUSE_SCHEMA), "numerics": or_null(_NUMERICS_SCHEMA),
    "providers": or_null(_PROVIDERS_SCHEMA), "bundle": or_null(_BUNDLE_SCHEMA),
    "float16": or_null(_FLOAT16_SCHEMA),
    "not_compared": STRS, "export_log": OPT_STR, "worker_log": STRS,
    "rollout": or_null(_ROLLOUT_SCHEMA), "expectation": or_null(EXPECTATION_SCHEMA),
    "latency": or_null(_LATENCY_SCHEMA), "tokens": or_null(_TOKENS_SCHEMA),
    "cache": or_null({"type": "object", "additionalProperties": STR}),
})
