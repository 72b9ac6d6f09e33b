"""The job summary's latency: per model and target, the median time per call (per step, for a
rollout) of ONNX Runtime and of PyTorch over its cases and their ratio; under --profile, the
costliest nodes of the slowest cases with their providers; and the JUnit properties of one
case's latency."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from onnx_parity.escape import markdown_cell, one_line
from onnx_parity.findings import LatencyRecord
from onnx_parity.results import CaseResult, RunReport
from onnx_parity.wording import fmt_ms

PROFILED_CASES = 10  # cases whose costliest nodes the summary lists, slowest first


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _cell(ms: float | None) -> str:
    return "—" if ms is None else fmt_ms(ms)


def latency_section(report: RunReport) -> str:
    """A table of the timed cases' medians per model and target, then --profile's nodes."""
    groups: dict[tuple[str, str], list[LatencyRecord]] = {}
    for case in report.cases:
        if case.details.latency is not None:
            groups.setdefault((case.model, case.target), []).append(case.details.latency)
    if not groups:
        return ""
    rows = []
    for (model, target), found in groups.items():
        ort = _median([x.onnxruntime.median_ms for x in found])
        torch = _median([x.pytorch.median_ms for x in found if x.pytorch is not None])
        ratio = f"{ort / torch:.2f}×" if ort is not None and torch else "—"
        per = " (per step)" if all(x.per == "step" for x in found) else ""
        rows.append(f"| {markdown_cell(one_line(model, 200))}{per} | {markdown_cell(target)} "
                    f"| {_cell(ort)} | {_cell(torch)} | {ratio} | {len(found)} |\n")
    return ("<details><summary>Latency: median time per call</summary>\n\n"
            "ONNX Runtime and PyTorch on each case's inputs, on the target's device, one "
            "thread; the median over the model's cases on that target; a rollout's per step, "
            "each side on ONNX Runtime's own feeds of its steps. A ratio above 1: ONNX "
            "Runtime is slower.\n\n"
            "| Model | Target | ONNX Runtime | PyTorch | ONNX Runtime / PyTorch | Cases |\n"
            "| --- | --- | --: | --: | --: | --: |\n" + "".join(rows) + "\n"
            + _profile_block(report) + "</details>\n\n")


def _ort_ms(case: CaseResult) -> float:
    return case.details.latency.onnxruntime.median_ms if case.details.latency else 0.0


def _profile_block(report: RunReport) -> str:
    profiled = [c for c in report.cases
                if c.details.latency is not None and c.details.latency.costliest]
    if not profiled:
        return ""
    profiled.sort(key=lambda c: -_ort_ms(c))
    blocks = []
    for case in profiled[:PROFILED_CASES]:
        latency = case.details.latency
        assert latency is not None
        rows = "".join(f"| {markdown_cell(one_line(n.node, 120))} | {markdown_cell(n.op_type)} "
                       f"| {markdown_cell(n.provider)} | {fmt_ms(n.ms)} |\n"
                       for n in latency.costliest)
        blocks.append(f"**Costliest nodes of `{markdown_cell(one_line(case.id, 200))}`** "
                      f"({fmt_ms(latency.onnxruntime.median_ms)} per call):\n\n"
                      "| Node | Op | Provider | Time per call |\n| --- | --- | --- | --: |\n"
                      + rows + "\n")
    more = (f"{len(profiled) - PROFILED_CASES} more profiled cases in the JSON report.\n\n"
            if len(profiled) > PROFILED_CASES else "")
    return "".join(blocks) + more


def junit_properties(case: CaseResult) -> list[tuple[str, str]]:
    """`latency.onnxruntime_ms` and its quartiles, `latency.pytorch_ms`, `latency.ratio`,
    the baseline's median where there was one, and `latency.per` `step` for a rollout's."""
    latency = case.details.latency
    if latency is None:
        return []
    ort = latency.onnxruntime
    found = [("latency.onnxruntime_ms", repr(ort.median_ms)),
             ("latency.onnxruntime_q1_ms", repr(ort.q1_ms)),
             ("latency.onnxruntime_q3_ms", repr(ort.q3_ms)),
             ("latency.device", ort.device)]
    if latency.per != "call":
        found.append(("latency.per", latency.per))
    if latency.pytorch is not None:
        found.append(("latency.pytorch_ms", repr(latency.pytorch.median_ms)))
    if latency.ratio is not None:
        found.append(("latency.ratio", repr(latency.ratio)))
    if latency.cpu is not None:
        found.append(("latency.onnxruntime_cpu_ms", repr(latency.cpu.median_ms)))
    if latency.baseline_ms is not None:
        found.append(("latency.baseline_ms", repr(latency.baseline_ms)))
    return found
