"""The Starlette app of the GitHub testing server: REST v3 endpoints over a `GitHubState`.

Only the endpoints the agent uses, but each with GitHub's real shape, status codes and
headers, so that githubkit parses every answer unmodified and the adapter is tested
against the same protocol it meets in production.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from coding_agent.testing.faults import FaultInjector
from coding_agent.testing.github.http import ApiError, GitHubMiddleware, api_error_response, json_reply, paginate
from coding_agent.testing.github.records import IssueRecord, RepoRecord
from coding_agent.testing.github.render import Renderer
from coding_agent.testing.github.search import MAX_QUERY_LENGTH, parse_query
from coding_agent.testing.github.state import GitHubState, NotFoundError, ValidationFailed

__all__ = ["create_github_app"]

Endpoint = Callable[[Request], Any]


async def _body(request: Request) -> Any:
    raw = await request.body()
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except ValueError:
        raise ApiError(400, "Problems parsing JSON") from None


def _string_list(value: Any, field: str) -> list[str]:
    """`["a", "b"]` or `[{"name": "a"}]`, as GitHub accepts for labels."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ApiError(422, f"Invalid request.\n\nFor '{field}', {value!r} is not an array.")
    names = [item.get("name") if isinstance(item, dict) else item for item in value]
    if not all(isinstance(name, str) for name in names):
        raise ApiError(422, f"Invalid request.\n\nFor '{field}', every item must be a string.")
    return names


# GitHub refuses longer issue, comment and pull request bodies with 422.
MAX_BODY_LENGTH = 65_536


def _within_limit(text: Any, resource: str) -> Any:
    """`text`, or the 422 GitHub answers for a body over 65,536 characters."""
    if isinstance(text, str) and len(text) > MAX_BODY_LENGTH:
        raise ValidationFailed(f"body is too long (maximum is {MAX_BODY_LENGTH} characters)", resource, "custom", "body")
    return text


def _required_string(body: Any, field: str) -> str:
    value = body.get(field) if isinstance(body, dict) else None
    if not isinstance(value, str) or not value:
        raise ValidationFailed(f"{field} is missing", "Issue", "missing_field", field)
    return value


class _Api:
    """The endpoints; each reads `request.state.login`, set by the middleware."""

    def __init__(self, state: GitHubState) -> None:
        self.state = state

    # ------------------------------------------------------------ helpers

    def _render(self, request: Request) -> Renderer:
        base = str(request.base_url).rstrip("/")
        return Renderer(self.state, api=base, web=base)

    def _repo(self, request: Request) -> RepoRecord:
        """The path's repository; a private one the user cannot see is a 404, as on GitHub."""
        full = f"{request.path_params['owner']}/{request.path_params['repo']}"
        record = self.state.repo(full)
        if self.state.permission(record.full_name, request.state.login) is None:
            raise NotFoundError(full)
        return record

    def _require(self, request: Request, repo: RepoRecord, level: str) -> None:
        if not self.state.can(repo.full_name, request.state.login, level):
            raise ApiError(403, "Resource not accessible by personal access token")

    def _issue(self, request: Request, repo: RepoRecord) -> IssueRecord:
        return self.state.issue(repo.full_name, request.path_params["number"])

    def _pull(self, request: Request, repo: RepoRecord) -> IssueRecord:
        issue = self._issue(request, repo)
        if not issue.is_pull:
            raise NotFoundError(f"{repo.full_name}!{issue.number}")
        return issue

    # ------------------------------------------------------------ user, repo, search

    async def get_user(self, request: Request) -> Response:
        return json_reply(request, self._render(request).authenticated_user(request.state.login))

    async def get_user_by_name(self, request: Request) -> Response:
        user = self.state.user(request.path_params["username"])
        return json_reply(request, self._render(request).authenticated_user(user.login))

    async def get_repo(self, request: Request) -> Response:
        return json_reply(request, self._render(request).repo(self._repo(request)))

    async def get_contents(self, request: Request) -> Response:
        """A file's content at `?ref=` (default branch when absent), base64 as on GitHub."""
        repo = self._repo(request)
        path = request.path_params["path"]
        ref = request.query_params.get("ref") or repo.default_branch
        data = self.state.git.read_file(repo.full_name, ref, path)
        if data is None:
            raise NotFoundError(f"{repo.full_name}:{ref}:{path}")
        return json_reply(
            request,
            {"type": "file", "name": path.rsplit("/", 1)[-1], "path": path, "size": len(data), "encoding": "base64",
             "content": base64.b64encode(data).decode(), "sha": hashlib.sha1(data).hexdigest()},
        )  # fmt: skip

    async def search_issues(self, request: Request) -> Response:
        q = request.query_params.get("q", "")
        if not q.strip():
            raise ValidationFailed("q is missing", "Search", "missing", "q")
        if len(q) > MAX_QUERY_LENGTH:
            raise ValidationFailed(f"The search is longer than {MAX_QUERY_LENGTH} characters.", "Search", "invalid", "q")
        query = parse_query(q)
        login = request.state.login
        hits: list[IssueRecord] = []
        for issue in self.state.issues():
            repo = self.state.repo(issue.repo)
            bodies = lambda issue=issue: [c.body for c in self.state.comments(issue.repo, issue.number)]  # noqa: E731
            if self.state.permission(repo.full_name, login) is not None and query.matches(issue, repo.owner, bodies):
                hits.append(issue)
        sort = request.query_params.get("sort", "created")
        key = {"updated": lambda i: i.updated_at, "comments": lambda i: len(self.state.comments(i.repo, i.number))}.get(
            sort, lambda i: i.created_at
        )
        hits.sort(key=lambda i: (key(i), i.id), reverse=request.query_params.get("order", "desc") != "asc")
        page, link = paginate(request, hits)
        render = self._render(request)
        payload = {
            "total_count": len(hits),
            "incomplete_results": False,
            "search_type": "lexical",
            "items": [render.search_item(issue) for issue in page],
        }
        return json_reply(request, payload, link=link)

    # ------------------------------------------------------------ issues

    async def get_issue(self, request: Request) -> Response:
        repo = self._repo(request)
        return json_reply(request, self._render(request).issue(self._issue(request, repo)))

    async def create_issue(self, request: Request) -> Response:
        repo = self._repo(request)
        body = await _body(request)
        title = _required_string(body, "title")
        login = request.state.login
        # GitHub silently drops labels and assignees from users who may not triage.
        may_triage = self.state.can(repo.full_name, login, "triage")
        labels = _string_list(body.get("labels"), "labels") if may_triage else []
        assignees = _string_list(body.get("assignees"), "assignees") if may_triage else []
        number = self.state.create_issue(
            repo.full_name, title, _within_limit(body.get("body") or "", "Issue"), login, labels, assignees
        )
        issue = self.state.issue(repo.full_name, number)
        return json_reply(request, self._render(request).issue(issue), status=201)

    async def update_issue(self, request: Request) -> Response:
        repo = self._repo(request)
        issue = await self._edit(request, repo, self._issue(request, repo), "triage", "Issue")
        return json_reply(request, self._render(request).issue(issue))

    async def _edit(self, request: Request, repo: RepoRecord, item: IssueRecord, level: str, resource: str) -> IssueRecord:
        """Title, body or state of an issue or PR, by its author or someone holding `level`."""
        if item.author.lower() != request.state.login.lower():
            self._require(request, repo, level)
        body = await _body(request)
        return self.state.update_issue(
            repo.full_name,
            item.number,
            title=body.get("title"),
            body=_within_limit(body.get("body"), resource),
            state=body.get("state"),
        )

    # ------------------------------------------------------------ comments

    async def list_comments(self, request: Request) -> Response:
        repo = self._repo(request)
        issue = self._issue(request, repo)
        comments = self.state.comments(repo.full_name, issue.number)
        since = request.query_params.get("since")
        if since:
            try:
                threshold = datetime.fromisoformat(since.replace("Z", "+00:00"))
            except ValueError:
                raise ApiError(422, f"Invalid value for since: {since!r}") from None
            comments = [c for c in comments if c.updated_at >= threshold]
        page, link = paginate(request, comments)
        render = self._render(request)
        return json_reply(request, [render.comment(c) for c in page], link=link)

    async def create_comment(self, request: Request) -> Response:
        repo = self._repo(request)
        issue = self._issue(request, repo)
        text = _within_limit(_required_string(await _body(request), "body"), "IssueComment")
        comment_id = self.state.add_comment(repo.full_name, issue.number, request.state.login, text)
        return json_reply(request, self._render(request).comment(self.state.comment(comment_id)), status=201)

    def _own_comment(self, request: Request, repo: RepoRecord) -> int:
        comment_id: int = request.path_params["comment_id"]
        comment = self.state.comment(comment_id)
        if comment.repo.lower() != repo.full_name.lower():
            raise NotFoundError(str(comment_id))
        return comment_id

    async def get_comment(self, request: Request) -> Response:
        repo = self._repo(request)
        comment = self.state.comment(self._own_comment(request, repo))
        return json_reply(request, self._render(request).comment(comment))

    async def update_comment(self, request: Request) -> Response:
        repo = self._repo(request)
        comment_id = self._own_comment(request, repo)
        if self.state.comment(comment_id).author.lower() != request.state.login.lower():
            self._require(request, repo, "write")
        text = _within_limit(_required_string(await _body(request), "body"), "IssueComment")
        return json_reply(request, self._render(request).comment(self.state.edit_comment(comment_id, text)))

    # ------------------------------------------------------------ labels

    async def list_repo_labels(self, request: Request) -> Response:
        repo = self._repo(request)
        page, link = paginate(request, self.state.labels(repo.full_name))
        render = self._render(request)
        return json_reply(request, [render.label(repo.full_name, label) for label in page], link=link)

    async def get_repo_label(self, request: Request) -> Response:
        repo = self._repo(request)
        label = self.state.label(repo.full_name, request.path_params["name"])
        return json_reply(request, self._render(request).label(repo.full_name, label))

    async def create_repo_label(self, request: Request) -> Response:
        repo = self._repo(request)
        self._require(request, repo, "write")
        body = await _body(request)
        name = _required_string(body, "name")
        label = self.state.create_label(repo.full_name, name, body.get("color") or "ededed", body.get("description"))
        return json_reply(request, self._render(request).label(repo.full_name, label), status=201)

    async def list_issue_labels(self, request: Request) -> Response:
        repo = self._repo(request)
        issue = self._issue(request, repo)
        return json_reply(request, self._render(request).issue_labels(issue))

    async def add_issue_labels(self, request: Request) -> Response:
        repo = self._repo(request)
        issue = self._issue(request, repo)
        self._require(request, repo, "triage")
        body = await _body(request)
        names = _string_list(body.get("labels") if isinstance(body, dict) else body, "labels")
        for name in names:
            self.state.add_label(repo.full_name, issue.number, name, request.state.login)
        issue = self.state.issue(repo.full_name, issue.number)
        return json_reply(request, self._render(request).issue_labels(issue))

    async def remove_issue_label(self, request: Request) -> Response:
        repo = self._repo(request)
        issue = self._issue(request, repo)
        self._require(request, repo, "triage")
        if not self.state.remove_label(repo.full_name, issue.number, request.path_params["name"], request.state.login):
            raise ApiError(404, "Label does not exist")
        issue = self.state.issue(repo.full_name, issue.number)
        return json_reply(request, self._render(request).issue_labels(issue))

    # ------------------------------------------------------------ assignees and events

    async def add_assignees(self, request: Request) -> Response:
        return await self._change_assignees(request, add=True)

    async def remove_assignees(self, request: Request) -> Response:
        return await self._change_assignees(request, add=False)

    async def _change_assignees(self, request: Request, add: bool) -> Response:
        repo = self._repo(request)
        issue = self._issue(request, repo)
        self._require(request, repo, "triage")
        body = await _body(request)
        change = self.state.assign if add else self.state.unassign
        for login in _string_list(body.get("assignees"), "assignees"):
            change(repo.full_name, issue.number, login, request.state.login)
        issue = self.state.issue(repo.full_name, issue.number)
        return json_reply(request, self._render(request).issue(issue), status=201 if add else 200)

    async def list_events(self, request: Request) -> Response:
        repo = self._repo(request)
        issue = self._issue(request, repo)
        page, link = paginate(request, self.state.events(repo.full_name, issue.number))
        render = self._render(request)
        return json_reply(request, [render.event(event) for event in page], link=link)

    async def get_permission(self, request: Request) -> Response:
        repo = self._repo(request)
        user = self.state.user(request.path_params["username"])
        return json_reply(request, self._render(request).permission(repo.full_name, user.login))

    # ------------------------------------------------------------ pull requests

    async def get_pull(self, request: Request) -> Response:
        repo = self._repo(request)
        return json_reply(request, self._render(request).pull(self._pull(request, repo)))

    async def list_pulls(self, request: Request) -> Response:
        repo = self._repo(request)
        params = request.query_params
        wanted_state = params.get("state", "open")
        head = params.get("head")
        pulls = self.state.pulls(repo.full_name)
        if wanted_state != "all":
            pulls = [p for p in pulls if p.state == wanted_state]
        if head:
            owner, _, branch = head.rpartition(":")
            pulls = [
                p
                for p in pulls
                if p.head == branch and (not owner or (p.head_owner or repo.owner).lower() == owner.lower())
            ]
        if params.get("base"):
            pulls = [p for p in pulls if p.base == params["base"]]
        pulls.sort(key=lambda p: p.number, reverse=params.get("direction", "desc") != "asc")
        page, link = paginate(request, pulls)
        render = self._render(request)
        return json_reply(request, [render.pull(p) for p in page], link=link)

    async def create_pull(self, request: Request) -> Response:
        repo = self._repo(request)
        self._require(request, repo, "write")
        body = await _body(request)
        title = _required_string(body, "title")
        owner, _, head = _required_string(body, "head").rpartition(":")
        base = _required_string(body, "base")
        if not owner or owner.lower() == repo.owner.lower():
            branches = self.state.branches(repo.full_name)
            for field, branch in (("head", head), ("base", base)):
                if branch not in branches:
                    raise ValidationFailed(f"{field} branch {branch!r} does not exist", "PullRequest", "invalid", field)
        number = self.state.create_pull(
            repo.full_name,
            title,
            _within_limit(body.get("body") or "", "PullRequest"),
            request.state.login,
            head=head,
            base=base,
            draft=bool(body.get("draft", False)),
            head_owner=owner or None,
        )
        return json_reply(request, self._render(request).pull(self.state.issue(repo.full_name, number)), status=201)

    async def update_pull(self, request: Request) -> Response:
        repo = self._repo(request)
        pull = await self._edit(request, repo, self._pull(request, repo), "write", "PullRequest")
        return json_reply(request, self._render(request).pull(pull))

    async def list_review_comments(self, request: Request) -> Response:
        repo = self._repo(request)
        pull = self._pull(request, repo)
        page, link = paginate(request, self.state.review_comments(repo.full_name, pull.number))
        render = self._render(request)
        return json_reply(request, [render.review_comment(c) for c in page], link=link)

    async def reply_review_comment(self, request: Request) -> Response:
        repo = self._repo(request)
        pull = self._pull(request, repo)
        text = _within_limit(_required_string(await _body(request), "body"), "IssueComment")
        comment_id = self.state.add_review_comment(
            repo.full_name, pull.number, request.state.login, text, in_reply_to=request.path_params["comment_id"]
        )
        return json_reply(request, self._render(request).review_comment(self.state.review_comment(comment_id)), status=201)


def _routes(api: _Api) -> list[Route]:
    repo = "/repos/{owner}/{repo}"
    issue = repo + "/issues/{number:int}"
    pull = repo + "/pulls/{number:int}"
    return [
        Route("/user", api.get_user, methods=["GET"]),
        Route("/users/{username}", api.get_user_by_name, methods=["GET"]),
        Route("/search/issues", api.search_issues, methods=["GET"]),
        Route(repo, api.get_repo, methods=["GET"]),
        Route(repo + "/contents/{path:path}", api.get_contents, methods=["GET"]),
        Route(repo + "/issues", api.create_issue, methods=["POST"]),
        Route(repo + "/issues/comments/{comment_id:int}", api.get_comment, methods=["GET"]),
        Route(repo + "/issues/comments/{comment_id:int}", api.update_comment, methods=["PATCH"]),
        Route(issue, api.get_issue, methods=["GET"]),
        Route(issue, api.update_issue, methods=["PATCH"]),
        Route(issue + "/comments", api.list_comments, methods=["GET"]),
        Route(issue + "/comments", api.create_comment, methods=["POST"]),
        Route(issue + "/labels", api.list_issue_labels, methods=["GET"]),
        Route(issue + "/labels", api.add_issue_labels, methods=["POST"]),
        Route(issue + "/labels/{name:path}", api.remove_issue_label, methods=["DELETE"]),
        Route(issue + "/assignees", api.add_assignees, methods=["POST"]),
        Route(issue + "/assignees", api.remove_assignees, methods=["DELETE"]),
        Route(issue + "/events", api.list_events, methods=["GET"]),
        Route(repo + "/labels", api.list_repo_labels, methods=["GET"]),
        Route(repo + "/labels", api.create_repo_label, methods=["POST"]),
        Route(repo + "/labels/{name:path}", api.get_repo_label, methods=["GET"]),
        Route(repo + "/collaborators/{username}/permission", api.get_permission, methods=["GET"]),
        Route(repo + "/pulls", api.list_pulls, methods=["GET"]),
        Route(repo + "/pulls", api.create_pull, methods=["POST"]),
        Route(pull, api.get_pull, methods=["GET"]),
        Route(pull, api.update_pull, methods=["PATCH"]),
        Route(pull + "/comments", api.list_review_comments, methods=["GET"]),
        Route(pull + "/comments/{comment_id:int}/replies", api.reply_review_comment, methods=["POST"]),
    ]


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return api_error_response(exc.status, exc.message, exc.errors)


async def _not_found(request: Request, exc: Exception) -> Response:
    return api_error_response(404, "Not Found")


async def _validation_failed(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ValidationFailed)
    error: dict[str, Any] = {"resource": exc.resource, "code": exc.code, "message": str(exc)}
    if exc.field:
        error["field"] = exc.field
    return api_error_response(422, "Validation Failed", [error])


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = "Not Found" if exc.status_code == 404 else str(exc.detail)
    return api_error_response(exc.status_code, message)


def create_github_app(state: GitHubState, faults: FaultInjector | None = None) -> Starlette:
    """The ASGI app serving `state`; `faults` (if given) is consulted before routing."""
    return Starlette(
        routes=_routes(_Api(state)),
        middleware=[Middleware(GitHubMiddleware, state=state, faults=faults)],
        exception_handlers={
            ApiError: _api_error,
            NotFoundError: _not_found,
            ValidationFailed: _validation_failed,
            HTTPException: _http_error,
        },
    )
