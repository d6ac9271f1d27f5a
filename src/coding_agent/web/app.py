"""The one HTTP app of `serve` / `producer`: webhooks, and the dashboard's pages and API.

Each feature hands over its list of routes; this module only composes them, so the
features stay independent of each other and of the server that runs them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import BaseRoute

__all__ = ["build_app", "closing_event"]


def build_app(
    *route_lists: Sequence[BaseRoute], extra: Iterable[BaseRoute] = (), middleware: Sequence[Middleware] = ()
) -> Starlette:
    """A Starlette app serving every given route list (e.g. `webhook_routes(...)`)."""
    routes = [route for routes in route_lists for route in routes]
    routes.extend(extra)
    return Starlette(routes=routes, middleware=list(middleware))


def closing_event(app: Starlette) -> asyncio.Event:
    """Set by the server that runs `app` when it begins to close: long responses (the
    dashboard's live updates) end then rather than hold the close up."""
    closing: asyncio.Event | None = getattr(app.state, "closing", None)
    if closing is None:
        closing = app.state.closing = asyncio.Event()
    return closing
