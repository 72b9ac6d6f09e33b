"""The pull request's comment on GitHub: which pull request (the event payload, or for a
`workflow_run` from a fork the API's pull request at the run's head), the REST calls that create
the comment once and update it in place after (found by its hidden marker and its author, the
token's own identity), and a failed call as one line of warning, never the gate's verdict.

urllib only: no dependency for a handful of requests. The token goes only to GITHUB_API_URL's
origin, a redirect elsewhere loses it; every answer is bounded in size and every request in time;
neither the token nor the API's text reaches the console unescaped (the caller says the one line
this returns through publish.say).
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import field
from http.client import HTTPException
from pathlib import Path
from typing import Any

from onnx_parity.escape import one_line
from onnx_parity.frozen import frozen
from onnx_parity.report.comment import comment_key, comment_markdown, marker
from onnx_parity.report.jsonlimits import JsonLimits, parse_bounded_json, size_text
from onnx_parity.report.jsonvalues import ReportFormatError
from onnx_parity.results import RunReport

DEFAULT_API = "https://api.github.com"
TIMEOUT = 15.0  # seconds a request waits for the API's next bytes: a slow API must not hold the job
DEADLINE = 120.0  # seconds for every request of one comment together (a trickle of bytes too)
MAX_ANSWER = 16 << 20  # bytes of one answer; a page of 100 comments of 65,536 characters fits
MAX_PAGES = 30  # of 100 comments each; a pull request with more is past reading anyway
# Who a comment made with GITHUB_TOKEN is by. That token cannot ask GET /user (403), which names
# the user behind a personal token.
ACTIONS_BOT = "github-actions[bot]"
_API_TEXT_LIMIT = 200


@frozen
class PullRequest:
    """Where the comment goes: the API, the repository (owner/name), the pull request's number
    (None until looked up from `head`: a `workflow_run` of a fork's pull request, whose event
    does not name it), and the token (kept out of every repr)."""

    api: str
    repository: str
    number: int | None
    token: str = field(repr=False)
    head: tuple[str, str] | None = None  # ("owner:branch", commit sha)


class ApiError(Exception):
    """A REST call that did not succeed: its HTTP status (None for a network error) and what
    the API said, shortened."""

    def __init__(self, status: int | None, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


def pull_request(env: Mapping[str, str]) -> PullRequest | str:
    """The pull request this run is about, or why there is none to comment on."""
    event = _event(env.get("GITHUB_EVENT_PATH"))
    number, head = pull_request_number(event), workflow_run_head(event)
    if number is None and head is None:
        return ("not a pull request (the event has no pull request number), so no comment "
                "was posted")
    token, repository = env.get("GITHUB_TOKEN"), env.get("GITHUB_REPOSITORY")
    if not token:
        return ("no GITHUB_TOKEN in the environment, so no comment was posted (the action "
                "passes it when `comment` is on; elsewhere set it to `${{ github.token }}`)")
    if not repository or repository.count("/") != 1:
        return "no GITHUB_REPOSITORY (owner/name) in the environment, so no comment was posted"
    api = (env.get("GITHUB_API_URL") or DEFAULT_API).rstrip("/")
    return PullRequest(api=api, repository=repository, number=number, token=token,
                       head=head if number is None else None)


def _event(event_path: str | os.PathLike[str] | dict[str, Any] | None) -> dict[str, Any]:
    """The event payload (GitHub writes it; a missing or unreadable one is no event)."""
    if isinstance(event_path, dict):
        return event_path
    if not event_path:
        return {}
    try:
        payload = json.loads(Path(event_path).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    return payload if isinstance(payload, dict) else {}


def pull_request_number(event: str | os.PathLike[str] | dict[str, Any] | None) -> int | None:
    """`pull_request.number` of the event payload, else `issue.number`, else the first of
    `workflow_run.pull_requests` (a run of a branch of this repository; a fork's is empty)."""
    payload = _event(event)
    for key in ("pull_request", "issue"):
        number = _number(payload.get(key))
        if number is not None:
            return number
    run = payload.get("workflow_run")
    pulls = run.get("pull_requests") if isinstance(run, dict) else None
    return _number(pulls[0]) if isinstance(pulls, list) and pulls else None


def workflow_run_head(event: str | os.PathLike[str] | dict[str, Any] | None,
                      ) -> tuple[str, str] | None:
    """("owner:branch", sha) of a `workflow_run` event that came from a pull request, which is
    how its pull request is found when the event does not list it (a fork's)."""
    run = _event(event).get("workflow_run")
    if not isinstance(run, dict) or run.get("event") != "pull_request":
        return None
    repository, branch, sha = run.get("head_repository"), run.get("head_branch"), run.get(
        "head_sha")
    owner = repository.get("owner") if isinstance(repository, dict) else None
    login = owner.get("login") if isinstance(owner, dict) else None
    if not all(isinstance(value, str) and value for value in (login, branch, sha)):
        return None
    return f"{login}:{branch}", str(sha)


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
    key = comment_key(report.spec_path, env.get("GITHUB_WORKFLOW"), env.get("GITHUB_JOB"))
    api = _Api(target)
    try:
        number = target.number if target.number is not None else api.find_pull_request()
        if number is None:
            branch, sha = target.head or ("?", "?")
            return (f"no open pull request has {branch} at {sha[:12]} as its head (pushed "
                    "again since?), so no comment was posted")
        body = comment_markdown(report, key, _run_url(env, target.repository))
        done = api.upsert(number, marker(key), body)
    except ApiError as exc:
        return _warning(exc, target, number if target.number is None else target.number)
    return f"{done} the onnx-parity comment on pull request #{number}"


def _run_url(env: Mapping[str, str], repository: str) -> str | None:
    """The page of the run the report is from: a `workflow_run` event's own run (the one that
    checked), else this run."""
    run = _event(env.get("GITHUB_EVENT_PATH")).get("workflow_run")
    server = env.get("GITHUB_SERVER_URL")
    page = run.get("html_url") if isinstance(run, dict) else None
    if isinstance(page, str) and server and page.startswith(server.rstrip("/") + "/"):
        return page
    run_id = env.get("GITHUB_RUN_ID")
    return f"{server}/{repository}/actions/runs/{run_id}" if server and run_id else None


def _warning(exc: ApiError, target: PullRequest, number: int | None) -> str:
    # An API that echoes what it was sent must not show the token in the log.
    said = f": {exc.text.replace(target.token, '***')}" if exc.text else ""
    which = f"pull request #{number}" if number is not None else "the pull request"
    if exc.status == 403:
        return (f"warning: no permission to comment on {which} (HTTP {exc.status}{said}); the "
                "token needs `pull-requests: write`, and a pull request from a fork gets a "
                "read-only one: see the workflow_run recipe in docs/security.md. The gate is "
                "unchanged")
    status = f"HTTP {exc.status}" if exc.status is not None else "network error"
    return f"warning: the comment on {which} was not posted ({status}{said}). The gate is unchanged"


class _Api:
    """The REST calls of one comment, under one deadline, with the token sent only to the API's
    origin."""

    def __init__(self, target: PullRequest) -> None:
        self.target = target
        self.deadline = time.monotonic() + DEADLINE
        self.opener = urllib.request.build_opener(_SameOriginRedirects)

    def find_pull_request(self) -> int | None:
        """The open pull request whose head is the `workflow_run`'s branch at its commit."""
        if self.target.head is None:
            return None
        branch, sha = self.target.head
        query = urllib.parse.urlencode({"head": branch, "state": "open", "per_page": "100"})
        pulls, _ = self.request("GET", f"{self._repo}/pulls?{query}")
        for pull in pulls if isinstance(pulls, list) else ():
            head = pull.get("head") if isinstance(pull, dict) else None
            if isinstance(head, dict) and head.get("sha") == sha:
                return _number(pull)
        return None

    def upsert(self, number: int, mark: str, body: str) -> str:
        """PATCH our comment that holds `mark`, or POST a new one: "updated" or "created"."""
        comment_id = self.find_comment(number, mark)
        if comment_id is not None:
            self.request("PATCH", f"{self._repo}/issues/comments/{comment_id}", {"body": body})
            return "updated"
        self.request("POST", f"{self._repo}/issues/{number}/comments", {"body": body})
        return "created"

    def find_comment(self, number: int, mark: str) -> int | None:
        """The id of the pull request's first comment whose body starts with `mark` and whose
        author is the token's own identity, reading every page (the Link header's `next`),
        oldest first. A body that only holds the marker further in (a person quoting it), or
        one by anybody else (a marker copied into their own comment), is never overwritten."""
        url: str | None = f"{self._repo}/issues/{number}/comments?per_page=100"
        marked: list[tuple[int, str | None]] = []
        for _ in range(MAX_PAGES):
            if url is None:
                break
            comments, url = self._page(url)
            marked += [found for comment in comments if (found := _marked(comment, mark))]
        if not marked:
            return None
        identity = self.identity()
        return next((comment_id for comment_id, login in marked if login == identity), None)

    def identity(self) -> str:
        """The login the token comments as: the user GET /user names (a personal token), else
        GITHUB_TOKEN's bot, whose token that call refuses."""
        try:
            user, _ = self.request("GET", f"{self.target.api}/user")
        except ApiError as exc:
            if exc.status == 403:
                return ACTIONS_BOT
            raise
        login = user.get("login") if isinstance(user, dict) else None
        if not isinstance(login, str) or not login:
            raise ApiError(None, "GET /user named no login")
        return login

    @property
    def _repo(self) -> str:
        return f"{self.target.api}/repos/{self.target.repository}"

    def _page(self, url: str) -> tuple[list[Any], str | None]:
        data, headers = self.request("GET", url)
        if not isinstance(data, list):
            raise ApiError(None, "the comments' list was not a JSON array")
        following = _next_link(headers.get("Link") or "")
        # The token goes to the API and nowhere else, whatever a Link header says.
        if following is not None and _origin(following) != _origin(self.target.api):
            raise ApiError(None, "the next page is not on the API's host")
        return data, following

    def request(self, method: str, url: str, payload: dict[str, Any] | None = None,
                ) -> tuple[Any, Mapping[str, str]]:
        """One call: its JSON answer and headers. The token is an unredirected header, which
        _SameOriginRedirects hands on only to the same origin."""
        data = json.dumps(payload).encode("utf-8") if payload is not None else None
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise ApiError(None, f"the API took longer than {DEADLINE:.0f} s in all")
        try:
            request = urllib.request.Request(url, data=data, method=method, headers={
                "Accept": "application/vnd.github+json",
                "X-GitHub-Api-Version": "2022-11-28",
                "User-Agent": "onnx-parity",
                **({"Content-Type": "application/json"} if data is not None else {}),
            })
            request.add_unredirected_header("Authorization", f"Bearer {self.target.token}")
            with self.opener.open(request, timeout=min(TIMEOUT, left)) as response:
                raw = _read(response, self.deadline)
                headers = {key: value for key, value in response.headers.items()}
        except urllib.error.HTTPError as exc:
            raise ApiError(exc.code, _api_message(exc)) from None
        # Refused, reset, timed out, a broken response; or a GITHUB_API_URL urllib cannot use (no
        # scheme: ValueError; a port out of range: OverflowError): a warning all the same.
        except (OSError, HTTPException, ValueError, OverflowError) as exc:
            raise ApiError(None, one_line(str(getattr(exc, "reason", exc)), _API_TEXT_LIMIT)) \
                from None
        if not raw:
            return None, headers

        try:
            return parse_bounded_json(raw, "the API's answer", JsonLimits(bytes=MAX_ANSWER)), \
                headers
        except ReportFormatError:
            raise ApiError(None, "the API's answer was not JSON within bounds") from None


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Redirects followed as urllib does, but the token goes along only to the origin (scheme,
    host and port) it was sent to: a redirect anywhere else gets the request without it."""

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str,
                         headers: Any, newurl: str) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        token = req.unredirected_hdrs.get("Authorization")
        if new is not None and token and _origin(newurl) == _origin(req.full_url):
            new.add_unredirected_header("Authorization", token)
        return new


def _origin(url: str) -> tuple[str, str, int | None] | None:
    """(scheme, host, port) of `url`, the port filled in for http and https; None when it has
    none that can be read (never the same origin as anything)."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower())
    except ValueError:
        return None
    if not parts.hostname:
        return None
    return parts.scheme.lower(), parts.hostname.lower(), port


def _read(response: Any, deadline: float) -> bytes:
    """The answer's body, at most MAX_ANSWER bytes and before the deadline, however slowly the
    server sends it."""
    chunks, size = [], 0
    while chunk := response.read(1 << 16):
        size += len(chunk)
        if size > MAX_ANSWER:
            raise ApiError(None, f"the API's answer is over the limit of {size_text(MAX_ANSWER)}")
        if time.monotonic() > deadline:
            raise ApiError(None, f"the API took longer than {DEADLINE:.0f} s in all")
        chunks.append(chunk)
    return b"".join(chunks)


def _marked(comment: Any, mark: str) -> tuple[int, str | None] | None:
    """(id, author's login) of a comment whose body starts with `mark`."""
    if not isinstance(comment, dict):
        return None
    text, comment_id, user = comment.get("body"), comment.get("id"), comment.get("user")
    if not (isinstance(text, str) and text.startswith(mark) and isinstance(comment_id, int)
            and not isinstance(comment_id, bool)):
        return None
    login = user.get("login") if isinstance(user, dict) else None
    return comment_id, login if isinstance(login, str) else None


def _next_link(header: str) -> str | None:
    """The `rel="next"` URL of a Link header: `<url>; rel="next", <url>; rel="last"`."""
    for part in header.split(","):
        url, _, params = part.partition(";")
        if 'rel="next"' in params.replace(" ", "") and url.strip().startswith("<"):
            return url.strip()[1:-1]
    return None


def _api_message(exc: urllib.error.HTTPError) -> str:
    """What the API said about a failed call: its JSON `message`, else its text, one line."""
    try:
        raw = exc.read(4096)
    except (OSError, HTTPException):
        raw = b""
    text = raw.decode("utf-8", errors="replace")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        data = None
    if isinstance(data, dict) and isinstance(data.get("message"), str):
        text = data["message"]
    return one_line(text or str(exc.reason), _API_TEXT_LIMIT)
