"""The pull-request comment's Markdown: the headline counts, what changed against the baseline
(one entry per case), then every case still failing, worst first, each with what failed, its
cause or where its drift starts, the settings that changed, and the next step; bounded to
GitHub's 65,535 characters, and found again by its hidden marker.

Reads a RunReport and nothing else; report/pullrequest.py posts it.
"""

from __future__ import annotations

from onnx_parity.escape import markdown_text, one_line
from onnx_parity.frozen import frozen
from onnx_parity.report import trend
from onnx_parity.report.advice import next_step, settings_text, what_failed, why
from onnx_parity.report.describe import case_reason, counts_text, run_mark, sentence_case
from onnx_parity.report.github import REASON_LIMIT
from onnx_parity.report.rank import FAILING, severity, spread_over_models, worst_first
from onnx_parity.results import CaseResult, RunReport

COMMENT_LIMIT = 65_535  # GitHub refuses a longer comment body (characters)
MARKER_PREFIX = "<!-- onnx-parity:comment"
FAILURES_SHOWN = 20  # failing cases listed beyond the changes, worst first
DETAIL_LIMIT = 600  # a cause's line: its fix comes last, so it is kept whole where it can be
_KEY_LIMIT = 200


@frozen
class Change:
    """One case's line in the comment: what changed for it since the baseline."""

    kind: str  # one of _ORDER
    case: str
    text: str
    result: CaseResult | None = None  # None for a case gone from this run


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
    found: list[tuple[int, tuple[int, int, float], Change]] = []
    for case in report.cases:
        change = _change(case)
        if change is not None:
            change = Change(change.kind, change.case, change.text, case)
            found.append((_ORDER.index(change.kind), severity(case), change))
    found.sort(key=lambda item: (item[0], tuple(-x for x in item[1])))
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
    """The comment's body: the marker, the counts, the changes against the baseline, then every
    case still failing (all the failures, without a baseline), the link. Over `limit`
    characters it keeps the first entries, worst first, and says how many more the job summary
    has."""
    counts = report.counts
    spec = report.spec_path
    head = (f"{marker(key)}\n## {run_mark(report)} onnx-parity: {counts_text(counts)}\n\n"
            f"{len(report.cases)} cases from {_md(spec)}"
            + ("" if report.complete else "; **the run did not finish**") + "\n\n")
    tail = f"\n[The run's job summary]({run_url}) has every case.\n" if run_url else ""
    listed: list[Change] = []
    if trend.compared(report):
        head += f"{sentence_case(_md(trend.headline(report)))}.\n\n"
        listed = changes(report)
        if listed:
            head += "### Changed in this pull request\n\n"
    elif report.baseline is not None:  # asked for, but could not be read
        head += f"> ⚠️ {_md(trend.headline(report))}\n\n"
    shown = {c.case for c in listed}
    failing = [c for c in spread_over_models(worst_first(report.cases)) if c.id not in shown]
    budget = limit - len(head) - len(tail)
    title = ("\n### Still failing, worst first\n\n" if trend.compared(report)
             else "\n### Failing, worst first\n\n" if listed else "")
    # The changes first; the cases still failing keep room for their title and one line.
    reserve = len(title) + len(_cut_note(len(failing), "failing case")) + 2 if failing else 0
    body = (_fit([_change_entry(c, spec) for c in listed], budget - reserve, "change")
            if listed else "")
    if trend.compared(report) and not listed:
        body = "No change against the baseline.\n"
    if failing:
        entries = [_entry(c, spec) for c in failing[:FAILURES_SHOWN]]
        body += title + _fit(entries, budget - len(body) - len(title), "failing case",
                             total=len(failing))
    elif not trend.compared(report):
        body = "No case failed.\n"
    return head + body + tail


def _mark(case: CaseResult) -> str:
    return "💥" if case.status == "error" else "❌"


def _entry(case: CaseResult, spec: str, lead: str = "", text: str = "") -> str:
    """One failing case: its line (`text`, or what failed), then what changed in its settings,
    its cause or where its drift starts, and the next step, each a line of its own under it."""
    said = text or what_failed(case)
    lines = [f"- {lead or _mark(case)} {_md(case.id)}: {_md(said, REASON_LIMIT)}"]
    lines += [f"  - {_md(under, DETAIL_LIMIT)}" for under in (settings_text(case), why(case))
              if under]
    lines.append(f"  - **next:** {_md(next_step(case, spec), DETAIL_LIMIT)}")
    return "\n".join(lines)


def _change_entry(change: Change, spec: str) -> str:
    """A change's entry: a case failing now as a failing case's entry, with the change as its
    line; any other its line, and the settings that changed under it."""
    case = change.result
    lead = f"{_MARKS[change.kind]} **{change.kind}**"
    if case is not None and case.status in FAILING:
        return _entry(case, spec, lead, change.text)
    line = f"- {lead} {_md(change.case)}: {_md(change.text, REASON_LIMIT)}"
    settings = settings_text(case) if case is not None else ""
    return line + (f"\n  - {_md(settings, DETAIL_LIMIT)}" if settings else "")


def _fit(lines: list[str], budget: int, word: str, total: int | None = None) -> str:
    """As many whole entries (each one or more lines) as fit in `budget` characters, with a
    last line that says how many of `total` (all the lines, unless given) were left out: cut
    to fit where the budget ran out, else beyond the lines given. "" where not even that line
    fits."""
    total = len(lines) if total is None else total
    kept: list[str] = []
    used = 0
    for index, line in enumerate(lines):
        after = total - index - 1
        reserve = len(_cut_note(after, word)) + 1 if after else 0
        if used + len(line) + 1 + reserve > budget:
            break
        kept.append(line)
        used += len(line) + 1
    left = total - len(kept)
    if left:
        note = _cut_note(left, word) if len(kept) < len(lines) else _more_note(left, word)
        if used + len(note) + 1 > budget:
            return "\n".join(kept) + "\n" if kept else ""
        kept.append(note)
    return "\n".join(kept) + "\n" if kept else ""


def _more_note(left: int, word: str) -> str:
    return f"- … and {left} more {word}{'s' * (left != 1)}"


def _cut_note(left: int, word: str) -> str:
    return (f"- … and {left} more {word}{'s' * (left != 1)}, cut to fit GitHub's comment size; "
            "the job summary lists them all")


def _md(text: str, limit: int | None = None) -> str:
    """User text as literal Markdown on one line; `@` made inert, so a model name never
    mentions anyone."""
    return markdown_text(one_line(text, limit)).replace("@", "&#64;")
