"""The pull request's comment on GitHub: which pull request (the event payload), the REST calls
that create the comment once and update it in place after (found by its hidden marker), and a
failed call as one line of warning, never the gate's verdict.

urllib only: no dependency for four kinds of request. The token goes only to GITHUB_API_URL's
host, and neither it nor the API's text reaches the console unescaped (the caller says the one
line this returns through publish.say).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.client import HTTPException
from pathlib import Path
from typing import Any

from onnx_parity.escape import one_line
from onnx_parity.report.comment import comment_key, comment_markdown, marker
from onnx_parity.results import RunReport

DEFAULT_API = "https://api.github.com"
TIMEOUT = 15.0  # seconds per request: a slow API must not hold the job
MAX_PAGES = 30  # of 100 comments each; a pull request with more is past reading anyway
_API_TEXT_LIMIT = 200


@dataclass(frozen=True)
class PullRequest:
    """Where the comment goes: the API, the repository (owner/name), the pull request's number,
    and the token (kept out of every repr)."""

    api: str
    repository: str
    number: int
    token: str = field(repr=False)


class ApiError(Exception):
    """A REST call that did not succeed: its HTTP status (None for a network error) and what
    the API said, shortened."""

    def __init__(self, status: int | None, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


def pull_request(env: Mapping[str, str]) -> PullRequest | str:
    """The pull request this run is about, or why there is none to comment on."""
    number = pull_request_number(env.get("GITHUB_EVENT_PATH"))
    if number is None:
        return ("not a pull request (the event has no pull request number), so no comment "
                "was posted")
    token, repository = env.get("GITHUB_TOKEN"), env.get("GITHUB_REPOSITORY")
    if not token:
        return ("no GITHUB_TOKEN in the environment, so no comment was posted (the action "
                "passes it when `comment` is on; elsewhere set it to `${{ github.token }}`)")
    if not repository or repository.count("/") != 1:
        return "no GITHUB_REPOSITORY (owner/name) in the environment, so no comment was posted"
    api = (env.get("GITHUB_API_URL") or DEFAULT_API).rstrip("/")
    return PullRequest(api=api, repository=repository, number=number, token=token)


def pull_request_number(event_path: str | None) -> int | None:
    """`pull_request.number` of the event payload, else `issue.number`, else the first of
    `workflow_run.pull_requests` (a run of a branch of this repository; a fork's is empty)."""
    if not event_path:
        return None
    try:
        payload = json.loads(Path(event_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(payload, dict):
        return None
    for key in ("pull_request", "issue"):
        number = _number(payload.get(key))
        if number is not None:
            return number
    run = payload.get("workflow_run")
    pulls = run.get("pull_requests") if isinstance(run, dict) else None
    return _number(pulls[0]) if isinstance(pulls, list) and pulls else None


def _number(value: Any) -> int | None:
    number = value.get("number") if isinstance(value, dict) else None
    return number if isinstance(number, int) and not isinstance(number, bool) and number > 0 \
        else None


def publish_comment(report: RunReport, env: Mapping[str, str] = os.environ) -> str:
    """Create or update the run's comment on its pull request; the one line to say about it
    (what was done, or the warning of why not). Never raises for the API's sake."""
    target = pull_request(env)
    if isinstance(target, str):
        return target
    server, run = env.get("GITHUB_SERVER_URL"), env.get("GITHUB_RUN_ID")
    run_url = f"{server}/{target.repository}/actions/runs/{run}" if server and run else None
    key = comment_key(report.spec_path, env.get("GITHUB_WORKFLOW"), env.get("GITHUB_JOB"))
    body = comment_markdown(report, key, run_url)
    try:
        done = upsert(target, marker(key), body)
    except ApiError as exc:
        return _warning(exc, target)
    return f"{done} the onnx-parity comment on pull request #{target.number}"


def _warning(exc: ApiError, target: PullRequest) -> str:
    # An API that echoes what it was sent must not show the token in the log.
    said = f": {exc.text.replace(target.token, '***')}" if exc.text else ""
    if exc.status == 403:
        return (f"warning: no permission to comment on pull request #{target.number} (HTTP "
                f"{exc.status}{said}); the token needs `pull-requests: write`, and a pull "
                "request from a fork gets a read-only one: see the workflow_run recipe in the "
                "action's docs. The gate is unchanged")
    status = f"HTTP {exc.status}" if exc.status is not None else "network error"
    return (f"warning: the comment on pull request #{target.number} was not posted ({status}"
            f"{said}). The gate is unchanged")


def upsert(target: PullRequest, mark: str, body: str) -> str:
    """PATCH the comment that holds `mark`, or POST a new one: "updated" or "created"."""
    comment_id = find_comment(target, mark)
    if comment_id is not None:
        _call(target, "PATCH", f"/repos/{target.repository}/issues/comments/{comment_id}",
              {"body": body})
        return "updated"
    _call(target, "POST", f"/repos/{target.repository}/issues/{target.number}/comments",
          {"body": body})
    return "created"


def find_comment(target: PullRequest, mark: str) -> int | None:
    """The id of the pull request's first comment whose body starts with `mark`, reading every
    page (the Link header's `next`), oldest first. A body that only holds the marker further in
    (a person quoting it, a case's name) is someone else's comment and is never overwritten."""
    url: str | None = (f"{target.api}/repos/{target.repository}/issues/{target.number}"
                       "/comments?per_page=100")
    for _ in range(MAX_PAGES):
        if url is None:
            return None
        comments, url = _page(target, url)
        for comment in comments:
            if not isinstance(comment, dict):
                continue
            text, comment_id = comment.get("body"), comment.get("id")
            if (isinstance(text, str) and text.startswith(mark) and isinstance(comment_id, int)
                    and not isinstance(comment_id, bool)):
                return comment_id
    return None


def _page(target: PullRequest, url: str) -> tuple[list[Any], str | None]:
    data, headers = _request(target, "GET", url)
    if not isinstance(data, list):
        raise ApiError(None, "the comments' list was not a JSON array")
    following = _next_link(headers.get("Link") or "")
    # The token goes to the API and nowhere else, whatever a Link header says.
    if following is not None and not following.startswith(target.api + "/"):
        raise ApiError(None, "the next page is not on the API's host")
    return data, following


def _next_link(header: str) -> str | None:
    """The `rel="next"` URL of a Link header: `<url>; rel="next", <url>; rel="last"`."""
    for part in header.split(","):
        url, _, params = part.partition(";")
        if 'rel="next"' in params.replace(" ", "") and url.strip().startswith("<"):
            return url.strip()[1:-1]
    return None


def _call(target: PullRequest, method: str, path: str, payload: dict[str, Any]) -> None:
    _request(target, method, target.api + path, payload)


def _request(target: PullRequest, method: str, url: str,
             payload: dict[str, Any] | None = None) -> tuple[Any, Mapping[str, str]]:
    data = json.dumps(payload).encode("utf-8") if payload is not None else None
    try:
        request = urllib.request.Request(url, data=data, method=method, headers={
            "Authorization": f"Bearer {target.token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": "onnx-parity",
            **({"Content-Type": "application/json"} if data is not None else {}),
        })
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            raw = response.read()
            headers = {key: value for key, value in response.headers.items()}
    except urllib.error.HTTPError as exc:
        raise ApiError(exc.code, _api_message(exc)) from None
    # Refused, reset, timed out, a broken response; or a GITHUB_API_URL urllib cannot use (no
    # scheme: ValueError; a port out of range: OverflowError): a warning all the same.
    except (OSError, HTTPException, ValueError, OverflowError) as exc:
        raise ApiError(None, one_line(str(getattr(exc, "reason", exc)), _API_TEXT_LIMIT)) \
            from None
    try:
        return (json.loads(raw) if raw else None), headers
    except ValueError:
        raise ApiError(None, "the API's answer was not JSON") from None


def _api_message(exc: urllib.error.HTTPError) -> str:
    """What the API said about a failed call: its JSON `message`, else its text, one line."""
    try:
        raw = exc.read(4096)
    except (OSError, HTTPException):
        raw = b""
    text = raw.decode("utf-8", errors="replace")
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("message"), str):
        text = data["message"]
    return one_line(text or str(exc.reason), _API_TEXT_LIMIT)
