"""The dashboard's pages (SPEC 11.3): the task list, filtered by state, repository and
requester, and a task page; both update live through server-sent events.

Server-rendered HTML (Jinja2, autoescaped; `pages.py`) with a few lines of plain
JavaScript: an `EventSource` per page for the live part and `fetch` for the buttons. No
front-end build, no framework to ship; SSE because the updates only flow one way and the
browser reconnects by itself. The buttons call the JSON API, which acts through the same
code as the CLI.

Every store read and every rendering runs in a worker thread: the event loop, which also
works tasks, only compares the rendered text with the last one sent and writes it. The
list page and its live updates read the shared `ListFeed` (`feed.py`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from coding_agent.redaction import Redactor
from coding_agent.runtime.budgets import Budgets
from coding_agent.store.state import StateStore
from coding_agent.web.activity import RunActivity
from coding_agent.web.app import closing_event
from coding_agent.web.feed import EVENT_INTERVAL_SECONDS, ListFeed, list_updates
from coding_agent.web.pages import render_list, render_parts, render_problem, render_task, render_usage
from coding_agent.web.views import TaskFilter, UnknownFilter, task_detail, task_list, usage

__all__ = ["dashboard_routes"]


def _html(status: int, text: str) -> HTMLResponse:
    return HTMLResponse(text, status_code=status)


def _streaming(request: Request) -> Callable[[], Awaitable[bool]]:
    """Whether a live update stream goes on: its client is connected and the server is not
    closing (`app.closing_event`). An open page must not hold up a shutdown or a restart
    in place for the server's grace period: its stream ends, and the browser's
    `EventSource` reconnects by itself, to the next image when it was a restart."""
    closing = closing_event(request.app)

    async def connected() -> bool:
        return not closing.is_set() and not await request.is_disconnected()

    return connected


def _task_event(detail: dict[str, Any]) -> str:
    """The task and its rendered parts, from one read: the page swaps every part at once."""
    return json.dumps({**detail, "html": render_parts(detail)})


@dataclass(frozen=True)
class _Pages:
    """The dashboard's handlers over one store: every read and rendering off the event loop."""

    store: StateStore
    redactor: Redactor
    activity: RunActivity | None
    feed: ListFeed
    budgets: Budgets | None

    def _detail(self, key: str) -> dict[str, Any] | None:
        return task_detail(self.store, key, self.redactor, self.activity, self.budgets)

    async def tasks(self, request: Request) -> Response:
        try:
            only = TaskFilter.of(dict(request.query_params))
        except UnknownFilter as error:
            return _html(400, render_problem("Bad filter", str(error)))
        chosen = {"state": only.state, "repository": only.repository, "requester": only.requester}

        rows = await self.feed.rows()
        return _html(200, await run_in_threadpool(render_list, rows, [row for row in rows if only.admits(row)], chosen))

    async def list_events(self, request: Request) -> Response:
        try:
            only = TaskFilter.of(dict(request.query_params))
        except UnknownFilter as error:
            return JSONResponse({"error": str(error)}, status_code=400)

        updates = list_updates(self.feed, only, _streaming(request))
        return StreamingResponse(updates, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    async def task(self, request: Request) -> Response:
        key = request.path_params["key"]
        detail = await run_in_threadpool(self._detail, key)
        if detail is None:
            return _html(404, render_problem("Not found", f"No task {key}."))
        return _html(200, await run_in_threadpool(render_task, detail))

    async def task_events(self, request: Request) -> Response:
        key = request.path_params["key"]

        def read() -> str | None:
            detail = self._detail(key)
            return None if detail is None else _task_event(detail)

        connected = _streaming(request)

        async def stream() -> AsyncIterator[str]:
            last = None
            while await connected():
                text = await run_in_threadpool(read)
                if text is not None and text != last:
                    last = text
                    yield f"data: {text}\n\n"
                await asyncio.sleep(EVENT_INTERVAL_SECONDS)

        return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    async def usage_page(self, request: Request) -> Response:
        def read() -> str:
            titles = {key: fact.title for key, fact in self.store.tasks.task_facts().items() if fact.title}
            redacted = {key: self.redactor.text(title) for key, title in titles.items()}
            return render_usage(usage(self.store, self.budgets), redacted)

        return _html(200, await run_in_threadpool(read))


def dashboard_routes(
    store: StateStore,
    redactor: Redactor,
    activity: RunActivity | None = None,
    feed: ListFeed | None = None,
    budgets: Budgets | None = None,
) -> list[Route]:
    """`feed`: the task list shared with the API (one of its own by default); `budgets`:
    the daily budgets whose use and what is left the task and usage pages show."""
    feed = feed or ListFeed(lambda: task_list(store, redactor, activity))
    pages = _Pages(store, redactor, activity, feed, budgets)
    return [
        Route("/", pages.tasks, methods=["GET"]),
        Route("/events", pages.list_events, methods=["GET"]),
        Route("/usage", pages.usage_page, methods=["GET"]),
        Route("/tasks/{key:path}/events", pages.task_events, methods=["GET"]),
        Route("/tasks/{key:path}", pages.task, methods=["GET"]),
    ]
