"""The HTTP conventions of api.github.com that every sandbox endpoint shares.

Errors as `{"message", "documentation_url", "status"}`; strong ETags and 304 on a
matching `If-None-Match`; `Link` pagination with `per_page` capped at 100; and the
middleware that logs each request, injects faults, authenticates the token and keeps
the rate-limit headers.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Sequence
from typing import Any, TypeVar
from urllib.parse import unquote

from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp

from coding_agent.sandbox.faults import FaultInjector
from coding_agent.sandbox.github.apps import AppAuthError
from coding_agent.sandbox.github.records import RequestRecord
from coding_agent.sandbox.github.state import GitHubState

__all__ = [
    "ApiError",
    "GitHubMiddleware",
    "api_error_response",
    "json_reply",
    "paginate",
    "MAX_PER_PAGE",
]

T = TypeVar("T")
log = logging.getLogger(__name__)
MAX_PER_PAGE = 100
DOCS = "https://docs.github.com/rest"


class ApiError(Exception):
    """Raised by an endpoint to answer with GitHub's JSON error shape."""

    def __init__(self, status: int, message: str, errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.errors = errors


def api_error_response(status: int, message: str, errors: list[dict[str, Any]] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"message": message, "documentation_url": DOCS, "status": str(status)}
    if errors:
        body["errors"] = errors
    return JSONResponse(body, status_code=status)


def _etag(body: bytes, link: str | None) -> str:
    digest = hashlib.sha256(body)
    if link:
        # The Link header changes when a page boundary is crossed while the page's
        # body does not: fold it in so a client never keeps a stale "no next page".
        digest.update(link.encode())
    return f'"{digest.hexdigest()[:40]}"'


def _matches(if_none_match: str, etag: str) -> bool:
    candidates = [tag.strip() for tag in if_none_match.split(",")]
    return "*" in candidates or any(tag.removeprefix("W/") == etag for tag in candidates)


def json_reply(request: Request, payload: Any, status: int = 200, link: str | None = None) -> Response:
    """A JSON response; a GET carries an ETag and becomes a bodiless 304 when it matches."""
    body = json.dumps(payload, separators=(",", ":")).encode()
    headers: dict[str, str] = {}
    if link:
        headers["Link"] = link
    if request.method == "GET" and status == 200:
        etag = _etag(body, link)
        headers["ETag"] = etag
        headers["Cache-Control"] = "private, max-age=60, s-maxage=60"
        headers["Vary"] = "Accept, Authorization, Cookie, X-GitHub-OTP"
        if _matches(request.headers.get("if-none-match", ""), etag):
            return Response(status_code=304, headers=headers)
    return Response(body, status_code=status, headers=headers, media_type="application/json; charset=utf-8")


def _int_param(request: Request, name: str, default: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ApiError(422, f"Invalid value for {name}: {raw!r}") from None


def paginate(request: Request, items: Sequence[T], default_per_page: int = 30) -> tuple[list[T], str | None]:
    """One page of `items` by `page`/`per_page`, and the `Link` header for the others."""
    per_page = min(max(_int_param(request, "per_page", default_per_page), 1), MAX_PER_PAGE)
    page = max(_int_param(request, "page", 1), 1)
    last = max(math.ceil(len(items) / per_page), 1)
    chunk = list(items[(page - 1) * per_page : page * per_page])
    links: list[str] = []

    def url(number: int) -> str:
        return str(request.url.include_query_params(page=number, per_page=per_page))

    if page > 1:
        links.append(f'<{url(page - 1)}>; rel="prev"')
    if page < last:
        links.append(f'<{url(page + 1)}>; rel="next"')
        links.append(f'<{url(last)}>; rel="last"')
    if page > 1:
        links.append(f'<{url(1)}>; rel="first"')
    return chunk, ", ".join(links) or None


def _token(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() in ("token", "bearer") and value.strip():
        return value.strip()
    return None


def _is_app_path(path: str) -> bool:
    """`/app` and what is under it: authenticated by the app's JWT, not a token."""
    return path == "/app" or path.startswith("/app/")


def _repo_in_reach(state: GitHubState, token: str, path: str) -> bool:
    """An installation token narrowed to some repositories reaches only those (404 else)."""
    parts = path.split("/")
    if len(parts) < 4 or parts[1] != "repos":
        return True
    return state.token_allows_repo(token, f"{unquote(parts[2])}/{unquote(parts[3])}")


class GitHubMiddleware(BaseHTTPMiddleware):
    """Log, inject faults, authenticate and rate-limit every request, in that order.

    The authenticated login is put on `request.state.login` for the endpoints. 304s and
    injected faults do not count against the rate limit (GitHub does not count 304s).
    Paths under `unauthenticated` (the signed blob URLs of logs, which GitHub serves from
    storage outside the API) need no token and count against no limit.
    """

    def __init__(
        self, app: ASGIApp, state: GitHubState, faults: FaultInjector | None, unauthenticated: str | None = None
    ) -> None:
        super().__init__(app)
        self.github = state
        self.faults = faults
        self.unauthenticated = unauthenticated

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        login: str | None = None
        fault = False
        response: Response | None = None
        if self.faults is not None:
            response = await self.faults.apply(request)
            fault = response is not None
        if response is None and self.unauthenticated and request.url.path.startswith(self.unauthenticated):
            response = await call_next(request)
        if response is None and request.url.path.startswith("/app-manifests/"):
            response = await call_next(request)  # the manifest flow's one-time code is the credential
        if response is None and _is_app_path(request.url.path):
            response = await self._as_app(request, call_next)
        if response is None:
            token = _token(request)
            login = self.github.login_for_token(token) if token else None
            if token is None:
                response = api_error_response(401, "Requires authentication")
            elif login is None:
                response = api_error_response(401, "Bad credentials")
            elif not self.github.take_rate_limit():
                response = api_error_response(403, f"API rate limit exceeded for user ID {self.github.user(login).id}.")
            elif not _repo_in_reach(self.github, token, request.url.path):
                response = api_error_response(404, "Not Found")
            else:
                request.state.login = login
                request.state.token = token
                try:
                    response = await call_next(request)
                except Exception:
                    log.exception("github sandbox: %s %s failed", request.method, request.url.path)
                    response = api_error_response(500, "Server Error")
                if response.status_code == 304:
                    self.github.give_back_rate_limit()
                if self.faults is not None:
                    served = response
                    response = self.faults.after_serving(request, response)
                    fault = response is not served
        response.headers.update(self.github.rate_limit_headers())
        response.headers.setdefault("X-GitHub-Media-Type", "github.v3; format=json")
        self.github.log_request(
            RequestRecord(
                method=request.method,
                path=request.url.path,
                query=request.url.query,
                status=response.status_code,
                login=login,
                fault=fault,
                client_port=request.client.port if request.client is not None else None,
                size=int(response.headers.get("content-length") or 0),
            )
        )
        return response

    async def _as_app(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        """A request to `/app...`: the app's JWT, checked against its public key."""
        token = _token(request)
        if token is None:
            return api_error_response(401, "A JSON web token could not be decoded")
        try:
            request.state.app = self.github.app_for_jwt(token)
        except AppAuthError as refused:
            return api_error_response(401, str(refused))
        try:
            return await call_next(request)
        except Exception:
            log.exception("github sandbox: %s %s failed", request.method, request.url.path)
            return api_error_response(500, "Server Error")
