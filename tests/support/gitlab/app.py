"""The ASGI application of the GitLab testing server: faults, auth, routing (the route
table of the endpoint modules), request log.

Routing works on the raw (still percent-encoded) path because GitLab, and python-gitlab,
name projects and groups by URL-encoded full path (`group%2Fproject`): decoding first, as
Starlette's router does, would turn that one segment into two.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from coding_agent.sandbox.faults import FaultInjector
from tests.support.gitlab.ci_endpoints import (
    get_job,
    get_pipeline,
    get_trace,
    list_pipeline_jobs,
    list_pipelines,
    retry_job,
)
from tests.support.gitlab.endpoints import (
    Handler,
    create_label,
    current_token,
    current_user,
    get_group,
    get_member_all,
    get_project,
    get_repository_file,
    list_label_events,
    list_labels,
    list_members_all,
    list_users,
)
from tests.support.gitlab.item_endpoints import (
    create_item,
    get_item,
    list_group_items,
    list_project_items,
    update_item,
)
from tests.support.gitlab.models import RequestRecord, User
from tests.support.gitlab.note_endpoints import (
    create_discussion,
    create_note,
    get_discussion,
    get_note,
    list_discussions,
    list_notes,
    reply_discussion,
    update_note,
)
from tests.support.gitlab.state import GitLabState
from tests.support.gitlab.web import ApiError, Call, error_response, parse_body

__all__ = ["create_gitlab_app", "GitLabApp", "API_PREFIX", "ROUTES"]

API_PREFIX = "/api/v4"

_P = "/projects/{pid}"
_I = _P + "/{kind}/{iid}"

ROUTES: list[tuple[str, str, Handler]] = [
    ("GET", "/user", current_user),
    ("GET", "/personal_access_tokens/self", current_token),
    ("GET", "/users", list_users),
    ("GET", "/groups/{gid}", get_group),
    ("GET", "/groups/{gid}/{kind}", list_group_items),
    ("GET", _P, get_project),
    ("GET", _P + "/repository/files/{file_path}", get_repository_file),
    ("GET", _P + "/{kind}", list_project_items),
    ("POST", _P + "/{kind}", create_item),
    ("GET", _I, get_item),
    ("PUT", _I, update_item),
    ("GET", _I + "/notes", list_notes),
    ("POST", _I + "/notes", create_note),
    ("GET", _I + "/notes/{nid}", get_note),
    ("PUT", _I + "/notes/{nid}", update_note),
    ("GET", _I + "/discussions", list_discussions),
    ("POST", _I + "/discussions", create_discussion),
    ("GET", _I + "/discussions/{did}", get_discussion),
    ("POST", _I + "/discussions/{did}/notes", reply_discussion),
    ("GET", _I + "/resource_label_events", list_label_events),
    ("GET", _P + "/labels", list_labels),
    ("POST", _P + "/labels", create_label),
    ("GET", _P + "/members/all", list_members_all),
    ("GET", _P + "/members/all/{uid}", get_member_all),
    ("GET", _P + "/pipelines", list_pipelines),
    ("GET", _P + "/pipelines/{pipeline_id}", get_pipeline),
    ("GET", _P + "/pipelines/{pipeline_id}/jobs", list_pipeline_jobs),
    ("GET", _P + "/jobs/{job_id}", get_job),
    ("GET", _P + "/jobs/{job_id}/trace", get_trace),
    ("POST", _P + "/jobs/{job_id}/retry", retry_job),
]

_SEGMENT_PATTERNS = {"kind": "issues|merge_requests"}


@dataclass(frozen=True)
class _Route:
    method: str
    pattern: re.Pattern[str]
    handler: Handler


def _compile(template: str) -> re.Pattern[str]:
    def group(match: re.Match[str]) -> str:
        name = match[1]
        return f"(?P<{name}>{_SEGMENT_PATTERNS.get(name, '[^/]+')})"

    return re.compile("^" + re.sub(r"\{(\w+)\}", group, template) + "/?$")


class GitLabApp:
    """Answers `/api/v4/...` from a `GitLabState`; `faults` are consulted before anything else."""

    def __init__(self, state: GitLabState, faults: FaultInjector | None = None) -> None:
        self.state = state
        self.faults = faults
        self._routes = [_Route(method, _compile(template), handler) for method, template, handler in ROUTES]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        user: User | None = None
        try:
            response: Response | None = await self.faults.apply(request) if self.faults else None
            if response is None:
                user = self._authenticate(request)
                response = await self._dispatch(request, user)
                if self.faults is not None:
                    response = self.faults.after_serving(request, response)
        except ApiError as error:
            response = error_response(error)
        self.state.log_request(
            RequestRecord(
                request.method,
                request.url.path,
                request.url.query,
                response.status_code,
                user.username if user else None,
                bytes_sent=int(response.headers.get("content-length") or 0),
            )
        )
        await response(scope, receive, send)

    def _authenticate(self, request: Request) -> User:
        token = request.headers.get("private-token")
        authorization = request.headers.get("authorization", "")
        if token is None and authorization.lower().startswith("bearer "):
            token = authorization[7:].strip()
        user = self.state.user_by_token(token) if token else None
        if user is None:
            raise ApiError(401, "401 Unauthorized")
        return user

    async def _dispatch(self, request: Request, user: User) -> Response:
        root_path = str(request.scope.get("root_path", ""))
        raw_path = scope_raw_path(request.scope)
        if root_path and raw_path.startswith(root_path):
            raw_path = raw_path[len(root_path) :]  # mounted under a prefix: route on the rest
        if not raw_path.startswith(API_PREFIX + "/"):
            raise ApiError(404, "404 Not Found")
        relative = raw_path[len(API_PREFIX) :]
        allowed = False
        for route in self._routes:
            match = route.pattern.match(relative)
            if match is None:
                continue
            allowed = True
            if route.method != request.method:
                continue
            params: dict[str, Any] = await parse_body(request)
            path_params = {name: unquote(value) for name, value in match.groupdict().items()}
            base_url = f"{request.url.scheme}://{request.url.netloc}{root_path}"
            call = Call(request, path_params, params, user, base_url, raw_path)
            with self.state.lock:
                return route.handler(self.state, call)
        if allowed:
            raise ApiError(405, "405 Method Not Allowed")
        raise ApiError(404, "404 Not Found")


def scope_raw_path(scope: Scope) -> str:
    """The path as the client sent it (percent-encoding intact)."""
    raw = scope.get("raw_path")
    if raw:
        return raw.decode("latin-1").split("?", 1)[0]
    return str(scope["path"])


def create_gitlab_app(state: GitLabState, faults: FaultInjector | None = None) -> GitLabApp:
    """The ASGI app serving `state`; pass the `FaultInjector` tests use to inject 5xx/429."""
    return GitLabApp(state, faults)
