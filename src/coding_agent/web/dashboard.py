"""The dashboard's pages (SPEC 11.3): the task list, filtered by state, repository and
requester, and a task page; both update live through server-sent events.

Server-rendered HTML (Jinja2, autoescaped; `pages.py`) with a few lines of plain
JavaScript: an `EventSource` per page for the live part and `fetch` for the buttons. No
front-end build, no framework to ship; SSE because the updates only flow one way and the
browser reconnects by itself. The buttons call the JSON API, which acts through the same
code as the CLI.

Every store read and every rendering runs in a worker thread: the event loop, which also
works tasks, only compares the rendered text with the last one sent and writes it. The
list's streams share one read of the store per interval (`_ListFeed`), however many
browsers watch it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from coding_agent.redaction import Redactor
from coding_agent.runtime.state_store import StateStore
from coding_agent.web.activity import RunActivity
from coding_agent.web.pages import (
    LIST_ROWS,
    counts_line,
    render_list,
    render_parts,
    render_problem,
    render_rows,
    render_task,
    render_usage,
)
from coding_agent.web.views import TaskFilter, UnknownFilter, task_detail, task_list, usage

__all__ = ["dashboard_routes", "ListFeed", "list_updates"]

EVENT_INTERVAL_SECONDS = 0.5


def _list_update(rows: list[dict[str, Any]], only: TaskFilter) -> str:
    """One live update of the list as `only` shows it: its rows' HTML and counts, as JSON."""
    shown = [row for row in rows if only.admits(row)]
    filtered = any((only.state, only.repository, only.requester))
    hidden = max(0, len(shown) - LIST_ROWS)
    return json.dumps({"rows": render_rows(shown, filtered), "counts": counts_line(shown), "hidden": hidden})


class ListFeed:
    """The live list as of at most `interval` seconds ago: one read of the store per
    interval shared by every open list, and one rendering per filter shown. The read
    and the rendering run in one worker thread: one hop off the event loop per update."""

    def __init__(self, read: Callable[[], list[dict[str, Any]]], interval: float = EVENT_INTERVAL_SECONDS) -> None:
        self._read = read
        self._interval = interval
        self._rows: list[dict[str, Any]] = []
        self._read_at = float("-inf")
        self._rendered: dict[TaskFilter, str] = {}
        self._lock = asyncio.Lock()

    async def update(self, only: TaskFilter) -> str:
        async with self._lock:
            fresh = time.monotonic() - self._read_at >= self._interval
            if fresh:
                self._rendered.clear()
                self._read_at = time.monotonic()
            text = self._rendered.get(only)
            if text is None:
                text = self._rendered[only] = await run_in_threadpool(self._render, only, fresh)
            return text

    def _render(self, only: TaskFilter, fresh: bool) -> str:
        if fresh:
            self._rows = self._read()
        return _list_update(self._rows, only)


async def list_updates(
    feed: ListFeed, only: TaskFilter, connected: Callable[[], Awaitable[bool]], interval: float = EVENT_INTERVAL_SECONDS
) -> AsyncIterator[str]:
    """Server-sent events of the list's rows as `only` shows them: one when they change."""
    last = None
    while await connected():
        text = await feed.update(only)
        if text != last:
            last = text
            yield f"data: {text}\n\n"
        await asyncio.sleep(interval)


def _html(status: int, text: str) -> HTMLResponse:
    return HTMLResponse(text, status_code=status)


def _task_event(detail: dict[str, Any]) -> str:
    """The task and its rendered parts, from one read: the page swaps every part at once."""
    return json.dumps({**detail, "html": render_parts(detail)})


def dashboard_routes(store: StateStore, redactor: Redactor, activity: RunActivity | None = None) -> list[Route]:
    feed = ListFeed(lambda: task_list(store, redactor, activity))

    async def tasks(request: Request) -> Response:
        try:
            only = TaskFilter.of(dict(request.query_params))
        except UnknownFilter as error:
            return _html(400, render_problem("Bad filter", str(error)))
        chosen = {"state": only.state, "repository": only.repository, "requester": only.requester}

        def read() -> str:
            rows = task_list(store, redactor, activity)
            return render_list(rows, [row for row in rows if only.admits(row)], chosen)

        return _html(200, await run_in_threadpool(read))

    async def list_events(request: Request) -> Response:
        try:
            only = TaskFilter.of(dict(request.query_params))
        except UnknownFilter as error:
            return JSONResponse({"error": str(error)}, status_code=400)

        async def connected() -> bool:
            return not await request.is_disconnected()

        updates = list_updates(feed, only, connected)
        return StreamingResponse(updates, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    async def task(request: Request) -> Response:
        key = request.path_params["key"]
        detail = await run_in_threadpool(task_detail, store, key, redactor, activity)
        if detail is None:
            return _html(404, render_problem("Not found", f"No task {key}."))
        return _html(200, await run_in_threadpool(render_task, detail))

    async def events(request: Request) -> Response:
        key = request.path_params["key"]

        def read() -> str | None:
            detail = task_detail(store, key, redactor, activity)
            return None if detail is None else _task_event(detail)

        async def stream() -> AsyncIterator[str]:
            last = None
            while not await request.is_disconnected():
                text = await run_in_threadpool(read)
                if text is not None and text != last:
                    last = text
                    yield f"data: {text}\n\n"
                await asyncio.sleep(EVENT_INTERVAL_SECONDS)

        return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    async def usage_page(request: Request) -> Response:
        def read() -> str:
            titles = {key: fact.title for key, fact in store.task_facts().items() if fact.title}
            return render_usage(usage(store), {key: redactor.text(title) for key, title in titles.items()})

        return _html(200, await run_in_threadpool(read))

    return [
        Route("/", tasks, methods=["GET"]),
        Route("/events", list_events, methods=["GET"]),
        Route("/usage", usage_page, methods=["GET"]),
        Route("/tasks/{key:path}/events", events, methods=["GET"]),
        Route("/tasks/{key:path}", task, methods=["GET"]),
    ]
