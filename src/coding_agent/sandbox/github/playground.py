"""The sandbox forge's page for people (`coding-agent demo --serve`, SPEC 12).

A newcomer plays the maintainer of one repository in a browser: opens issues, labels
them for the agent (which also assigns the bot, so unassigning it stops the run),
comments, and unassigns the bot, and watches the issue's labels, assignees, comments
and pull requests change. It is served beside the REST API on the sandbox's own port,
under `/_playground/`, without the API's token, but with a secret of its own: every
user of this machine reaches the loopback port, and one who could label an issue here
would have the agent (and with `--llm` the operator's model) work it. So the page and
every call under it need the run's random `Playground.secret`: carried in the URL
`coding-agent demo --serve` prints (`?key=...`), which sets it as a cookie for the page's
own calls (HttpOnly, SameSite=Strict), or sent as `X-Playground-Key`. Without it: 401.

What the page shows (issue titles, comments of people and of the model) is untrusted
text: the page sets it as text, never as markup. Its writes take JSON only, so another
site open in the same browser cannot post to it (a cross-site JSON POST needs a CORS
preflight this app never grants), and they are refused unless `Host` names the loopback
address the page is served on (no DNS rebinding).
"""

from __future__ import annotations

import hmac
import json
import re
import secrets
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from coding_agent.sandbox.github.playground_page import page_html
from coding_agent.sandbox.github.records import IssueRecord
from coding_agent.sandbox.github.state import GitHubState, NotFoundError

__all__ = ["Playground", "PREFIX", "KEY_PARAMETER", "create_playground_app", "WithPlayground"]

PREFIX = "/_playground"
KEY_PARAMETER = "key"  # the secret's name in the printed URL
_KEY_COOKIE = "coding_agent_playground"
_KEY_HEADER = "x-playground-key"
MAX_TITLE = 256
MAX_BODY = 65536
_LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
# Markdown renders an HTML comment as nothing: the agent's hidden markers are not shown.
_HTML_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)


@dataclass
class Playground:
    """Who the page acts as and on what: the maintainer (write access) of `repo`, the bot
    it assigns and the label it applies. `dashboard_url` is linked once known."""

    repo: str
    maintainer: str
    bot: str
    label: str = "coding agent"
    dashboard_url: str | None = None
    # Drawn per run: what the page and its API want (in the printed URL, then a cookie).
    secret: str = field(default_factory=lambda: secrets.token_urlsafe(24), repr=False)


class _BadRequest(Exception):
    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def _text(body: dict[str, Any], name: str, limit: int, required: bool) -> str:
    value = body.get(name, "")
    if not isinstance(value, str):
        raise _BadRequest(f"{name} must be text")
    if required and not value.strip():
        raise _BadRequest(f"{name} is empty")
    if len(value) > limit:
        raise _BadRequest(f"{name} is longer than {limit} characters")
    return value


def _loopback_host(request: Request) -> str:
    """The request's `Host`, when it names the loopback address (no DNS rebinding)."""
    host = request.headers.get("host", "")
    if host.rpartition(":")[0] not in _LOOPBACK_HOSTS:
        raise _BadRequest(f"the playground answers only on the loopback address, not on Host {host!r}", 403)
    return host


async def _json_body(request: Request) -> dict[str, Any]:
    """The JSON object a write sends; refused from anywhere but a page served here."""
    host = _loopback_host(request)
    origin = request.headers.get("origin")
    if origin is not None and origin != f"http://{host}":
        raise _BadRequest("a write must come from the playground's own page", 403)
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise _BadRequest("the body must be JSON (Content-Type: application/json)", 415)
    raw = await request.body()
    try:
        body = json.loads(raw or b"{}")
    except (ValueError, UnicodeDecodeError):
        raise _BadRequest("the body is not valid JSON") from None
    if not isinstance(body, dict):
        raise _BadRequest("the body must be a JSON object")
    return body


class _Endpoints:
    def __init__(self, state: GitHubState, settings: Playground) -> None:
        self.state = state
        self.settings = settings

    def _issue(self, request: Request) -> IssueRecord:
        try:
            issue = self.state.issue(self.settings.repo, int(request.path_params["number"]))
        except NotFoundError:
            raise _BadRequest(f"no issue #{request.path_params['number']} in {self.settings.repo}", 404) from None
        if issue.is_pull:
            raise _BadRequest(f"#{issue.number} is a pull request, not an issue", 404)
        return issue

    async def page(self, request: Request) -> Response:
        """The page, setting the secret it was opened with as the cookie its own calls send."""
        _loopback_host(request)
        settings = self.settings
        page = HTMLResponse(page_html(settings.repo, settings.maintainer, settings.bot, settings.dashboard_url))
        page.set_cookie(_KEY_COOKIE, self.settings.secret, path=PREFIX, httponly=True, samesite="strict")
        return page

    async def issues(self, request: Request) -> Response:
        _loopback_host(request)
        return JSONResponse({"issues": [self._issue_view(issue) for issue in self._issues()]})

    def _issues(self) -> list[IssueRecord]:
        repo = self.state.repo(self.settings.repo).full_name
        found = [issue for issue in self.state.issues() if issue.repo == repo and not issue.is_pull]
        return sorted(found, key=lambda issue: issue.number, reverse=True)

    def _issue_view(self, issue: IssueRecord) -> dict[str, Any]:
        comments = [
            {"author": c.author, "body": _HTML_COMMENT.sub("", c.body).strip(), "created_at": c.created_at.isoformat()}
            for c in self.state.comments(self.settings.repo, issue.number)
        ]
        return {
            "number": issue.number,
            "title": issue.title,
            "body": issue.body,
            "state": issue.state,
            "labels": list(issue.labels),
            "assignees": list(issue.assignees),
            "comments": comments,
            "pulls": self._pulls_of(issue.number),
        }

    def _pulls_of(self, number: int) -> list[dict[str, Any]]:
        """The pull requests whose body names this issue (what the agent opens for it)."""
        mention = re.compile(rf"#{number}\b")
        pulls = []
        for pull in self.state.pulls(self.settings.repo):
            if mention.search(pull.body or "") or mention.search(pull.title):
                files = self.state.git.changed_files(self.settings.repo, pull.base or "main", pull.head or "")
                pulls.append(
                    {"number": pull.number, "title": pull.title, "draft": pull.draft, "branch": pull.head, "files": files}
                )
        return pulls

    async def create_issue(self, request: Request) -> Response:
        body = await _json_body(request)
        title = _text(body, "title", MAX_TITLE, required=True)
        text = _text(body, "body", MAX_BODY, required=False)
        number = self.state.create_issue(self.settings.repo, title.strip(), text, author=self.settings.maintainer)
        return JSONResponse({"number": number}, status_code=201)

    async def label(self, request: Request) -> Response:
        """Label the issue for the agent, assigning the bot first: a run of an assigned bot
        is the one unassigning stops (SPEC 8.2)."""
        await _json_body(request)
        issue = self._issue(request)
        self.state.assign(self.settings.repo, issue.number, self.settings.bot, actor=self.settings.maintainer)
        self.state.add_label(self.settings.repo, issue.number, self.settings.label, actor=self.settings.maintainer)
        return JSONResponse({"number": issue.number, "labelled": self.settings.label, "assigned": self.settings.bot})

    async def comment(self, request: Request) -> Response:
        body = await _json_body(request)
        issue = self._issue(request)
        text = _text(body, "body", MAX_BODY, required=True)
        comment_id = self.state.add_comment(self.settings.repo, issue.number, self.settings.maintainer, text)
        return JSONResponse({"number": issue.number, "comment": comment_id}, status_code=201)

    async def unassign(self, request: Request) -> Response:
        await _json_body(request)
        issue = self._issue(request)
        self.state.unassign(self.settings.repo, issue.number, self.settings.bot, actor=self.settings.maintainer)
        return JSONResponse({"number": issue.number, "unassigned": self.settings.bot})


async def _bad_request(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, _BadRequest)
    return JSONResponse({"error": str(exc)}, status_code=exc.status)


def create_playground_app(state: GitHubState, settings: Playground) -> ASGIApp:
    """The page and its JSON endpoints, every path under `PREFIX`."""
    api = _Endpoints(state, settings)
    issue = PREFIX + "/issues/{number:int}"

    async def to_page(request: Request) -> Response:
        query = f"?{request.url.query}" if request.url.query else ""
        return RedirectResponse(PREFIX + "/" + query, status_code=307)

    app = Starlette(
        routes=[
            Route(PREFIX, to_page, methods=["GET"]),
            Route(PREFIX + "/", api.page, methods=["GET"]),
            Route(PREFIX + "/issues", api.issues, methods=["GET"]),
            Route(PREFIX + "/issues", api.create_issue, methods=["POST"]),
            Route(issue + "/label", api.label, methods=["POST"]),
            Route(issue + "/comments", api.comment, methods=["POST"]),
            Route(issue + "/unassign", api.unassign, methods=["POST"]),
        ],
        exception_handlers={_BadRequest: _bad_request},
    )
    return _SecretGuard(app, settings.secret)


class _SecretGuard:
    """401 for any request under `PREFIX` without the run's secret (URL, cookie or header),
    before any route reads or writes anything."""

    def __init__(self, app: ASGIApp, secret: str) -> None:
        self.app = app
        self.secret = secret.encode()

    def _given(self, request: Request) -> str:
        return (
            request.query_params.get(KEY_PARAMETER)
            or request.headers.get(_KEY_HEADER)
            or request.cookies.get(_KEY_COOKIE)
            or ""
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or hmac.compare_digest(self._given(Request(scope)).encode(), self.secret):
            await self.app(scope, receive, send)
            return
        why = "the playground needs the secret of this run: open the URL `coding-agent demo --serve` printed"
        await JSONResponse({"error": why}, status_code=401)(scope, receive, send)


class WithPlayground:
    """Send `PREFIX` paths to the playground page and everything else to `api`."""

    def __init__(self, api: ASGIApp, page: ASGIApp) -> None:
        self.api = api
        self.page = page

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path == PREFIX or path.startswith(PREFIX + "/"):
            await self.page(scope, receive, send)
            return
        await self.api(scope, receive, send)
