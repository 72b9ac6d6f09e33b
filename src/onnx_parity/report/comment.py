"""The pull-request comment's Markdown: the headline counts, then only what changed against the
baseline (one line per case), or without one the failures, worst first; bounded to GitHub's
65,535 characters, and found again by its hidden marker.

Reads a RunReport and nothing else; report/pullrequest.py posts it.
"""

from __future__ import annotations

from dataclasses import dataclass

from onnx_parity.escape import markdown_text, one_line
from onnx_parity.report import trend
from onnx_parity.report.describe import case_reason, counts_text, run_mark, sentence_case
from onnx_parity.report.rank import FAILING, severity, spread_over_models, worst_first
from onnx_parity.results import CaseResult, RunReport

COMMENT_LIMIT = 65_535  # GitHub refuses a longer comment body (characters)
MARKER_PREFIX = "<!-- onnx-parity:comment"
FAILURES_SHOWN = 20  # failing cases listed when there is no baseline to compare with
REASON_LIMIT = 300
_KEY_LIMIT = 200


@dataclass(frozen=True)
class Change:
    """One case's line in the comment: what changed for it since the baseline."""

    kind: str  # one of _ORDER
    case: str
    text: str


# The order changes are listed in, and so which stay when the comment must be cut.
_ORDER = ("new error", "new failure", "regression", "expected failure", "fixed", "new", "gone")
_MARKS = {"new error": "💥", "new failure": "❌", "regression": "⚠️", "expected failure": "🔶",
          "fixed": "✅", "new": "🆕", "gone": "➖"}
_NOT_PASSING = (*FAILING, "xfailed")  # what a case that passes now was "fixed" from


def marker(key: str) -> str:
    """The hidden first line that finds this comment again: one per key (the spec and the
    job), so that two specs checked in one pull request keep a comment each."""
    safe = one_line(key, _KEY_LIMIT).replace("--", "- -").replace(">", "›")
    return f"{MARKER_PREFIX} {safe} -->"


def comment_key(spec_path: str, workflow: str | None, job: str | None) -> str:
    """`parity.yaml @ parity/check`: the spec, and the workflow and job that check it."""
    where = "/".join(part for part in (workflow, job) if part)
    return f"{spec_path} @ {where}" if where else spec_path


def changes(report: RunReport) -> list[Change]:
    """What changed since the baseline, worst first: cases that fail now and passed then (errors
    first), regressions, cases that fail now as their model's `expect` says (a failure on
    record is still a change), cases fixed, cases new since the baseline, cases gone from it."""
    found: list[tuple[int, tuple[int, float], Change]] = []
    for case in report.cases:
        change = _change(case)
        if change is not None:
            found.append((_ORDER.index(change.kind), severity(case), change))
    found.sort(key=lambda item: (item[0], (-item[1][0], -item[1][1])))
    listed = [change for _, _, change in found]
    listed += [Change("gone", case_id, "in the baseline, not in this run")
               for case_id in trend.gone(report)]
    return listed


def _change(case: CaseResult) -> Change | None:
    record = case.baseline
    if record is None:
        return None
    if record.status == "new":
        if case.status == "xfailed":
            verdict = case_reason(case)
        elif case.status in FAILING:
            verdict = f"{case.status}: {case_reason(case)}"
        else:
            verdict = case.status
        return Change("new", case.id, f"new since the baseline, {verdict}")
    growth = Change("regression", case.id, case_reason(case) or "its error grew")
    if record.regressed and all(output.passed for output in case.outputs):
        return growth  # within tolerance: the growth is what failed it
    before = record.before
    if case.status in FAILING and before is not None and before not in FAILING:
        kind = "new error" if case.status == "error" else "new failure"
        return Change(kind, case.id, f"{before} in the baseline; now {case_reason(case)}")
    if case.status == "xfailed" and before is not None and before not in _NOT_PASSING:
        return Change("expected failure", case.id,
                      f"{before} in the baseline; now {case_reason(case)}")
    if record.regressed:
        return growth
    if case.status == "passed" and before in _NOT_PASSING:
        return Change("fixed", case.id, f"{before} in the baseline, passes now")
    return None


def comment_markdown(report: RunReport, key: str, run_url: str | None = None,
                     limit: int = COMMENT_LIMIT) -> str:
    """The comment's body: the marker, the counts, the changes (or the failures), the link.
    Over `limit` characters it keeps the first lines, worst first, and says how many more the
    job summary has."""
    counts = report.counts
    head = (f"{marker(key)}\n## {run_mark(report)} onnx-parity: {counts_text(counts)}\n\n"
            f"{len(report.cases)} cases from {_md(report.spec_path)}"
            + ("" if report.complete else "; **the run did not finish**") + "\n\n")
    tail = f"\n[The run's job summary]({run_url}) has every case.\n" if run_url else ""
    if trend.compared(report):
        headline = _md(trend.headline(report))
        head += f"{sentence_case(headline)}.\n\n"
        listed = changes(report)
        if not listed:
            return head + "No change against the baseline.\n" + tail
        lines = [f"- {_MARKS[c.kind]} **{c.kind}** {_md(c.case)}: {_md(c.text, REASON_LIMIT)}"
                 for c in listed]
        return head + _fit(lines, limit - len(head) - len(tail), "change") + tail
    if report.baseline is not None:  # asked for, but could not be read
        head += f"> ⚠️ {_md(trend.headline(report))}\n\n"
    failing = spread_over_models(worst_first(report.cases))
    if not failing:
        return head + "No case failed.\n" + tail
    lines = [f"- {'💥' if c.status == 'error' else '❌'} {_md(c.id)}: "
             f"{_md(case_reason(c), REASON_LIMIT)}" for c in failing[:FAILURES_SHOWN]]
    if len(failing) > FAILURES_SHOWN:
        lines.append(f"- … and {len(failing) - FAILURES_SHOWN} more failing cases")
    return head + _fit(lines, limit - len(head) - len(tail), "line") + tail


def _fit(lines: list[str], budget: int, word: str) -> str:
    """As many whole lines as fit in `budget` characters, with a last line that says how many
    were left out."""
    kept: list[str] = []
    used = 0
    for index, line in enumerate(lines):
        after = len(lines) - index - 1
        reserve = len(_cut_note(after, word)) + 1 if after else 0
        if used + len(line) + 1 + reserve > budget:
            kept.append(_cut_note(len(lines) - index, word))
            break
        kept.append(line)
        used += len(line) + 1
    return "\n".join(kept) + "\n"


def _cut_note(left: int, word: str) -> str:
    return (f"- … and {left} more {word}{'s' * (left != 1)}, cut to fit GitHub's comment size; "
            "the job summary lists them all")


def _md(text: str, limit: int | None = None) -> str:
    """User text as literal Markdown on one line; `@` made inert, so a model name never
    mentions anyone."""
    return markdown_text(one_line(text, limit)).replace("@", "&#64;")
