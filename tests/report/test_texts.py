"""A run's reports, written again and again as its cases end, are made of each case's part made
once (report/texts.py): the same bytes as a report made from nothing."""

from __future__ import annotations

import dataclasses

from onnx_parity.report import jsonfile, junit
from onnx_parity.report.describe import models_in_order
from onnx_parity.report.jsonfile import json_string
from onnx_parity.report.junit import junit_xml_string
from onnx_parity.report.publish import ReportSettings, make_parts, suite_maker, write_files
from onnx_parity.report.texts import CaseTexts
from report_fixtures import failing_case, passing_case, sample_report


def test_a_report_from_kept_parts_is_the_report_made_afresh() -> None:
    report = sample_report()
    texts = CaseTexts()
    for _ in range(2):  # the second write joins the parts the first made
        assert junit_xml_string(report, texts) == junit_xml_string(report)
        assert json_string(report, texts) == json_string(report)


def test_each_result_s_part_is_made_once_and_a_new_result_gets_its_own(monkeypatch,
                                                                       tmp_path) -> None:
    made: list[str] = []
    line, testcase = jsonfile._case_line, junit._testcase
    monkeypatch.setattr(jsonfile, "_case_line", lambda c: made.append(c.id) or line(c))
    monkeypatch.setattr(junit, "_testcase",
                        lambda c, spec: made.append(c.id) or testcase(c, spec))
    first, second = passing_case("a", 1), passing_case("b", 2)
    report = dataclasses.replace(sample_report(), cases=(first, second))
    texts = CaseTexts()
    make_parts(ReportSettings(json=None, junit=None), first, report.spec_path, texts)
    assert made == []  # no file asked for, no part made
    make_parts(ReportSettings(json=tmp_path / "r.json", junit=tmp_path / "r.xml"), first,
               report.spec_path, texts)
    assert made == [first.id, first.id]
    json_string(report, texts)
    junit_xml_string(report, texts)
    assert made == [first.id, first.id, second.id, second.id]
    # the same case, ended again (a placeholder replaced by its outcome): its own part
    again = dataclasses.replace(failing_case("a", 1), id=first.id)
    replaced = dataclasses.replace(report, cases=(again, second))
    kept = (json_string(replaced, texts), junit_xml_string(replaced, texts))
    assert made == [first.id, first.id, second.id, second.id, first.id, first.id]
    assert kept == (json_string(replaced), junit_xml_string(replaced))
    # another spec's path is another JUnit testcase (the file attribute)
    elsewhere = dataclasses.replace(report, spec_path="other.yaml")
    assert junit_xml_string(elsewhere, texts) == junit_xml_string(elsewhere)


def test_written_files_are_the_same_with_kept_parts(tmp_path) -> None:
    report = sample_report()
    kept = ReportSettings(json=tmp_path / "kept.json", junit=tmp_path / "kept.xml")
    fresh = ReportSettings(json=tmp_path / "fresh.json", junit=tmp_path / "fresh.xml")
    texts = CaseTexts()
    for case in report.cases:
        make_parts(kept, case, report.spec_path, texts)
    write_files(kept, report, texts)
    write_files(fresh, report)
    assert (tmp_path / "kept.json").read_bytes() == (tmp_path / "fresh.json").read_bytes()
    assert (tmp_path / "kept.xml").read_bytes() == (tmp_path / "fresh.xml").read_bytes()


def test_what_is_kept_is_one_report_s_worth() -> None:
    first, second = passing_case("a", 1), passing_case("b", 2)
    report = dataclasses.replace(sample_report(), cases=(first, second))
    texts = CaseTexts()
    json_string(report, texts), junit_xml_string(report, texts)
    ended = dataclasses.replace(failing_case("a", 1), id=first.id)  # a placeholder's outcome
    later = dataclasses.replace(report, cases=(ended, second))
    expected = (json_string(later), junit_xml_string(later))
    assert (json_string(later, texts), junit_xml_string(later, texts)) == expected
    texts.keep(later.cases)
    assert {one for _, ids in texts._made for one in ids} == {id(ended), id(second)}
    assert all(case is not first for cases, _ in texts._made.values() for case in cases)
    assert (json_string(later, texts), junit_xml_string(later, texts)) == expected


def test_a_model_s_suite_made_as_its_last_case_ends_is_the_one_the_write_joins(
        monkeypatch, tmp_path) -> None:
    report = dataclasses.replace(sample_report(), shard="2/3")
    fresh = junit_xml_string(report)
    models = models_in_order(report)
    assert len(models) > 1
    texts = CaseTexts()
    suite_maker(ReportSettings(json=tmp_path / "r.json", junit=None), report.spec_path,
                report.environment, report.shard)("m", report.cases, texts)
    assert texts._made == {}  # no JUnit report asked for: no suite made
    make = suite_maker(ReportSettings(json=None, junit=tmp_path / "r.xml"), report.spec_path,
                       report.environment, report.shard)
    for model, cases in models.items():
        make(model, cases, texts)
    made: list[str] = []
    suite = junit._suite
    monkeypatch.setattr(junit, "_suite",
                        lambda name, *rest: made.append(name) or suite(name, *rest))
    assert junit_xml_string(report, texts) == fresh
    assert not set(made) & set(models)  # every model's suite was made already
    # another environment (a shard of its own) is another suite
    other = dataclasses.replace(report, shard="3/3")
    assert junit_xml_string(other, texts) == junit_xml_string(other)
    assert set(models) <= set(made)
