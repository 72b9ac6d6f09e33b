"""The pull-request comment: its Markdown (report/comment.py) and its REST calls
(report/pullrequest.py), against a local server on 127.0.0.1 that speaks enough of GitHub's API:
listing a pull request's comments page by page (the Link header), creating and updating one."""

from __future__ import annotations

import dataclasses
import json
import re
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from onnx_parity.cli import action
from onnx_parity.cli.main import main
from onnx_parity.compare.baseline import Baseline, judge_case, run_record
from onnx_parity.report.comment import COMMENT_LIMIT, comment_markdown, marker
from onnx_parity.report.jsonfile import read_json, write_json
from onnx_parity.report.publish import ReportSettings, write_github
from onnx_parity.report.pullrequest import pull_request_number
from onnx_parity.results import CaseResult, OutputComparison, RunReport
from onnx_parity.spec.model import Regression
from report_fixtures import HOSTILE_MODEL, failing_case, passing_case, planned, sample_report

TOKEN = "ghs_secret-token-never-shown"
PAGE = 2  # comments per page, small so that finding the comment must follow the Link header
OTHERS = 5  # comments already on the pull request, by people


class FakeGitHub:
    """The issue-comments endpoints of one repository's pull request #7, in memory."""

    def __init__(self) -> None:
        self.comments: dict[int, str] = {i: f"a person's comment {i}" for i in range(1, OTHERS + 1)}
        self.requests: list[tuple[str, str]] = []
        self.tokens: set[str] = set()
        self.fail: dict[str, tuple[int, str]] = {}  # method -> (status, body)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def ours(self) -> list[str]:
        return [body for body in self.comments.values() if "onnx-parity:comment" in body]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        github = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, status: int, data: Any, headers: dict[str, str] | None = None,
                        ) -> None:
                raw = data if isinstance(data, bytes) else json.dumps(data).encode()
                self.send_response(status)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def _handle(self, method: str) -> None:
                github.requests.append((method, self.path))
                github.tokens.add(self.headers.get("Authorization", ""))
                if method in github.fail:
                    status, body = github.fail[method]
                    self._answer(status, body.encode())
                    return
                url = urlparse(self.path)
                if method == "GET" and url.path == "/repos/acme/models/issues/7/comments":
                    page = int(parse_qs(url.query).get("page", ["1"])[0])
                    items = sorted(github.comments.items())
                    chunk = items[(page - 1) * PAGE: page * PAGE]
                    headers = {}
                    if page * PAGE < len(items):
                        headers["Link"] = (f'<{github.url}{url.path}?per_page={PAGE}&page='
                                           f'{page + 1}>; rel="next", <{github.url}/x>; '
                                           'rel="last"')
                    self._answer(200, [{"id": i, "body": b} for i, b in chunk], headers)
                    return
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["body"]
                if method == "POST" and url.path == "/repos/acme/models/issues/7/comments":
                    new = max(github.comments) + 1
                    github.comments[new] = body
                    self._answer(201, {"id": new, "body": body})
                    return
                found = re.fullmatch(r"/repos/acme/models/issues/comments/(\d+)", url.path)
                if method == "PATCH" and found and int(found[1]) in github.comments:
                    github.comments[int(found[1])] = body
                    self._answer(200, {"id": int(found[1]), "body": body})
                    return
                self._answer(404, {"message": "Not Found"})

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

            def do_PATCH(self) -> None:
                self._handle("PATCH")

        return Handler


@pytest.fixture
def github(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGitHub]:
    fake = FakeGitHub()
    thread = threading.Thread(target=fake.server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"action": "synchronize", "pull_request": {"number": 7}}))
    for key in ("GITHUB_STEP_SUMMARY", "GITHUB_WORKSPACE"):
        monkeypatch.delenv(key, raising=False)
    for key, value in {"GITHUB_ACTIONS": "true", "GITHUB_API_URL": fake.url,
                       "GITHUB_REPOSITORY": "acme/models", "GITHUB_TOKEN": TOKEN,
                       "GITHUB_EVENT_PATH": str(event), "GITHUB_SERVER_URL": "https://github.com",
                       "GITHUB_RUN_ID": "42", "GITHUB_WORKFLOW": "parity",
                       "GITHUB_JOB": "check"}.items():
        monkeypatch.setenv(key, value)
    # No request leaves the machine: any connection but to 127.0.0.1 fails the test.
    connect = socket.create_connection

    def local_only(address: Any, *args: Any, **kwargs: Any) -> socket.socket:
        assert address[0] == "127.0.0.1", f"a request to {address[0]}"
        return connect(address, *args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", local_only)
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


# -- reports: a baseline and a run against it, judged by the real regression check ------------

def _grown(case: CaseResult, max_abs: float) -> CaseResult:
    (output,) = case.outputs
    return dataclasses.replace(case, outputs=(dataclasses.replace(output, max_abs=max_abs),))


def _against(base_cases: tuple[CaseResult, ...], cases: tuple[CaseResult, ...],
             gone: tuple[str, ...] = ()) -> RunReport:
    base = RunReport("parity.yaml", {}, base_cases)
    baseline = Baseline("base.json", base, cases={c.id: c for c in base_cases})
    judged = tuple(judge_case(case, Regression(), baseline) for case in cases)
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
    body = comment_markdown(_against(before, now), "parity.yaml", "https://x/runs/1")
    assert len(body) <= COMMENT_LIMIT
    cut = re.search(r"- … and (\d+) more changes, cut to fit GitHub's comment size", body)
    assert cut is not None
    shown = len([line for line in body.splitlines() if "**new failure**" in line])
    assert shown + int(cut[1]) == 1000
    assert body.endswith("[The run's job summary](https://x/runs/1) has every case.\n")
    small = comment_markdown(_against(before[:50], now[:50]), "k", limit=3000)
    assert len(small) <= 3000 and "more changes, cut to fit" in small


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
    assert settings.run_args("r.json", None)[-1] == "--comment"
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
    github.comments[2] = quoted
    _merge(tmp_path, _changed_run(), "--comment")
    assert github.comments[2] == quoted  # a person's words stay theirs
    assert github.requests[-1][0] == "POST"
    assert github.comments[max(github.comments)].startswith(marker("parity.yaml @ parity/check"))


def test_an_expected_failure_is_a_change_and_counts_as_green() -> None:
    """A case that passed in the baseline and now fails as its model's `expect` says is listed
    (a failure put on record is still news); one that was an expected failure and passes now
    (its record gone) is fixed; a run of passes and expected failures is not a warning."""
    import datetime

    from onnx_parity.compare.expect import judge_expectation
    from onnx_parity.findings import ExpectationRecord

    def expected(case: CaseResult) -> CaseResult:
        known = ExpectationRecord(model=case.model, status="failed", reason="issue 12")
        return judge_expectation(case, (known,), datetime.date(2026, 1, 1))

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
