"""The GPU preflight as the reports show it: a headline, the findings with their fixes, and
what it meant for the run's GPU cases. Reads RunReport.preflight (machine/preflight.py's
record, or read back from a JSON report), so no report needs the checks themselves."""

from __future__ import annotations

from typing import Literal

from onnx_parity.results import PreflightRecord

_MARKS = {"ok": "ok", "warn": "WARN", "fail": "FAIL"}


def headline(preflight: PreflightRecord) -> str:
    """One line: whether CUDA is usable here, and how many problems and warnings say so."""
    fails = sum(f.status == "fail" for f in preflight.findings)
    warns = sum(f.status == "warn" for f in preflight.findings)
    verdict = "CUDA is usable here" if preflight.usable else "CUDA is NOT usable here"
    counts = ", ".join(f"{n} {word}{'s' * (n != 1)}" for n, word in
                       ((fails, "problem"), (warns, "warning")) if n)
    return f"GPU preflight: {verdict}" + (f" ({counts})" if counts else "")


def render_lines(preflight: PreflightRecord) -> list[str]:
    """The findings as an aligned table, each problem followed by its fix."""
    width = max((len(f.check) for f in preflight.findings), default=5)
    lines = [headline(preflight)]
    for finding in preflight.findings:
        lines.append(f"  {_MARKS[finding.status]:<4}  {finding.check:<{width}}  {finding.found}")
        if finding.fix and finding.status != "ok":
            lines.append(f"  {'':<4}  {'':<{width}}  fix: {finding.fix}")
    lines.append(f"  compatibility table: {preflight.table}; "
                 f"checked in {preflight.seconds:.2f}s")
    return lines


def render_text(preflight: PreflightRecord) -> str:
    return "\n".join(render_lines(preflight)) + "\n"


def outcome(preflight: PreflightRecord) -> Literal["passed", "failed", "skipped"]:
    """The preflight as a test result in a run's reports: passed when CUDA is usable, skipped
    when the run skipped its GPU cases for it (--skip-unavailable), failed otherwise."""
    if preflight.usable:
        return "passed"
    return "skipped" if preflight.skipped_cases else "failed"


def consequence(preflight: PreflightRecord) -> str:
    """What the preflight meant for the run's GPU cases, in one sentence."""
    count = preflight.gpu_cases or 0
    cases = f"{count} case{'s' * (count != 1)} on GPU targets"
    if preflight.usable:
        return f"The {cases} ran."
    if preflight.skipped_cases:
        return f"The {cases} were skipped (--skip-unavailable)."
    return (f"The {cases} ran anyway; each one's result says what ONNX Runtime did there. "
            "Pass --skip-unavailable to mark them skipped instead.")
