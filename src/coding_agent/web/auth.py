"""The dashboard's access rule (SPEC 11.3): bound to localhost it is open; bound beyond
it, every page and API call needs `dashboard.token`, as a bearer token or as the cookie
the login form sets. Webhook routes are left to their own signature checks."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

__all__ = ["COOKIE", "TokenGuard", "login_routes"]

COOKIE = "coding_agent_dashboard"
_OPEN_PREFIXES = ("/webhooks/", "/login", "/healthz")

_LOGIN_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>coding-agent: sign in</title></head>
<body><h1>coding-agent dashboard</h1><form method="post" action="/login">
<label>Dashboard token <input type="password" name="token" autofocus></label>
<button type="submit">Sign in</button></form>{error}</body></html>"""


class TokenGuard:
    """ASGI middleware: 401 for any dashboard request without the right token."""

    def __init__(self, app: Callable[..., Awaitable[None]], token: str | None) -> None:
        self.app = app
        self.token = token

    def allowed(self, request: Request) -> bool:
        if self.token is None or request.url.path.startswith(_OPEN_PREFIXES):
            return True
        header = request.headers.get("authorization", "")
        given = header[7:] if header.lower().startswith("bearer ") else request.cookies.get(COOKIE, "")
        return hmac.compare_digest(given.encode(), self.token.encode())

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:  # type: ignore[type-arg]
        if scope["type"] != "http" or self.allowed(Request(scope)):
            await self.app(scope, receive, send)
            return
        response: Response
        if scope["path"].startswith("/api/") or scope["path"] == "/metrics":
            response = JSONResponse({"error": "a valid dashboard token is required"}, status_code=401)
        else:
            response = HTMLResponse(_LOGIN_PAGE.format(error=""), status_code=401)
        await response(scope, receive, send)


def login_routes(token: str | None) -> list[Route]:
    """`/login`: a form that sets the token cookie (for browsers; scripts send a bearer token)."""

    async def form(request: Request) -> Response:
        return HTMLResponse(_LOGIN_PAGE.format(error=""))

    async def submit(request: Request) -> Response:
        given = str((await request.form()).get("token", ""))
        if token is None or not hmac.compare_digest(given.encode(), token.encode()):
            return HTMLResponse(_LOGIN_PAGE.format(error="<p>Wrong token.</p>"), status_code=401)
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(COOKIE, given, httponly=True, samesite="strict")
        return response

    return [Route("/login", form, methods=["GET"]), Route("/login", submit, methods=["POST"])]
