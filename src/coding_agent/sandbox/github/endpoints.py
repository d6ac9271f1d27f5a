"""The GitHub testing server's endpoints: what every endpoint shares, and those of the
user, the repository and the search.

The endpoints are one class (`app._Api`) made of parts: this base (the lookups every
endpoint makes, the request body's checks) with issue_endpoints.py (issues, comments,
labels, assignees, events) and pull_endpoints.py (pull requests and review comments).
Each endpoint reads `request.state.login`, set by the middleware, and answers with
GitHub's real shape, status codes and headers.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any, cast

from starlette.requests import Request
from starlette.responses import Response

from coding_agent.sandbox.github.http import ApiError, json_reply, paginate
from coding_agent.sandbox.github.records import IssueRecord, RepoRecord
from coding_agent.sandbox.github.render import Renderer
from coding_agent.sandbox.github.search import MAX_QUERY_LENGTH, parse_query
from coding_agent.sandbox.github.state import GitHubState, NotFoundError, ValidationFailed

__all__ = ["Endpoints", "read_body", "string_list", "within_limit", "required_string", "MAX_BODY_LENGTH"]


async def read_body(request: Request) -> Any:
    raw = await request.body()
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except ValueError:
        raise ApiError(400, "Problems parsing JSON") from None


def string_list(value: Any, field: str) -> list[str]:
    """`["a", "b"]` or `[{"name": "a"}]`, as GitHub accepts for labels."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ApiError(422, f"Invalid request.\n\nFor '{field}', {value!r} is not an array.")
    names = [item.get("name") if isinstance(item, dict) else item for item in value]
    if not all(isinstance(name, str) for name in names):
        raise ApiError(422, f"Invalid request.\n\nFor '{field}', every item must be a string.")
    return cast("list[str]", names)


# GitHub refuses longer issue, comment and pull request bodies with 422.
MAX_BODY_LENGTH = 65_536


def within_limit(text: Any, resource: str) -> Any:
    """`text`, or the 422 GitHub answers for a body over 65,536 characters."""
    if isinstance(text, str) and len(text) > MAX_BODY_LENGTH:
        raise ValidationFailed(f"body is too long (maximum is {MAX_BODY_LENGTH} characters)", resource, "custom", "body")
    return text


def required_string(body: Any, field: str) -> str:
    value = body.get(field) if isinstance(body, dict) else None
    if not isinstance(value, str) or not value:
        raise ValidationFailed(f"{field} is missing", "Issue", "missing_field", field)
    return value


class Endpoints:
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

    async def _edit(self, request: Request, repo: RepoRecord, item: IssueRecord, level: str, resource: str) -> IssueRecord:
        """Title, body or state of an issue or PR, by its author or someone holding `level`."""
        if item.author.lower() != request.state.login.lower():
            self._require(request, repo, level)
        body = await read_body(request)
        return self.state.update_issue(
            repo.full_name,
            item.number,
            title=body.get("title"),
            body=within_limit(body.get("body"), resource),
            state=body.get("state"),
        )

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

    def _comment_bodies(self, issue: IssueRecord) -> list[str]:
        """What `mentions:` reads besides the body: comments, and a PR's review comments
        (a mention in a review thread is a mention of the PR, as GitHub counts it)."""
        bodies = [c.body for c in self.state.comments(issue.repo, issue.number)]
        if issue.is_pull:
            bodies += [c.body for c in self.state.review_comments(issue.repo, issue.number)]
        return bodies

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
            bodies = lambda issue=issue: self._comment_bodies(issue)  # noqa: E731
            # An installation token searches its installation's repositories only, as on GitHub.
            reach = self.state.token_allows_repo(getattr(request.state, "token", None) or "", repo.full_name)
            if reach and self.state.permission(repo.full_name, login) is not None and query.matches(issue, repo.owner, bodies):
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

    async def get_permission(self, request: Request) -> Response:
        repo = self._repo(request)
        user = self.state.user(request.path_params["username"])
        return json_reply(request, self._render(request).permission(repo.full_name, user.login))
