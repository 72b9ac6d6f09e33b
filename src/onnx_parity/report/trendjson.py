"""A case's trend against a baseline and the run's baseline and environment, to and from the
JSON report: CaseTrend and BaselineRun as the report's `baseline` objects, and `environment`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from onnx_parity.literals import STATUSES, Status
from onnx_parity.report.jsonvalues import Reader, ReportFormatError, free, json_float, opt_float
from onnx_parity.report.preflightjson import preflight_dict, read_preflight
from onnx_parity.results import (
    BaselineRun,
    CaseTrend,
    Direction,
    OutputTrend,
    PreflightRecord,
    SettingChange,
    Trend,
)

# The words a trend may hold, as the Literal types that hold them.
_TREND_STATUSES: dict[str | None, Literal["new", "compared", "not compared"]] = {
    "new": "new", "compared": "compared", "not compared": "not compared"}
_STATUSES: dict[str | None, Status] = {status: status for status in STATUSES}
_CHECKS: dict[str | None, Literal["on", "off"]] = {"on": "on", "off": "off"}
_TRENDS: dict[str | None, Trend] = {"up": "up", "down": "down", "same": "same"}
_DIRECTIONS: dict[str | None, Direction] = {"tightened": "tightened", "loosened": "loosened",
                                            "changed": "changed"}


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
    if t.before is not None:
        out["before"] = t.before
    if t.settings:
        out["settings"] = [{"setting": c.setting, "output": c.output, "before": c.before,
                            "after": c.after, "direction": c.direction} for c in t.settings]
    return out


def _read_change(r: Reader) -> SettingChange:
    return SettingChange(setting=r.text("setting"), before=r.text("before"),
                         after=r.text("after"), output=r.opt_text("output"),
                         direction=_DIRECTIONS.get(r.opt_text("direction"), "changed"))


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
        before=_STATUSES.get(r.opt_text("before")),
        settings=tuple(_read_change(c) for c in r.objects("settings")),
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


def read_environment(r: Reader,
                     ) -> tuple[dict[str, Any], PreflightRecord | None, str | None]:
    """The report's `environment` object as the versions, the preflight and the shard."""
    environment = r.at("environment")
    shard = environment.data.get("shard")
    preflight = (read_preflight(environment.at("preflight"))
                 if environment.data.get("preflight") is not None else None)
    versions = {k: v for k, v in environment.data.items() if k not in ("preflight", "shard")}
    return versions, preflight, None if shard is None else str(shard)


def environment_dict(environment: Mapping[str, Any], preflight: PreflightRecord | None,
                     shard: str | None) -> dict[str, Any]:
    """The report's `environment` object: the versions, then the preflight and the shard."""
    out = {k: free(v) for k, v in environment.items()}
    if preflight is not None:
        out["preflight"] = preflight_dict(preflight)
    if shard is not None:
        out["shard"] = shard
    return out
