"""The pull-request comment: its Markdown (report/comment.py) and its REST calls
(report/pullrequest.py), against a local server on 127.0.0.1 that speaks enough of GitHub's API
(tests/fake_github.py): the comment is ours alone, the token goes to the API's origin alone, and
every answer is bounded."""

from __future__ import annotations

import dataclasses
import json
import re
import socket
from pathlib import Path
from typing import Any

import pytest

from fake_github import OTHERS, TOKEN, Comment, FakeGitHub, github
from onnx_parity.cli import action
from onnx_parity.cli.main import main
from onnx_parity.compare.baseline import Baseline, run_record
from onnx_parity.compare.chain import Rules, judge
from onnx_parity.report.comment import COMMENT_LIMIT, comment_markdown, marker
from onnx_parity.report.jsonfile import read_json, write_json
from onnx_parity.report.publish import ReportSettings, write_github
from onnx_parity.report.pullrequest import pull_request_number
from onnx_parity.results import CaseResult, OutputComparison, RunReport
from onnx_parity.spec.model import Regression
from report_fixtures import HOSTILE_MODEL, failing_case, passing_case, planned, sample_report

__all__ = ["github"]  # the fixture, imported for the tests here

# -- reports: a baseline and a run against it, judged by the real regression check ------------

def _grown(case: CaseResult, max_abs: float) -> CaseResult:
    (output,) = case.outputs
    return dataclasses.replace(case, outputs=(dataclasses.replace(output, max_abs=max_abs),))


def _against(base_cases: tuple[CaseResult, ...], cases: tuple[CaseResult, ...],
             gone: tuple[str, ...] = ()) -> RunReport:
    base = RunReport("parity.yaml", {}, base_cases)
    baseline = Baseline("base.json", base, cases={c.id: c for c in base_cases})
    judged = tuple(judge(case, Rules(baseline=baseline, regression=Regression()))
                   for case in cases)
    return RunReport("parity.yaml", {}, judged, baseline=run_record(baseline, {}, None, gone))


def _changed_run() -> RunReport:
    """a: passed → failed; b: failed → passed; c: error grew 50× within tolerance; d: gone;
    e: the same; f: new."""
    before = (passing_case("a", 1), failing_case("b", 1), passing_case("c", 1),
              passing_case("e", 1))
    now = (failing_case("a", 1), passing_case("b", 1), _grown(passing_case("c", 1), 5e-5),
           passing_case("e", 1), passing_case("f", 1))
    return _against(before, now, gone=("d[opset18-cpu-random-b1]",))


def _unchanged_run() -> RunReport:
    cases = (passing_case("a", 1), failing_case("b", 1))
    return _against(cases, cases)


def _merge(tmp_path: Path, report: RunReport, *args: str) -> int:
    path = tmp_path / "report.json"
    write_json(planned(report), path)
    return main(["merge", str(path), "--fail-on", "drift", *args])


# -- the comment on the pull request -----------------------------------------------------------

def test_the_comment_is_created_once_then_updated_in_place(
        github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _merge(tmp_path, _changed_run(), "--comment") == 1  # a drifted: the gate says so
    (first,) = github.ours()
    assert [m for m, _ in github.requests] == ["GET"] * 3 + ["POST"]  # every page read first
    assert "created the onnx-parity comment on pull request #7" in capsys.readouterr().err

    assert _merge(tmp_path, _unchanged_run(), "--comment") == 1
    (second,) = github.ours()  # updated, never a second one
    assert len(github.comments) == OTHERS + 1 and github.requests[-1][0] == "PATCH"
    assert first != second and second.startswith(marker("parity.yaml @ parity/check"))
    assert "No change against the baseline." in second
    assert github.tokens == {f"Bearer {TOKEN}"}
    assert TOKEN not in capsys.readouterr().err

    # Nothing changed again: the same comment, the same size, one PATCH more.
    assert _merge(tmp_path, _unchanged_run(), "--comment") == 1
    assert github.ours() == [second] and github.requests[-1][0] == "PATCH"


def test_the_comment_carries_only_what_changed(github: FakeGitHub, tmp_path: Path) -> None:
    _merge(tmp_path, _changed_run(), "--comment")
    (body,) = github.ours()
    lines = body.splitlines()
    assert lines[1] == "## ❌ onnx-parity: 3 passed, 2 failed, 0 errors, 0 skipped"
    changes = [line for line in lines if line.startswith("- ")]
    assert [re.sub(r"^- \S+ \*\*([a-z ]+)\*\* (\S+?)\\\[.*", r"\1 \2", line)
            for line in changes] == ["new failure a", "regression c", "fixed b", "new f",
                                     "gone d"]
    assert "passed in the baseline; now y drifted in case 1" in changes[0]
    assert "×50" in changes[1] and "failed in the baseline, passes now" in changes[2]
    assert not any("e\\[" in line for line in lines)  # unchanged: not a word
    assert lines[-1] == ("[The run's job summary](https://github.com/acme/models/actions/runs/42)"
                         " has every case.")


def test_without_a_baseline_the_comment_lists_the_failures_worst_first() -> None:
    wide = failing_case("m1", 2)
    (output,) = wide.outputs
    far = dataclasses.replace(wide, outputs=(dataclasses.replace(output, required_atol=9.0),))
    crashed = dataclasses.replace(failing_case("m2", 1), status="error", stage="run",
                                  message="boom")
    cases = (failing_case("m1", 1), far, crashed, failing_case("m3", 1), passing_case("ok", 1))
    body = comment_markdown(RunReport("parity.yaml", {}, cases), "k")
    listed = [line.split(" ")[2] for line in body.splitlines() if line.startswith("- ")]
    # the error first, then each model's worst before any model's second
    assert listed == ["m2\\[opset18-cpu-random-b1\\]:", "m1\\[opset18-cpu-random-b2\\]:",
                      "m3\\[opset18-cpu-random-b1\\]:", "m1\\[opset18-cpu-random-b1\\]:"]
    many = RunReport("parity.yaml", {}, tuple(failing_case(f"m{i}", 1) for i in range(50)))
    lines = comment_markdown(many, "k").splitlines()
    assert len([line for line in lines if line.startswith("- ")]) == 21
    assert "- … and 30 more failing cases" in lines


def test_the_comment_keeps_to_githubs_size_limit() -> None:
    before = tuple(passing_case(f"model{i:04d}", 1) for i in range(1000))
    now = tuple(dataclasses.replace(failing_case(f"model{i:04d}", 1), message="x" * 500)
                for i in range(1000))
    still = tuple(failing_case(f"still{i:02d}", 1) for i in range(50))
    body = comment_markdown(_against(before + still, now + still), "parity.yaml",
                            "https://x/runs/1")
    assert len(body) <= COMMENT_LIMIT
    cut = re.search(r"- … and (\d+) more changes, cut to fit GitHub's comment size", body)
    assert cut is not None
    shown = len([line for line in body.splitlines() if "**new failure**" in line])
    assert shown + int(cut[1]) == 1000
    # The changes come first; the cases still failing are counted even when none fits.
    assert "### Still failing, worst first\n\n- … and 50 more failing cases, cut to fit" in body
    assert body.endswith("[The run's job summary](https://x/runs/1) has every case.\n")
    for limit in (3000, 600):
        small = comment_markdown(_against(before[:50] + still, now[:50] + still), "k",
                                 limit=limit)
        assert len(small) <= limit and "more changes, cut to fit" in small


@pytest.mark.parametrize(("status", "says"), [
    (403, "warning: no permission to comment on pull request #7 (HTTP 403: Resource not "
          "accessible by integration"),
    (500, "warning: the comment on pull request #7 was not posted (HTTP 500: "),
])
def test_an_api_failure_warns_once_and_leaves_the_gate_alone(
        github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str], status: int,
        says: str) -> None:
    without = _merge(tmp_path, _changed_run())
    capsys.readouterr()
    hostile = json.dumps({"message": "Resource not accessible by integration\n::error::pwned "
                                     + TOKEN})
    github.fail = {"POST": (403, hostile)} if status == 403 else {
        "GET": (500, "<html>\n::warning::oops\x1b[31m</html>")}
    assert _merge(tmp_path, _changed_run(), "--comment") == without == 1
    err = capsys.readouterr().err
    assert len([line for line in err.splitlines() if line.startswith("onnx-parity: warn")]) == 1
    assert says in err and TOKEN not in err
    assert not any(line.startswith("::") for line in err.splitlines())
    assert "\x1b" not in err and github.ours() == []
    assert _merge(tmp_path, _unchanged_run(), "--comment", "--fail-on", "never") == 0


def test_a_network_error_warns(github: FakeGitHub, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str],
                               monkeypatch: pytest.MonkeyPatch) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    monkeypatch.setenv("GITHUB_API_URL", f"http://127.0.0.1:{port}")
    assert _merge(tmp_path, _unchanged_run(), "--comment") == 1
    err = capsys.readouterr().err
    assert "warning: the comment on pull request #7 was not posted (network error" in err


def test_outside_a_pull_request_nothing_is_asked(
        github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "push.json").write_text(json.dumps({"ref": "refs/heads/main"}))
    monkeypatch.setenv("GITHUB_EVENT_PATH", str(tmp_path / "push.json"))
    assert _merge(tmp_path, _unchanged_run(), "--comment") == 1
    assert capsys.readouterr().err.count("not a pull request") == 1
    monkeypatch.delenv("GITHUB_ACTIONS")
    _merge(tmp_path, _unchanged_run(), "--comment")
    assert "not on GitHub Actions, so no comment was posted" in capsys.readouterr().err
    assert github.requests == []


def test_a_shard_leaves_the_comment_to_merge(
        github: FakeGitHub, capsys: pytest.CaptureFixture[str]) -> None:
    shard = dataclasses.replace(_changed_run(), shard="1/2")
    write_github(ReportSettings(annotations=False, comment=True), shard)
    err = capsys.readouterr().err
    assert "shard 1/2 does not comment; `onnx-parity merge --comment` posts" in err
    assert github.requests == []


def test_the_pull_request_number_comes_from_the_event(tmp_path: Path) -> None:
    event = tmp_path / "event.json"
    for payload, number in [({"pull_request": {"number": 3}}, 3), ({"issue": {"number": 4}}, 4),
                            ({"workflow_run": {"pull_requests": [{"number": 5}]}}, 5),
                            ({"workflow_run": {"pull_requests": []}}, None),
                            ({"pull_request": {"number": "6"}}, None), ([], None)]:
        event.write_text(json.dumps(payload))
        assert pull_request_number(str(event)) == number
    assert pull_request_number(str(tmp_path / "missing.json")) is None


def test_hostile_text_stays_inert_in_the_comment() -> None:
    body = comment_markdown(sample_report(), f"{HOSTILE_MODEL} --> @x", "https://x/runs/1")
    first, *rest = body.splitlines()
    assert first.startswith("<!-- onnx-parity:comment ") and first.endswith(" -->")
    assert first.count("-->") == 1
    assert "<script>" not in body and "@" not in "\n".join(rest).replace("&#64;", "")
    assert not any(line.startswith("::") for line in body.splitlines())


def test_the_action_input_comment_is_off_by_default() -> None:
    assert action.get_settings({}).comment is False
    assert "--comment" not in action.get_settings({}).run_args("r.json", None)
    settings = action.get_settings({"INPUT_COMMENT": "on"})
    assert settings.comment is True
    # The models' step never comments: the action's next step publishes the report.
    assert "--comment" not in settings.run_args("r.json", None)
    with pytest.raises(action.SettingsError, match="input 'comment': expected on, true, off"):
        action.get_settings({"INPUT_COMMENT": "sometimes"})


def test_the_baseline_verdict_survives_the_json_report(tmp_path: Path) -> None:
    write_json(_changed_run(), tmp_path / "r.json")
    read = {case.model: case.baseline for case in read_json(tmp_path / "r.json").cases}
    assert read["a"] is not None and read["a"].before == "passed"
    assert read["b"] is not None and read["b"].before == "failed"
    assert read["f"] is not None and read["f"].before is None


def _metric_failure(model: str, cosine: float) -> CaseResult:
    output = OutputComparison(name="y", passed=False, atol=1e-4, rtol=1e-3, elements=4,
                              required_atol=1e-5, metrics={"cosine": cosine},
                              criteria=("cosine >= 0.99",), thresholds={"cosine": 0.99},
                              failed=("cosine",), kind="metric")
    return dataclasses.replace(failing_case(model, 1), outputs=(output,))


def test_a_metric_shortfall_ranks_by_how_far_it_fell() -> None:
    from onnx_parity.report.rank import case_excess, worst_first

    near, far = _metric_failure("near", 0.98), _metric_failure("far", 0.5)
    assert case_excess(near) == pytest.approx(2.0) and case_excess(far) == pytest.approx(50.0)
    assert [c.model for c in worst_first([near, far, passing_case("ok", 1)])] == ["far", "near"]


def test_run_comments_and_a_shard_leaves_it_to_merge(
        github: FakeGitHub, write_spec: Any, run_cli: Any, tmp_path: Path) -> None:
    """A real run (a model whose factory raises: an error case, no export): `run --comment`
    posts, its exit code the one without the comment; a shard of it does not. The model's own
    code never sees the token."""
    (tmp_path / "broken.py").write_text(
        "import os\n"
        "def make():\n"
        "    raise RuntimeError(f\"no weights, token {os.environ.get('GITHUB_TOKEN')}\")\n")
    spec = write_spec("""
        version: 1
        models:
          - name: broken
            torch: broken.py:make
            inputs: {x: {shape: [batch, 4]}}
    """)
    code, _, err, _ = run_cli(spec, "--comment", "--no-annotations")
    assert code == 1 and "created the onnx-parity comment on pull request #7" in err
    (body,) = github.ours()
    assert "💥 broken\\[opset18-cpu-random-b1\\]: load: " in body and "no weights" in body
    assert "token None" in body
    asked = len(github.requests)
    code, _, err, _ = run_cli(spec, "--comment", "--no-annotations", "--shard", "1/1")
    assert code == 1 and "shard 1/1 does not comment" in err
    assert len(github.requests) == asked


def test_a_comment_that_only_quotes_the_marker_is_never_overwritten(
        github: FakeGitHub, tmp_path: Path) -> None:
    quoted = f"The bot's comment began with {marker('parity.yaml @ parity/check')} and then"
    github.comments[2] = Comment(quoted, "person2")
    _merge(tmp_path, _changed_run(), "--comment")
    assert github.comments[2].body == quoted  # a person's words stay theirs
    assert github.requests[-1][0] == "POST"
    assert github.comments[max(github.comments)].body.startswith(
        marker("parity.yaml @ parity/check"))


def test_an_expected_failure_is_a_change_and_counts_as_green() -> None:
    """A case that passed in the baseline and now fails as its model's `expect` says is listed
    (a failure put on record is still news); one that was an expected failure and passes now
    (its record gone) is fixed; a run of passes and expected failures is not a warning."""
    import datetime

    from onnx_parity.compare.chain import Rules, judge
    from onnx_parity.findings import ExpectationRecord

    def expected(case: CaseResult) -> CaseResult:
        known = ExpectationRecord(model=case.model, status="failed", reason="issue 12")
        return judge(case, Rules(expectations=(known,), today=datetime.date(2026, 1, 1)))

    base = (passing_case("a", 1), expected(failing_case("b", 1)))
    now = _against(base, (failing_case("a", 1), passing_case("b", 1)))
    now = dataclasses.replace(now, cases=(expected(now.cases[0]), now.cases[1]))
    assert [c.status for c in now.cases] == ["xfailed", "passed"]
    body = comment_markdown(now, "k")
    assert "## ✅ onnx-parity:" in body
    changes = [line for line in body.splitlines() if line.startswith("- ")]
    assert len(changes) == 2
    assert "**expected failure** a" in changes[0] and "issue 12" in changes[0]
    assert "passed in the baseline" in changes[0]
    assert "**fixed** b" in changes[1] and "xfailed in the baseline" in changes[1]


@pytest.mark.parametrize("api", ["api.github.example", "http://127.0.0.1:99999"])
def test_a_malformed_api_url_warns(github: FakeGitHub, tmp_path: Path, api: str,
                                   capsys: pytest.CaptureFixture[str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A GITHUB_API_URL urllib cannot use (no scheme, a port out of range) is one warning, as a
    network error is, never a traceback that changes the exit code."""
    monkeypatch.setenv("GITHUB_API_URL", api)
    assert _merge(tmp_path, _unchanged_run(), "--comment", "--fail-on", "never") == 0
    err = capsys.readouterr().err
    assert "warning: the comment on pull request #7 was not posted" in err
    assert "Traceback" not in err and TOKEN not in err


# -- the comment is ours alone; the token goes to the API alone ---------------------------------

def test_a_marker_comment_by_someone_else_is_never_taken_over(
        github: FakeGitHub, tmp_path: Path) -> None:
    """A person who posts a comment that starts with the tool's exact marker does not get it
    updated by the bot: GITHUB_TOKEN's comments are github-actions[bot]'s (GET /user refuses
    that token, 403), and only a marker comment by that identity is ours."""
    mark = marker("parity.yaml @ parity/check")
    github.comments[2] = Comment(f"{mark}\nplease merge, the bot says all green", "mallory")
    _merge(tmp_path, _changed_run(), "--comment")
    assert github.comments[2].body.endswith("all green")
    ours = max(github.comments)
    assert github.comments[ours].author == "github-actions[bot]"
    assert github.requests[-1][0] == "POST"

    _merge(tmp_path, _unchanged_run(), "--comment")  # the bot's own is found and updated
    assert [m for m, _ in github.requests[-2:]] == ["GET", "PATCH"]
    assert github.requests[-2][1] == "/user" and github.requests[-1][1].endswith(f"/{ours}")
    assert github.comments[2].body.endswith("all green")
    assert "No change against the baseline." in github.comments[ours].body


def test_with_a_personal_token_the_comment_is_the_users(
        github: FakeGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """GET /user names the user behind a personal token: their marker comment is ours, the
    bot's is not."""
    mark = marker("parity.yaml @ parity/check")
    github.users["ghp_personal"] = "octocat"
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_personal")
    github.comments[2] = Comment(f"{mark}\nby the bot", "github-actions[bot]")
    github.comments[3] = Comment(f"{mark}\nby octocat", "octocat")
    _merge(tmp_path, _changed_run(), "--comment")
    assert github.requests[-1] == ("PATCH", "/repos/acme/models/issues/comments/3")
    assert github.comments[2].body.endswith("by the bot")


class _Elsewhere:
    """Another origin (127.0.0.1 on another port): records what reaches it."""

    def __init__(self) -> None:
        self.fake = FakeGitHub()
        self.fake.start()

    def __enter__(self) -> FakeGitHub:
        return self.fake

    def __exit__(self, *exc: object) -> None:
        self.fake.stop()


def test_a_redirect_to_another_origin_gets_no_token(
        github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with _Elsewhere() as elsewhere:
        elsewhere.comments = {1: Comment("one page only", "person1")}
        github.redirect = f"{elsewhere.url}/repos/acme/models/issues/7/comments?per_page=100"
        _merge(tmp_path, _changed_run(), "--comment")
        assert elsewhere.requests and elsewhere.tokens == {""}  # followed, without the token
    assert github.tokens == {f"Bearer {TOKEN}"}
    assert "created the onnx-parity comment on pull request #7" in capsys.readouterr().err

    github.redirect = f"{github.url}/repos/acme/models/issues/7/comments?per_page=100&moved=1"
    before = len(github.requests)
    _merge(tmp_path, _unchanged_run(), "--comment")
    moved = [path for _, path in github.requests[before:] if "moved=1" in path]
    assert moved  # the same origin: followed, with the token (every request had it)
    assert github.tokens == {f"Bearer {TOKEN}"}


@pytest.mark.parametrize("answer", ["big", "slow", "deep"])
def test_an_oversized_slow_or_deep_answer_is_a_warning(
        github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, answer: str) -> None:
    from onnx_parity.report import pullrequest

    monkeypatch.setattr(pullrequest, "MAX_ANSWER", 4096)
    monkeypatch.setattr(pullrequest, "DEADLINE", 1.0)
    github.answer = {"big": b"[" + b'"x",' * 2000 + b'"x"]', "slow": b"[]" + b" " * 200,
                     "deep": b"[" * 2000 + b"]" * 2000}[answer]
    github.trickle = 0.02 if answer == "slow" else 0.0
    assert _merge(tmp_path, _unchanged_run(), "--comment", "--fail-on", "never") == 0
    err = capsys.readouterr().err
    assert "warning: the comment on pull request #7 was not posted (network error: " in err
    said = {"big": "the API's answer is over the limit of 4096 bytes",
            "slow": "the API took longer than 1 s in all",
            "deep": "the API's answer was not JSON within bounds"}[answer]
    assert said in err and "Traceback" not in err
    assert github.ours() == []


def _workflow_run(tmp_path: Path, sha: str) -> Path:
    event = tmp_path / "workflow_run.json"
    event.write_text(json.dumps({"action": "completed", "workflow_run": {
        "event": "pull_request", "pull_requests": [], "head_branch": "fix-export",
        "head_sha": sha, "head_repository": {"owner": {"login": "forker"}},
        "html_url": "https://github.com/acme/models/actions/runs/41"}}))
    return event


def test_a_workflow_run_of_a_forks_pull_request_finds_it_by_its_head(
        github: FakeGitHub, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A `workflow_run` event lists no pull request for a fork's: the API's open pull request
    whose head is the run's branch at the run's commit is the one, and the comment links the
    run that checked, not the one that publishes."""
    github.pulls = [{"number": 7, "label": "forker:fix-export", "head": {"sha": "abc123"}}]
    monkeypatch.setenv("GITHUB_EVENT_PATH", str(_workflow_run(tmp_path, "abc123")))
    _merge(tmp_path, _changed_run(), "--comment")
    assert "created the onnx-parity comment on pull request #7" in capsys.readouterr().err
    (body,) = github.ours()
    assert "(https://github.com/acme/models/actions/runs/41)" in body

    monkeypatch.setenv("GITHUB_EVENT_PATH", str(_workflow_run(tmp_path, "def456")))
    _merge(tmp_path, _changed_run(), "--comment")  # pushed again since: not this run's to say
    assert "no open pull request has forker:fix-export at def456 as its head" in \
        capsys.readouterr().err
    assert github.requests[-1][0] == "GET"


# -- what the comment tells the reviewer to do --------------------------------------------------

def _bug(model: str) -> CaseResult:
    """A baked branch: off by 4.8 where the tolerance is atol 1e-4 (48,000 tolerances)."""
    (output,) = failing_case(model, 1).outputs
    return dataclasses.replace(
        failing_case(model, 1, line=19), message="",
        outputs=(dataclasses.replace(output, name="output_0", max_abs=4.8, required_atol=4.8,
                                     expected_dtype="float32", scale=3.2, kind="elements"),))


def _noise(model: str, atol: float = 0.0, base: CaseResult | None = None) -> CaseResult:
    """Float noise: 3.6e-7 at values up to 1.06 (3 ulps), failing `atol: 0` (any error is
    infinitely many tolerances, yet it ranks below a real bug)."""
    case = base or failing_case(model, 1, line=50)
    (output,) = case.outputs
    passed = atol >= 3.6e-7
    return dataclasses.replace(
        case, message="", status="passed" if passed else "failed",
        stage=None if passed else "compare",
        outputs=(dataclasses.replace(output, name="output_0", atol=atol, rtol=0.0,
                                     max_abs=3.6e-7, required_atol=3.6e-7, passed=passed,
                                     mismatches=0 if passed else 806, elements=1400,
                                     expected_dtype="float32", scale=1.06,
                                     kind="passed" if passed else "elements"),))


def _entries(body: str) -> list[str]:
    """The comment's entries: each case's line with the lines under it."""
    return re.findall(r"^- .*(?:\n  - .*)*", body, flags=re.MULTILINE)


def test_an_unchanged_baseline_still_names_every_failing_case_with_its_next_step(
        github: FakeGitHub, tmp_path: Path) -> None:
    crashed = dataclasses.replace(failing_case("crash", 1, line=26), status="error",
                                  stage="export", message="dynamo exporter failed", outputs=())
    rounding = dataclasses.replace(_noise("attention"), tolerance_line=54)
    cases = (passing_case("ok", 1), rounding, _bug("sign-gate"), crashed)
    _merge(tmp_path, _against(cases, cases), "--comment")
    (body,) = github.ours()
    assert "No change against the baseline.\n\n### Still failing, worst first\n" in body
    entries = _entries(body[body.index("### Still failing"):])
    # Every failing case, the error first, then the real bug above the float noise.
    assert [e.split(" ")[2] for e in entries] == [
        "crash\\[opset18-cpu-random-b1\\]:", "sign-gate\\[opset18-cpu-random-b1\\]:",
        "attention\\[opset18-cpu-random-b1\\]:"]
    crash, bug, noise = entries
    assert ("**next:** fix what stopped it at export; the model's entry is parity.yaml line "
            "26") in crash
    assert "output\\_0: " in bug and "needs atol ≥ 4.8e0" in bug
    assert ("**next:** a real difference, not float noise: fix it where the drift starts (atol "
            "4.8e0 would only hide it); the model's entry is parity.yaml line 19") in bug
    assert ("**next:** float noise: atol 3.6e-7 passes it; set it in the model's tolerance at "
            "parity.yaml line 54") in noise
    assert "ok\\[" not in body


def test_a_tightened_tolerance_is_told_apart_from_a_model_change(
        github: FakeGitHub, tmp_path: Path) -> None:
    """attention: atol 1e-4 → 0 in the pull request, the same error: the setting made the
    verdict. grown: atol 1e-4 → 1e-5 and its error ×100: both said. moved: its target's
    settings changed, the verdict with them."""
    grown_before = dataclasses.replace(_noise("grown", atol=1e-4), line=8)
    (output,) = grown_before.outputs
    grown_now = dataclasses.replace(grown_before, status="failed", stage="compare", outputs=(
        dataclasses.replace(output, atol=1e-5, max_abs=3.6e-5, required_atol=3.6e-5,
                            passed=False, mismatches=3, kind="elements"),))
    moved_before = dataclasses.replace(passing_case("moved", 1), settings={
        "target": '{"providers": ["CPUExecutionProvider"]}', "precision": "fp32"})
    moved_now = dataclasses.replace(failing_case("moved", 1), settings={
        "target": '{"providers": ["CPUExecutionProvider"], "session_options": '
                  '{"graph_optimization_level": "disable_all"}}', "precision": "fp32"})
    before = (_noise("attention", atol=1e-4), grown_before, moved_before)
    now = (_noise("attention"), grown_now, moved_now)
    _merge(tmp_path, _against(before, now), "--comment")
    (body,) = github.ours()
    assert "### Changed in this pull request" in body
    entries = {e.split(" ")[4].split("\\")[0]: e for e in _entries(body)}
    assert ("tolerance tightened in this pull request: atol 1e-4 → 0; the model's error is "
            "unchanged (max abs 3.6e-7 → 3.6e-7): the setting made this verdict"
            ) in entries["attention"]
    assert "**new failure**" in entries["attention"]
    assert ("tolerance tightened in this pull request: atol 1e-4 → 1e-5; and the model's error "
            "changed too (max abs 3.6e-7 → 3.6e-5, ×100)") in entries["grown"]
    assert ('target changed in this pull request: {"providers": \\["CPUExecutionProvider"\\]} → '
            in entries["moved"])
    # Read back from the JSON report, as `publish` reads it, the changes are the same.
    report = tmp_path / "report.json"
    trend = {c.model: c.baseline for c in read_json(report).cases}
    assert trend["attention"] is not None
    (change,) = trend["attention"].settings
    assert (change.setting, change.before, change.after, change.direction) == (
        "atol", "1e-4", "0", "tightened")


def test_a_real_bug_ranks_above_float_noise_that_misses_by_more_tolerances() -> None:
    """Float noise under `atol: 0` misses by infinitely many tolerances, a baked branch by
    48,000: the real bug comes first, in the list and among the changes."""
    body = comment_markdown(RunReport("parity.yaml", {}, (_noise("attention"),
                                                           _bug("sign-gate"))), "k")
    assert [e.split(" ")[2].split("\\")[0] for e in _entries(body)] == ["sign-gate",
                                                                        "attention"]
    # A model entry without a tolerance of its own is told to add one.
    assert ("float noise: atol 3.6e-7 passes it; add tolerance: {atol: 3.6e-7} to the model's "
            "entry at parity.yaml line 50") in body
    before = (passing_case("attention", 1), passing_case("sign-gate", 1))
    changed = comment_markdown(_against(before, (_noise("attention"), _bug("sign-gate"))), "k")
    assert [e.split(" ")[4].split("\\")[0] for e in _entries(changed)] == ["sign-gate",
                                                                           "attention"]


def test_a_rollout_whose_error_compounds_is_told_to_fix_the_source() -> None:
    from onnx_parity.findings import CaseDetails, RolloutRecord

    stream = dataclasses.replace(
        failing_case("stream", 1, line=70), message="step 4 of 20: y drifted",
        details=CaseDetails(rollout=RolloutRecord(steps=20, first_failing=4, judged=4,
                                                  output="y", growth=1.5, growth_from=2)))
    (entry,) = _entries(comment_markdown(RunReport("parity.yaml", {}, (stream,)), "k"))
    assert "stream\\[opset18-cpu-random-b1\\]: step 4 of 20: y drifted" in entry
    assert ("**next:** the error compounds over the rollout (×1.5 per step from step 2): fix "
            "it at its source; a looser atol only moves the failing step further out; the "
            "model's entry is parity.yaml line 70") in entry


def test_a_metric_shortfall_is_told_where_its_threshold_is_set() -> None:
    int8 = dataclasses.replace(_metric_failure("outlier", -0.17), line=58, tolerance_line=64)
    (entry,) = _entries(comment_markdown(RunReport("parity.yaml", {}, (int8,)), "k"))
    assert ("**next:** a real loss of quality: fix it where it starts, or accept it with a lower "
            "cosine threshold in the model's tolerance at parity.yaml line 64") in entry
