"""HTTP plumbing of the GitLab testing server: errors, ETags, pagination, parameters.

Kept apart from the endpoints so each handler reads as "find, change, serialise". The
pagination headers and the `Link` header follow GitLab's offset pagination, which is
what python-gitlab follows to fetch every page.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import Response

from tests.support.gitlab.models import User

__all__ = [
    "ApiError",
    "not_found",
    "Call",
    "json_response",
    "error_response",
    "paginated",
    "parse_body",
    "as_list",
    "as_bool",
    "MAX_PER_PAGE",
]

MAX_PER_PAGE = 100
DEFAULT_PER_PAGE = 20


class ApiError(Exception):
    """Raised by a handler to answer with GitLab's error body (`message` or `error` key)."""

    def __init__(self, status: int, message: Any, key: str = "message") -> None:
        super().__init__(str(message))
        self.status = status
        self.body = {key: message}


def not_found(what: str = "") -> ApiError:
    return ApiError(404, f"404 {what + ' ' if what else ''}Not Found")


@dataclass
class Call:
    """What a handler needs: the request, decoded path parameters, merged parameters, the caller."""

    request: Request
    path_params: dict[str, str]
    params: dict[str, Any]
    user: User
    base_url: str
    raw_path: str

    @property
    def query(self) -> QueryParams:
        return self.request.query_params


def _etag(body: bytes) -> str:
    return 'W/"' + hashlib.sha1(body).hexdigest() + '"'


def json_response(request: Request, data: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    """A JSON response; a GET gets an ETag and is answered 304 when `If-None-Match` matches."""
    body = json.dumps(data, separators=(",", ":")).encode()
    all_headers = dict(headers or {})
    if request.method == "GET" and status == 200:
        etag = _etag(body)
        all_headers["ETag"] = etag
        candidates = [value.strip() for value in request.headers.get("if-none-match", "").split(",")]
        if etag in candidates or etag.removeprefix("W/") in candidates:
            return Response(status_code=304, headers={"ETag": etag})
    all_headers.setdefault("Cache-Control", "max-age=0, private, must-revalidate")
    return Response(body, status_code=status, headers=all_headers, media_type="application/json")


def error_response(error: ApiError) -> Response:
    return Response(json.dumps(error.body).encode(), status_code=error.status, media_type="application/json")


def _int_param(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def paginated(call: Call, items: Sequence[Any]) -> Response:
    """One page of `items` with X-Page, X-Per-Page, X-Total(-Pages), X-Next/Prev-Page and Link."""
    per_page = min(max(_int_param(call.params.get("per_page"), DEFAULT_PER_PAGE), 1), MAX_PER_PAGE)
    page = max(_int_param(call.params.get("page"), 1), 1)
    total = len(items)
    total_pages = max(math.ceil(total / per_page), 1)
    chunk = list(items[(page - 1) * per_page : page * per_page])
    next_page = page + 1 if page < total_pages else None
    prev_page = page - 1 if 1 < page <= total_pages + 1 else None

    def link(target: int) -> str:
        query = [(k, v) for k, v in parse_qsl(call.request.url.query, keep_blank_values=True) if k != "page"]
        query += [("page", str(target))]
        if "per_page" not in dict(query):
            query.append(("per_page", str(per_page)))
        return f"{call.base_url}{call.raw_path}?{urlencode(query)}"

    links = []
    if prev_page is not None:
        links.append(f'<{link(prev_page)}>; rel="prev"')
    if next_page is not None:
        links.append(f'<{link(next_page)}>; rel="next"')
    links.append(f'<{link(1)}>; rel="first"')
    links.append(f'<{link(total_pages)}>; rel="last"')
    headers = {
        "X-Page": str(page),
        "X-Per-Page": str(per_page),
        "X-Total": str(total),
        "X-Total-Pages": str(total_pages),
        "X-Next-Page": str(next_page or ""),
        "X-Prev-Page": str(prev_page or ""),
        "Link": ", ".join(links),
    }
    return json_response(call.request, chunk, headers=headers)


async def parse_body(request: Request) -> dict[str, Any]:
    """Parameters from the query string and from a JSON or form body (GitLab accepts both).

    `key[]=value` pairs become lists, as Rails reads them.
    """
    params: dict[str, Any] = {}

    def put(key: str, value: Any) -> None:
        if key.endswith("[]"):
            params.setdefault(key[:-2], []).append(value)
        else:
            params[key] = value

    for key, value in request.query_params.multi_items():
        put(key, value)
    if request.method in ("POST", "PUT", "PATCH"):
        raw = await request.body()
        content_type = request.headers.get("content-type", "")
        if raw and "json" in content_type:
            try:
                data = json.loads(raw)
            except ValueError:
                raise ApiError(400, "400 Bad request - invalid JSON body") from None
            if not isinstance(data, dict):
                raise ApiError(400, "400 Bad request - body must be a JSON object")
            params.update(data)
        elif raw:
            for key, value in parse_qsl(raw.decode(), keep_blank_values=True):
                put(key, value)
    return params


def as_list(value: Any) -> list[str]:
    """A comma-separated string or a list, as GitLab accepts for `labels` and friends."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(item).strip() for item in value if str(item).strip()]
    return [part.strip() for part in str(value).split(",") if part.strip()]


def as_bool(value: Any) -> bool:
    return str(value).lower() in ("1", "true", "yes", "on")
