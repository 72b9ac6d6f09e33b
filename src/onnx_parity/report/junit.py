"""The JUnit XML report: one testsuite per model, one testcase per case, numbers in the text."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from onnx_parity.errors import SpecProblem
from onnx_parity.escape import clean_text, one_line, visible
from onnx_parity.report.describe import (
    case_reason,
    cause_text,
    expectation_text,
    explanations,
    failing_outputs,
    fmt_seconds,
    models_in_order,
    output_details,
    path_step,
    value_text,
)
from onnx_parity.report.jsonfile import write_text_atomic
from onnx_parity.report.latency import junit_properties
from onnx_parity.report.preflight import consequence, outcome, render_lines
from onnx_parity.report.preflight import headline as preflight_headline
from onnx_parity.report.records import details_dict
from onnx_parity.report.trend import (
    case_notes,
    compared,
    environment_text,
    headline,
    trend_cell,
)
from onnx_parity.report.xmlout import attribute, element, empty_tag, start_tag
from onnx_parity.results import CaseResult, RunReport

if TYPE_CHECKING:
    from onnx_parity.report.texts import CaseTexts

# CI front ends show the message attribute on one line; the full text is in the element body.
MESSAGE_LIMIT = 500
# A result's status as the element its testcase holds for it (and its suite counts); none for a
# pass.
_OUTCOMES = {"failed": "failure", "error": "error", "skipped": "skipped", "xfailed": "skipped"}
_ERROR_TYPES = {
    "load": "LoadError",
    "export": "ExportError",
    "check": "CheckError",
    "run": "RunError",
    "compare": "CompareError",
}


def _xml_text(text: str) -> str:
    """Text that survives XML: no illegal characters (a lone surrogate, NUL, most control
    characters), and line ends XML parsers will not rewrite."""
    return clean_text(text).replace("\r\n", "\n").replace("\r", "\n")


def _case_facts(case: CaseResult) -> list[str]:
    opset = "?" if case.opset is None else str(case.opset)
    batch = "?" if case.batch_size is None else str(case.batch_size)
    lines = [
        f"{one_line(case.id)}: {case.status} in {fmt_seconds(case.seconds)}",
        f"model {one_line(case.model)}, opset {opset}, exporter {one_line(case.exporter or '-')},"
        f" target {one_line(case.target)}, dataset {one_line(case.dataset)}, batch size {batch}",
    ]
    if case.line is not None:
        lines.append(f"spec line {case.line}")
    return lines


def _outputs_text(case: CaseResult, only_failing: bool) -> list[str]:
    failing = failing_outputs(case)
    chosen = failing if only_failing else failing + [o for o in case.outputs if o.passed]
    lines: list[str] = []
    for output in chosen:
        lines.extend(output_details(output))
    return lines


def _notes_and_details(case: CaseResult) -> list[str]:
    lines = [f"note: {note}" for note in case.notes]
    if case.baseline is not None:
        lines.append(f"baseline: {trend_cell(case)}")
        lines.extend(f"baseline: {note}" for note in case_notes(case))
    lines.extend(f"{key}: {value_text(value)}"
                 for key, value in details_dict(case.details).items())
    return lines


def _system_out(case: CaseResult) -> str:
    lines = _case_facts(case)
    if case.status != "passed" and case.message:
        lines.append(case_reason(case))
    lines.extend(_outputs_text(case, only_failing=False))
    lines.extend(_notes_and_details(case))
    return "\n".join(lines) + "\n"


def _drift_lines(case: CaseResult) -> list[str]:
    """details["divergence"] (explain/localize/): its headline, its summary, then the error's growth
    along the path, one compared tensor a line."""
    divergence = case.details.divergence
    if divergence is None or not divergence.headline:
        return []
    lines = [divergence.headline, divergence.summary]
    if divergence.path:
        lines.append(f"error along the path, against {divergence.reference or '?'}:")
    for step in divergence.path:
        module = step.module
        lines.append(f"  {'within' if step.within else 'OFF':6}  {path_step(step):>8}"
                     f"  {step.op_type} '{step.node}'"
                     + (f" in module {module}" if module else
                        " in the top-level module" if module == "" else ""))
    return lines


class Testcase(NamedTuple):
    """A testcase as it stands in the document, and what its suite counts of it."""

    text: str  # serialized, indented as a testcase is (inside testsuites, inside testsuite)
    outcome: str  # "failure", "error", "skipped", or "" for a pass
    seconds: float  # its time, as written


def testcase(case: CaseResult, spec_path: str, texts: CaseTexts | None = None) -> Testcase:
    """A case's testcase in a report of the spec at `spec_path`, made once where `texts` keeps
    it (report/texts.py)."""
    if texts is None:
        return _testcase(case, spec_path)
    return texts.part(f"junit {spec_path}", case, lambda c: _testcase(c, spec_path))


def _made(attributes: dict[str, str], children: Sequence[str], outcome: str = "") -> Testcase:
    """A testcase of its attributes and its children's tags (properties, the outcome, the
    system-out), indented where it stands in the document: itself at depth 2, its children at
    depth 3."""
    text = (start_tag("testcase", attributes) + _DEPTH_3 + _DEPTH_3.join(children) + _DEPTH_2
            + "</testcase>")
    return Testcase(text, outcome, float(attributes["time"]))


def _testcase(case: CaseResult, spec_path: str) -> Testcase:
    seconds = case.seconds if math.isfinite(case.seconds) else 0.0
    attributes = {"name": _xml_text(one_line(case.id)),
                  "classname": _xml_text(f"onnx-parity.{one_line(case.model)}"),
                  "file": _xml_text(spec_path), "time": _time(seconds)}
    if case.line is not None:
        attributes["line"] = str(case.line)
    children = []
    measured = [(f"{one_line(o.name)}.{name}", repr(value)) for o in case.outputs
                for name, value in o.metrics.items()]
    if case.baseline is not None and case.baseline.status == "compared":
        measured += [("baseline.max_abs", repr(case.baseline.max_abs)),
                     ("baseline.ratio", repr(case.baseline.ratio)),
                     ("baseline.trend", trend_cell(case))]
    measured += junit_properties(case)
    if measured:  # every metric of every floating output, whichever ones gated it
        children.append("<properties>" + _DEPTH_4 + _DEPTH_4.join(
            _property(_xml_text(key), value) for key, value in measured) + _DEPTH_3
            + "</properties>")
    reason = case_reason(case)
    if case.status == "failed":
        drift = _drift_lines(case)
        cause = cause_text(case)
        body = [reason, *([cause] if cause else []), *drift[1:],
                *filter(None, [expectation_text(case)]), *_outputs_text(case, only_failing=True)]
        # The reason, the cause and where the drift starts: the longest are cut, the short
        # ones (where the drift starts) kept whole.
        message = _fit([reason, *explanations(case)], MESSAGE_LIMIT)
        kind = "Regression" if case.baseline is not None and case.baseline.regressed and all(
            o.passed for o in case.outputs) else "OutputDrift"
        if case.details.expectation is not None and case.details.expectation.verdict == "passes":
            kind = "StaleExpectation"
        children.append(_child("failure", kind, one_line(message, MESSAGE_LIMIT),
                               "\n".join(body) + "\n"))
    elif case.status == "error":
        expected = expectation_text(case)  # an expectation that did not match, or expired
        message = "; ".join([one_line(reason, MESSAGE_LIMIT // 2), one_line(expected)]) \
            if expected else one_line(reason, MESSAGE_LIMIT)
        children.append(_child("error", _ERROR_TYPES.get(case.stage or "run", "RunError"),
                               one_line(message, MESSAGE_LIMIT),
                               "\n".join([reason, *filter(None, [expected])]) + "\n"))
    elif case.status == "skipped":
        children.append(_child("skipped", "skipped", one_line(reason, MESSAGE_LIMIT)))
    elif case.status == "xfailed":  # `expected failure: <reason>`; how it ended in the text
        children.append(_child(
            "skipped", "ExpectedFailure", one_line(reason, MESSAGE_LIMIT),
            "\n".join([reason, *explanations(case), *_outputs_text(case, True)]) + "\n"))
    children.append(element("system-out", {}, _xml_text(_system_out(case))))
    return _made(attributes, children, _OUTCOMES.get(case.status, ""))


def _fit(parts: list[str], limit: int) -> str:
    """`parts` on one line joined by "; ", within `limit`: the longest parts shortened to the
    same length, so that every short one stays whole."""
    lines = [one_line(part) for part in parts]
    room = limit - 2 * (len(lines) - 1)
    cap = max((len(line) for line in lines), default=0)
    while cap > 0 and sum(min(len(line), cap) for line in lines) > room:
        cap -= 1
    return "; ".join(one_line(line, cap) if len(line) > cap else line for line in lines)


def _child(tag: str, kind: str, message: str, text: str | None = None) -> str:
    """A testcase's failure, error or skipped element."""
    return element(tag, {"type": kind, "message": _xml_text(message)},
                   None if text is None else _xml_text(text))


def _suite_properties(cases: Sequence[CaseResult], spec: str,
                      environment: Sequence[str]) -> list[str]:
    """A model's suite's properties, as tags: the spec, its line, the run's environment."""
    line = next((c.line for c in cases if c.line is not None), None)
    if line is None:
        return [spec, *environment]
    return [spec, _property("spec.line", str(line)), *environment]


def suite_head(spec_path: str, environment: Mapping[str, Any],
               shard: str | None = None) -> tuple[str, ...]:
    """What every model's testsuite says besides its cases, worded once per report: the spec,
    then the run's environment, as property tags (the preflight has its own testcase,
    `environment`)."""
    environment = {**environment, **({"shard": shard} if shard else {})}
    return (_property("spec", _xml_text(spec_path)),
            *[_property(_xml_text(one_line(f"environment.{key}")), _xml_text(value_text(value)))
              for key, value in environment.items()])


def model_suite(head: tuple[str, ...], model: str, cases: Sequence[CaseResult],
                spec_path: str, texts: CaseTexts | None = None) -> Suite:
    """A model's testsuite, with `head` (suite_head) over its cases; made once for these
    results where `texts` keeps it (report/texts.py): as the model's last case ends, while the
    run goes on (report/publish.py), and joined by every write after."""
    def made(cases: Sequence[CaseResult]) -> Suite:
        return _suite(model, [testcase(case, spec_path, texts) for case in cases],
                      _suite_properties(cases, head[0], head[1:]))

    return made(cases) if texts is None else texts.joined(("junit suite", *head, model),
                                                          cases, made)


def _property(name: str, value: str) -> str:
    # empty_tag("property", {"name": name, "value": value}), without the dict: a case has one
    # property per metric of each output, and one per figure of its latency
    return f'<property name="{attribute(name)}" value="{attribute(value)}" />'


def _time(seconds: float) -> str:
    return f"{seconds:.3f}" if math.isfinite(seconds) else "0.000"


class Suite(NamedTuple):
    """A testsuite as it stands in the document, and its counts."""

    text: str
    counts: dict[str, int]  # tests, failures, errors, skipped
    seconds: float  # the sum of its testcases' times, as written


# What ET.indent(root, space="  ") puts before an element at each depth: a testsuite (1), its
# properties and testcases (2), a suite's property and a testcase's children (3), a testcase's
# property (4); and before a closing tag, one depth less.
_DEPTH_1, _DEPTH_2, _DEPTH_3, _DEPTH_4 = "\n  ", "\n    ", "\n      ", "\n        "


def _suite(name: str, tests: list[Testcase], properties: Sequence[str] = ()) -> Suite:
    """A testsuite with its counts and the sum of its cases' times; `properties`, as tags."""
    outcomes = [t.outcome for t in tests]
    counts = {"tests": len(tests), "failures": outcomes.count("failure"),
              "errors": outcomes.count("error"), "skipped": outcomes.count("skipped")}
    seconds = sum(t.seconds for t in tests)
    children = [t.text for t in tests]
    if properties:
        children.insert(0, "<properties>" + _DEPTH_3 + _DEPTH_3.join(properties) + _DEPTH_2
                        + "</properties>")
    attributes = {"name": _xml_text(one_line(name)), "disabled": "0",
                  **{k: str(v) for k, v in counts.items()}, "time": _time(seconds)}
    text = (start_tag("testsuite", attributes) + _DEPTH_2 + _DEPTH_2.join(children) + _DEPTH_1
            + "</testsuite>" if children else empty_tag("testsuite", attributes))
    return Suite(text, counts, seconds)


def _preflight_suite(report: RunReport) -> Suite | None:
    """The GPU preflight as a testcase named `environment`, first, so the reason a GPU target
    failed sits next to the failure; with its outcome (passed, failed or skipped)."""
    preflight = report.preflight
    if preflight is None:
        return None
    text = "\n".join([*render_lines(preflight), consequence(preflight)]) + "\n"
    attributes = {"name": "environment", "classname": "onnx-parity.environment",
                  "file": _xml_text(report.spec_path), "time": _time(preflight.seconds)}
    result = outcome(preflight)
    message = one_line(f"{preflight_headline(preflight)}: {preflight.reason}", MESSAGE_LIMIT)
    children = [_child("failure", "Preflight", message, text)] if result == "failed" else [
        _child("skipped", "skipped", message)] if result == "skipped" else []
    children.append(element("system-out", {}, _xml_text(text)))
    return _suite("environment", [_made(attributes, children, _OUTCOMES.get(result, ""))])


def _baseline_suite(report: RunReport) -> Suite | None:
    """The comparison with the baseline as a testcase named `baseline`: skipped, saying why,
    when it could not be done; passed otherwise (the regressed cases fail on their own)."""
    if not report.baseline:
        return None
    attributes = {"name": "baseline", "classname": "onnx-parity.baseline",
                  "file": _xml_text(report.spec_path), "time": "0.000"}
    said = headline(report)
    skipped = not compared(report)
    children = [_child("skipped", "skipped", one_line(said, MESSAGE_LIMIT))] if skipped else []
    changes = environment_text(report)
    text = said + (f"\nchanged since the baseline: {changes}" if changes else "")
    children.append(element("system-out", {}, _xml_text(text + "\n")))
    return _suite("baseline", [_made(attributes, children, "skipped" if skipped else "")])


def junit_xml_string(report: RunReport, texts: CaseTexts | None = None) -> str:
    """The JUnit XML document; the same report always gives the same bytes. Each case's
    testcase is made once where `texts` keeps them (report/texts.py)."""
    head = suite_head(report.spec_path, report.environment, report.shard)
    suites = [model_suite(head, model, cases, report.spec_path, texts)
              for model, cases in models_in_order(report).items()]
    summed = sum(suite.seconds for suite in suites)
    suites[:0] = [suite for suite in (_preflight_suite(report), _baseline_suite(report))
                  if suite is not None]
    totals = {key: sum(suite.counts[key] for suite in suites)
              for key in ("tests", "failures", "errors", "skipped")}
    # The run's wall time when known (cases may overlap or share setup), else the cases' sum.
    wall = report.seconds if math.isfinite(report.seconds) and report.seconds > 0 else summed
    return _document({"name": "onnx-parity", "disabled": "0",
                      **{k: str(v) for k, v in totals.items()}, "time": _time(wall)}, suites)


def _document(attributes: Mapping[str, str], suites: Sequence[Suite]) -> str:
    """The XML declaration and the testsuites element around `suites`, indented as
    ET.indent(root, space="  ") indents them."""
    if not suites:
        body = empty_tag("testsuites", attributes)
    else:
        body = (start_tag("testsuites", attributes) + _DEPTH_1
                + _DEPTH_1.join(suite.text for suite in suites) + "\n</testsuites>")
    return '<?xml version="1.0" encoding="utf-8"?>\n' + body + "\n"


def write_junit(report: RunReport, path: str | os.PathLike[str],
                texts: CaseTexts | None = None) -> None:
    """Write the JUnit XML report atomically."""
    write_text_atomic(path, junit_xml_string(report, texts))


def spec_junit_xml(problems: Sequence[SpecProblem], spec_path: str) -> str:
    """A spec that cannot be used, as JUnit: one failing testcase named `spec`, whose failure
    lists every problem, so a test-report viewer shows why nothing ran."""
    attributes = {"name": "spec", "classname": "onnx-parity.spec", "file": _xml_text(spec_path),
                  "time": "0.000"}
    if problems:
        attributes["line"] = str(problems[0].line)
    text = "\n".join(visible(str(p)) for p in problems) + "\n"
    count = len(problems)
    failure = _child(
        "failure", "SpecError",
        one_line(f"{count} problem{'s' * (count != 1)} in {spec_path}; nothing was checked: "
                 f"{visible(problems[0].message) if problems else ''}", MESSAGE_LIMIT), text)
    return _document({"name": "onnx-parity", "disabled": "0", "tests": "1", "failures": "1",
                      "errors": "0", "skipped": "0", "time": "0.000"},
                     [_suite("spec", [_made(attributes, [failure], "failure")])])
