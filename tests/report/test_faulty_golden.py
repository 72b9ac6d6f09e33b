"""What users read from a real run of examples/faulty.yaml, against tests/golden/faulty.txt: each
planted fault as the console, the GitHub annotations and the job summary word it.

What is the machine's rather than the run's is normalised: times, paths, the environment table,
and float32 rounding, which differs from one CPU's kernels to the next: figures below 1e-5 read
"<1e-5", and a case whose failure is rounding itself (attention-exact, with a tolerance of 0)
keeps its words but not its figures, nor the names localization finds for it. The error
histograms are figures, not sentences, and are left out. The other figures, and the bars of the
stream's chart of its error per step, are compared as measurements (tests/figures.py): within
their printed digits and 5%, a bar within a level; the words, counts and steps exactly. So the
golden holds on any x86-64 CPU: the last test computes the stream with PyTorch's kernels for
another instruction set, and tests/report/test_figures.py moves every figure and bar of the
golden file as far as another CPU's rounding moves them.

Run with UPDATE_GOLDEN=1 to rewrite the golden file, then read its diff.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from figures import differences
from helpers import ROOT
from report_fixtures import GOLDEN, check_golden

pytestmark = pytest.mark.slow

_CASE_LINE = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED) +(\S+) \(")


def _console(out: str, order: list[str], rounding: set[str]) -> list[str]:
    """The console's case lines, each with the lines under it, in the report's order (cases
    finish in whatever order the workers take), then the table that closes the run."""
    blocks: dict[str, list[str]] = {}
    rest: list[str] = []
    current: str | None = None
    for line in out.splitlines():
        found = _CASE_LINE.match(line)
        if found:
            current = found[2]
            blocks.setdefault(current, []).append(line)
        elif current is not None and line.startswith(" ") and line.strip():
            blocks[current].append(_masked(line) if current in rounding else line)
        else:
            current = None
            rest.append(line)
    assert sorted(blocks) == sorted(order), out
    return [line for case in order for line in blocks[case]] + rest


def _masked(text: str) -> str:
    """A rounding case's words without its figures and the names localization found."""
    text = re.sub(r"path: [^|]*", "path: … ", text)
    text = re.sub(r"'[^']*'", "'…'", text)
    text = re.sub(r"module \S+ \(\w+\)", "module …", text)
    return re.sub(r"(?<![\w.%])-?\d+(?:\.\d+)?(?:e-?\d+)?", "#", text)  # not in names


def _normalised(text: str, tmp_path: Path, rounding: set[str]) -> str:
    from onnx_parity.escape import markdown_cell

    text = text.replace(str(tmp_path), "<tmp>").replace(f"{ROOT}/", "")
    # Times: a case's seconds on the console, in the summary's Time column, the run's total.
    text = re.sub(r"\b\d+\.\d+s\b", "…s", text)
    text = re.sub(r"<details><summary>(Environment|Error histograms)</summary>.*?</details>\n",
                  "", text, flags=re.DOTALL)
    # The charts have their own golden (charts.md); the latency is the machine's.
    text = re.sub(r"<details><summary>(Charts: headroom per case|Latency: median time per "
                  r"call)</summary>.*?</details>\n\n", "", text, flags=re.DOTALL)
    # The latency's notes are the machine's: ONNX Runtime slower than PyTorch on this runner.
    text = re.sub(r"(<br>)?note: ONNX Runtime is [\d.]+× slower than PyTorch[^|<\n]*", "", text)
    text = re.sub(r"\n +note: ONNX Runtime is [\d.]+× slower than PyTorch[^\n]*", "", text)
    text = re.sub(r"^.*slower than PyTorch.*\n", "", text, flags=re.MULTILINE)
    lines = []
    for line in text.split("\n"):
        for case in rounding:
            for shown in (case, markdown_cell(case)):
                head, found, tail = line.partition(shown)
                if found:
                    line = head + found + _masked(tail)
        lines.append(line)
    return re.sub(r"\b\d\.\de-(?:[6-9]|\d\d)\b|(?<=max abs )0\b", "<1e-5", "\n".join(lines))


def _text(out: str, tmp_path: Path) -> str:
    """What users read from a run of examples/faulty.yaml, normalised: the console, the
    annotations and the job summary."""
    from onnx_parity.report import github
    from onnx_parity.report.jsonfile import read_json

    report = read_json(tmp_path / "report.json")
    # A failure that is float32 rounding: every failing output off by less than 1e-5
    rounding = {case.id for case in report.cases if case.status == "failed" and all(
        o.max_abs < 1e-5 for o in case.outputs if not o.passed)}
    text = "\n".join([
        "## console",
        *_console(out, [case.id for case in report.cases], rounding),
        "## GitHub annotations",
        *github.annotations(report, "examples/faulty.yaml"),
        "",
        "## job summary",
        (tmp_path / "summary.md").read_text(encoding="utf-8"),
    ])
    return _normalised(text, tmp_path, rounding)


def test_the_faulty_examples_read_as_the_golden_file(run_cli: Callable[..., Any],
                                                     tmp_path: Path) -> None:
    code, out, _, _ = run_cli(ROOT / "examples" / "faulty.yaml",
                              "--summary", str(tmp_path / "summary.md"))
    assert code == 1, out
    text = _text(out, tmp_path)
    assert "FAILED  attention-exact[opset18-cpu-signs-b1] (…s): output_0: # of #" in text
    check_golden("faulty.txt", text, figures=True)


def test_the_stream_reads_as_the_golden_file_with_other_kernels(
        run_cli: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stream's drift computed by PyTorch's kernels for plain SSE, not this CPU's AVX2 or
    AVX-512 (its per-step errors move by up to 10%), reads as the golden file says."""
    for name, value in {"ATEN_CPU_CAPABILITY": "default", "DNNL_MAX_CPU_ISA": "SSE41",
                        "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}.items():
        monkeypatch.setenv(name, value)  # read by the spawned workers' torch
    code, out, _, _ = run_cli(ROOT / "examples" / "faulty.yaml", "--select", "stream-drift*",
                              "--summary", str(tmp_path / "summary.md"))
    assert code == 1, out

    def stream(text: str) -> str:
        return "\n".join(re.sub(" +", " ", line) for line in text.split("\n")
                         if "stream-drift" in line)

    golden = stream((GOLDEN / "faulty.txt").read_text(encoding="utf-8"))
    assert golden.count("\n") == 4  # the console line, its row, the annotation, the summary's two
    assert differences(golden, stream(_text(out, tmp_path))) == []
