"""The GPU preflight as the reports show it: a headline, the findings with their fixes, and
what it meant for the run's GPU cases. Reads RunReport.preflight (machine/preflight.py's
Preflight.as_dict(), or read back from a JSON report), so no report needs the checks themselves."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

_MARKS = {"ok": "ok", "warn": "WARN", "fail": "FAIL"}


def headline(data: Mapping[str, Any]) -> str:
    """One line for a preflight as a dict (as_dict(), or read back from a JSON report)."""
    findings = data.get("findings", ())
    fails = sum(f.get("status") == "fail" for f in findings)
    warns = sum(f.get("status") == "warn" for f in findings)
    verdict = "CUDA is usable here" if data.get("usable") else "CUDA is NOT usable here"
    counts = ", ".join(f"{n} {word}{'s' * (n != 1)}" for n, word in
                       ((fails, "problem"), (warns, "warning")) if n)
    return f"GPU preflight: {verdict}" + (f" ({counts})" if counts else "")


def render_lines(data: Mapping[str, Any]) -> list[str]:
    """The findings as an aligned table, each problem followed by its fix."""
    findings = list(data.get("findings", ()))
    width = max((len(str(f.get("check", ""))) for f in findings), default=5)
    lines = [headline(data)]
    for finding in findings:
        mark = _MARKS.get(str(finding.get("status")), "?")
        lines.append(f"  {mark:<4}  {finding.get('check', '')!s:<{width}}  "
                     f"{finding.get('found', '')}")
        if finding.get("fix") and finding.get("status") != "ok":
            lines.append(f"  {'':<4}  {'':<{width}}  fix: {finding['fix']}")
    lines.append(f"  compatibility table: {data.get('table', 'onnx_parity/machine/compat.py')}; "
                 f"checked in {float(data.get('seconds', 0.0)):.2f}s")
    return lines


def render_text(preflight_data: Mapping[str, Any]) -> str:
    return "\n".join(render_lines(preflight_data)) + "\n"


def outcome(data: Mapping[str, Any]) -> Literal["passed", "failed", "skipped"]:
    """The preflight as a test result in a run's reports: passed when CUDA is usable, skipped
    when the run skipped its GPU cases for it (--skip-unavailable), failed otherwise."""
    if data.get("usable"):
        return "passed"
    return "skipped" if data.get("skipped_cases") else "failed"


def consequence(data: Mapping[str, Any]) -> str:
    """What the preflight meant for the run's GPU cases, in one sentence."""
    count = int(data.get("gpu_cases") or 0)
    cases = f"{count} case{'s' * (count != 1)} on GPU targets"
    if data.get("usable"):
        return f"The {cases} ran."
    if data.get("skipped_cases"):
        return f"The {cases} were skipped (--skip-unavailable)."
    return (f"The {cases} ran anyway; each one's result says what ONNX Runtime did there. "
            "Pass --skip-unavailable to mark them skipped instead.")
