"""The GPU preflight to and from JSON: the report's `environment.preflight` and `doctor --json`,
the machine facts with it (a PreflightRecord, written as machine/preflight.py always wrote it)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from onnx_parity.findings import (
    DriverFacts,
    Gpu,
    LibraryFacts,
    MachineFacts,
    PluginFacts,
    RuntimeFacts,
    TorchFacts,
)
from onnx_parity.literals import COMPAT_TABLE
from onnx_parity.report.jsonvalues import Reader, free, json_float
from onnx_parity.results import LEVELS, Finding, PreflightRecord, Probe


def preflight_dict(p: PreflightRecord) -> dict[str, Any]:
    """The preflight's object; the case counts only where a run used it."""
    out: dict[str, Any] = {
        "usable": p.usable,
        "reason": p.reason,
        "seconds": json_float(p.seconds),
        "findings": [asdict(f) for f in p.findings],
        "probe": asdict(p.probe) if p.probe is not None else None,
        "table": p.table,
        "facts": facts_dict(p.facts),
    }
    if p.gpu_cases is not None:
        out["gpu_cases"] = p.gpu_cases
    if p.skipped_cases is not None:
        out["skipped_cases"] = p.skipped_cases
    return out


def facts_dict(facts: MachineFacts) -> dict[str, Any]:
    """Every fact, field by field in the dataclasses' order."""
    written: dict[str, Any] = free(asdict(facts))
    return written


def read_preflight(r: Reader) -> PreflightRecord:
    probe = r.at("probe") if r.data.get("probe") is not None else None
    return PreflightRecord(
        usable=r.flag("usable"), reason=r.text("reason", ""),
        findings=tuple(Finding(check=f.text("check"), status=f.one_of("status", LEVELS),
                               found=f.text("found", ""), fix=f.text("fix", ""))
                       for f in r.objects("findings")),
        facts=read_facts(r.at("facts")),
        table=r.text("table", COMPAT_TABLE),  # a report from before the preflight named it
        probe=None if probe is None else Probe(ran=probe.flag("ran"),
                                               usable=probe.flag("usable"),
                                               reason=probe.text("reason", "")),
        seconds=r.number("seconds", 0.0), gpu_cases=r.opt_integer("gpu_cases"),
        skipped_cases=r.opt_integer("skipped_cases"))


def read_facts(r: Reader) -> MachineFacts:
    """The facts as `facts_dict` wrote them, or as recorded for the tests (tests/data/doctor);
    what an older onnx-parity did not read takes its default."""
    driver, runtime, torch = r.at("driver"), r.at("runtime"), r.at("torch")
    plugin = runtime.at("cuda_plugin") if runtime.data.get("cuda_plugin") is not None else None
    return MachineFacts(
        driver=DriverFacts(
            source=driver.opt_text("source"), version=driver.opt_text("version"),
            cuda=driver.opt_text("cuda"), problems=driver.texts("problems"),
            gpus=tuple(Gpu(index=g.integer("index"), name=g.text("name"),
                           memory_mib=g.opt_integer("memory_mib"), compute=g.opt_text("compute"))
                       for g in driver.objects("gpus"))),
        runtime=RuntimeFacts(
            distributions=_texts(runtime.at("distributions")), package=runtime.opt_text("package"),
            version=runtime.opt_text("version"), cuda=runtime.opt_text("cuda"),
            folder=runtime.opt_text("folder"), locations=_texts(runtime.at("locations")),
            tensorrt=runtime.flag("tensorrt", False),
            cuda_plugin=None if plugin is None else PluginFacts(
                package=plugin.text("package"), version=plugin.text("version"),
                cuda=plugin.text("cuda"), library=plugin.opt_text("library"))),
        torch=TorchFacts(version=torch.opt_text("version"), cuda=torch.opt_text("cuda"),
                         cudnn=torch.opt_text("cudnn")),
        libraries=tuple(_read_library(lib) for lib in r.objects("libraries")),
        search=r.texts("search"))


def _read_library(r: Reader) -> LibraryFacts:
    return LibraryFacts(name=r.text("name"), soname=r.text("soname"), pip=r.text("pip"),
                        required=r.flag("required"), path=r.opt_text("path"),
                        version=r.opt_text("version"), origin=r.opt_text("origin"),
                        others=r.texts("others"), provider=r.opt_text("provider"),
                        pin=r.opt_text("pin"))


def _texts(r: Reader) -> dict[str, str]:
    return {key: r.text(key) for key in r.data}
