"""The dashboard's access rule (SPEC 11.3): bound to localhost it is open; bound beyond
it, every page and API call needs `dashboard.token`, as a bearer token or as the cookie
the login form sets. Webhook routes are left to their own signature checks."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from html import escape
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from coding_agent.web.request_body import MAX_FORM_BYTES, BodyReader, Refusal

__all__ = ["COOKIE", "TokenGuard", "login_routes"]

COOKIE = "coding_agent_dashboard"
_OPEN_PREFIXES = ("/webhooks/", "/slack/events", "/login", "/healthz")  # Slack signs its own requests

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

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http" or self.allowed(Request(scope)):
            await self.app(scope, receive, send)
            return
        response: Response
        if scope["path"].startswith("/api/") or scope["path"] == "/metrics":
            response = JSONResponse({"error": "a valid dashboard token is required"}, status_code=401)
        else:
            response = HTMLResponse(_LOGIN_PAGE.format(error=""), status_code=401)
        await response(scope, receive, send)


def login_routes(token: str | None, reader: BodyReader) -> list[Route]:
    """`/login`: a form that sets the token cookie (for browsers; scripts send a bearer token).

    Anyone may post it, so its body goes through `reader` (SPEC 15: a small cap, the
    deadlines, the shared budget) and is parsed here, not by a general form parser that
    would take up to a megabyte per field and a thousand fields."""

    async def form(request: Request) -> Response:
        return HTMLResponse(_LOGIN_PAGE.format(error=""))

    async def submit(request: Request) -> Response:
        try:
            given = _form_token(await reader.read(request, MAX_FORM_BYTES))
        except Refusal as refusal:  # possibly before the whole body came: close the connection
            return HTMLResponse(
                _LOGIN_PAGE.format(error=f"<p>{escape(refusal.message)}.</p>"),
                status_code=refusal.status,
                headers={"Connection": "close"},
            )
        if token is None or not hmac.compare_digest(given.encode(), token.encode()):
            return HTMLResponse(_LOGIN_PAGE.format(error="<p>Wrong token.</p>"), status_code=401)
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(COOKIE, given, httponly=True, samesite="strict")
        return response

    return [Route("/login", form, methods=["GET"]), Route("/login", submit, methods=["POST"])]


def _form_token(body: bytes) -> str:
    """The `token` field of an `application/x-www-form-urlencoded` body ('' without one)."""
    try:
        fields = parse_qs(body.decode("utf-8"), max_num_fields=16)
    except (UnicodeDecodeError, ValueError):
        raise Refusal(400, "the form is not a URL-encoded form of a few fields") from None
    return fields.get("token", [""])[0]
