"""A local server on 127.0.0.1 that speaks enough of GitHub's REST API for the pull request's
comment: a pull request's comments page by page (the Link header), each with its author;
creating and updating one; GET /user, which GITHUB_TOKEN may not call; looking a pull request up
by its head; and, on request, redirects, oversized and slow answers. The `github` fixture sets
the environment of a job on pull request #7 of acme/models and lets no request leave the
machine."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

TOKEN = "ghs_secret-token-never-shown"
BOT = "github-actions[bot]"
PAGE = 2  # comments per page, small so that finding the comment must follow the Link header
OTHERS = 5  # comments already on the pull request, by people


@dataclass
class Comment:
    body: str
    author: str


class FakeGitHub:
    """The endpoints of one repository's pull request #7, in memory. `users` maps a token to the
    login GET /user names; a token it lacks is GITHUB_TOKEN's, refused there (403), and its
    comments are by github-actions[bot]."""

    def __init__(self) -> None:
        self.comments: dict[int, Comment] = {
            i: Comment(f"a person's comment {i}", f"person{i}") for i in range(1, OTHERS + 1)}
        self.users: dict[str, str] = {}
        self.requests: list[tuple[str, str]] = []
        self.tokens: set[str] = set()
        self.fail: dict[str, tuple[int, str]] = {}  # method -> (status, body)
        self.redirect: str | None = None  # where the comments' first page is sent (302),
        # unless its query says `moved`
        self.answer: bytes | None = None  # the comments' list answered with these bytes
        self.trickle: float = 0.0  # seconds between the answer's bytes
        self.pulls: list[dict[str, Any]] = []  # GET /repos/acme/models/pulls
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def ours(self) -> list[str]:
        return [c.body for c in self.comments.values() if "onnx-parity:comment" in c.body]

    def bodies(self) -> dict[int, str]:
        return {i: c.body for i, c in self.comments.items()}

    def start(self) -> None:
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

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
                if not github.trickle:
                    self.wfile.write(raw)
                    return
                for byte in raw:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(github.trickle)

            def _handle(self, method: str) -> None:
                github.requests.append((method, self.path))
                token = self.headers.get("Authorization", "")
                github.tokens.add(token)
                if method in github.fail:
                    status, body = github.fail[method]
                    self._answer(status, body.encode())
                    return
                url = urlparse(self.path)
                bearer = token.removeprefix("Bearer ")
                author = github.users.get(bearer, BOT)
                if method == "GET" and url.path == "/user":
                    if bearer in github.users:
                        self._answer(200, {"login": author, "type": "User"})
                    else:
                        self._answer(403, {"message": "Resource not accessible by integration"})
                    return
                if method == "GET" and url.path == "/repos/acme/models/pulls":
                    self._answer(200, [p for p in github.pulls if parse_qs(url.query).get(
                        "head") == [p["label"]]])
                    return
                if method == "GET" and url.path == "/repos/acme/models/issues/7/comments":
                    self._comments(url.query)
                    return
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["body"]
                if method == "POST" and url.path == "/repos/acme/models/issues/7/comments":
                    new = max(github.comments) + 1
                    github.comments[new] = Comment(body, author)
                    self._answer(201, {"id": new, "body": body})
                    return
                found = re.fullmatch(r"/repos/acme/models/issues/comments/(\d+)", url.path)
                if method == "PATCH" and found and int(found[1]) in github.comments:
                    github.comments[int(found[1])].body = body
                    self._answer(200, {"id": int(found[1]), "body": body})
                    return
                self._answer(404, {"message": "Not Found"})

            def _comments(self, query: str) -> None:
                if github.redirect is not None and not {"moved", "page"} & set(parse_qs(query)):
                    self._answer(302, b"", {"Location": github.redirect})
                    return
                if github.answer is not None:
                    self._answer(200, github.answer)
                    return
                page = int(parse_qs(query).get("page", ["1"])[0])
                items = sorted(github.comments.items())
                chunk = items[(page - 1) * PAGE: page * PAGE]
                headers = {}
                if page * PAGE < len(items):
                    headers["Link"] = (f'<{github.url}/repos/acme/models/issues/7/comments'
                                       f'?per_page={PAGE}&page={page + 1}>; rel="next", '
                                       f'<{github.url}/x>; rel="last"')
                self._answer(200, [{"id": i, "body": c.body,
                                    "user": {"login": c.author,
                                             "type": "Bot" if c.author.endswith("[bot]")
                                             else "User"}}
                                   for i, c in chunk], headers)

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

            def do_PATCH(self) -> None:
                self._handle("PATCH")

        return Handler


def job_environment(fake: FakeGitHub, event: Path, token: str = TOKEN) -> dict[str, str]:
    """The variables of a GitHub Actions job on pull request #7 whose API is `fake`."""
    event.write_text(json.dumps({"action": "synchronize", "pull_request": {"number": 7}}))
    return {"GITHUB_ACTIONS": "true", "GITHUB_API_URL": fake.url,
            "GITHUB_REPOSITORY": "acme/models", "GITHUB_TOKEN": token,
            "GITHUB_EVENT_PATH": str(event), "GITHUB_SERVER_URL": "https://github.com",
            "GITHUB_RUN_ID": "42", "GITHUB_WORKFLOW": "parity", "GITHUB_JOB": "check"}


@pytest.fixture
def github(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGitHub]:
    fake = FakeGitHub()
    fake.start()
    for key in ("GITHUB_STEP_SUMMARY", "GITHUB_WORKSPACE"):
        monkeypatch.delenv(key, raising=False)
    for key, value in job_environment(fake, tmp_path / "event.json").items():
        monkeypatch.setenv(key, value)
    # No request leaves the machine: any connection but to 127.0.0.1 fails the test.
    connect = socket.create_connection

    def local_only(address: Any, *args: Any, **kwargs: Any) -> socket.socket:
        assert address[0] == "127.0.0.1", f"a request to {address[0]}"
        return connect(address, *args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", local_only)
    yield fake
    fake.stop()
