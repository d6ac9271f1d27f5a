"""Only the dashboard's own origin may read or steer it (SPEC 15), also without a token.

Two attacks reach a dashboard that listens on localhost with no token:

- a page on another site auto-submits a form (or a `fetch` without preflight) to a
  state-changing route: the browser sends it and the action happens even though the page
  cannot read the answer;
- DNS rebinding: a name the attacker controls first resolves to their server, then to
  127.0.0.1; the browser then treats the dashboard as that name's origin and lets the
  attacker's page read `/api/tasks`. Every such request carries the attacker's name in
  `Host`.

So every route answers only to a `Host` naming this dashboard (421 otherwise), and a
state-changing request is refused when the browser says it comes from elsewhere (a
foreign `Origin`, or `Sec-Fetch-Site` other than same-origin: 403) and unless its body is
JSON (415): a form cannot send `application/json`, and a cross-origin `fetch` that does
needs a CORS preflight this app never grants. Scripts without either header (curl, the
CLI's users) are not browsers and are let through to the token check.

The webhook routes answer any `Host` and skip the origin rules: a forge delivers to
whatever name it was given (a public hostname, a reverse proxy, a tunnel), and each
delivery is authenticated by its own signature, which no page can forge.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import JSONResponse, PlainTextResponse, Response

from coding_agent.config.service_sections import DashboardConfig

__all__ = ["SameOriginGuard", "served_hosts"]

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[..., Awaitable[Any]], Callable[..., Awaitable[None]]], Awaitable[None]]

_ANY_HOST_PREFIXES = ("/webhooks/", "/slack/events")
_FORM_PATHS = ("/login",)  # the login page is an HTML form (it gives away nothing: the token must be known)
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_OWN_SITE = frozenset({"same-origin", "none"})  # `none`: the user typed or bookmarked the URL
_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
_WILDCARDS = ("0.0.0.0", "::")
# A Host header: a name or IPv4 address, or a bracketed IPv6 address, and an optional port.
_HOST = re.compile(r"(?:\[(?P<v6>[0-9a-f:.]+)\]|(?P<name>[a-z0-9._-]+))(?::[0-9]{1,5})?")


def served_hosts(settings: DashboardConfig) -> tuple[str, ...]:
    """The host names the dashboard answers to: the loopback names, the bind address
    (unless a wildcard, which names no host) and `dashboard.public_url`'s host. Ports are
    not compared: a published or forwarded port (`docker -p 9000:8080`) reaches it under
    another one."""
    bind = settings.host_port[0].lower()
    public = urlsplit(settings.public_url).hostname if settings.public_url else None
    names = [*_LOOPBACK_NAMES, *([bind] if bind not in _WILDCARDS else []), *([public] if public else [])]
    return tuple(dict.fromkeys(names))


def host_name(header: str) -> str | None:
    """The host of a `Host` header value, lowercased, without port or brackets; None when
    it is not shaped like one."""
    match = _HOST.fullmatch(header.strip().lower())
    if match is None:
        return None
    return match["v6"] or match["name"].rstrip(".")


class SameOriginGuard:
    """ASGI middleware: the Host allow-list on every route but the webhooks, and the
    same-origin and JSON rules on every state-changing request."""

    def __init__(self, app: ASGIApp, settings: DashboardConfig) -> None:
        self.app = app
        self.hosts = served_hosts(settings)
        self.public_origin = settings.public_url.lower() if settings.public_url else None

    async def __call__(self, scope: Scope, receive: Callable[..., Awaitable[Any]], send: Callable[..., Awaitable[None]]) -> None:
        if scope["type"] == "http" and not scope["path"].startswith(_ANY_HOST_PREFIXES):
            refusal = self.refusal(scope["method"], scope["path"], Headers(scope=scope))
            if refusal is not None:
                status, reason = refusal
                await _response(scope["path"], status, reason)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def refusal(self, method: str, path: str, headers: Headers) -> tuple[int, str] | None:
        """(status, one-line reason) for a request this dashboard must not answer."""
        hosts = headers.getlist("host")
        if len(hosts) != 1:
            return 400, "the request needs exactly one Host header"
        name = host_name(hosts[0])
        if name is None:
            return 400, f"malformed Host header {_shown(hosts[0])}"
        if name not in self.hosts:
            return 421, (
                f"this dashboard does not answer to Host {_shown(hosts[0])}; it answers to "
                f"{', '.join(self.hosts)} (set dashboard.public_url to reach it by another name)"
            )
        if method in _SAFE_METHODS:
            return None
        site = headers.get("sec-fetch-site")
        if site is not None and site.lower() not in _OWN_SITE:
            return 403, f"a request from another site is refused (Sec-Fetch-Site: {_shown(site)})"
        origin = headers.get("origin")
        if origin is not None and not self.own_origin(origin, hosts[0]):
            return 403, f"a request from another origin is refused (Origin: {_shown(origin)})"
        media_type = headers.get("content-type", "").partition(";")[0].strip().lower()
        if path not in _FORM_PATHS and media_type != "application/json":
            return 415, "send the request as JSON (Content-Type: application/json)"
        return None

    def own_origin(self, origin: str, host: str) -> bool:
        """`Origin` names the host:port the request was sent to (already allow-listed), or
        `dashboard.public_url` (a TLS proxy in front changes the scheme, may change the Host)."""
        origin = origin.strip().lower()
        scheme, _, authority = origin.partition("://")
        return (scheme in ("http", "https") and authority == host.strip().lower()) or origin == self.public_origin


def _shown(value: str) -> str:
    """Client text in a reason: quoted, and short."""
    return repr(value[:100])


def _response(path: str, status: int, reason: str) -> Response:
    if path.startswith("/api/") or path == "/metrics":
        return JSONResponse({"error": reason}, status_code=status)
    return PlainTextResponse(reason, status_code=status)
