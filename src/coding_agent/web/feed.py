"""The task list as every viewer shares it (SPEC 11.3): one read of the store per
interval, however many list pages, live lists and API clients ask, and one rendering of
the live list per filter shown.

Each read and each rendering runs in a worker thread: the event loop, which also works
tasks, only hands the work over and compares the text with the last one sent. A list is
at most `EVENT_INTERVAL_SECONDS` old, as old as the live updates are anyway.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.concurrency import run_in_threadpool

from coding_agent.web.pages import LIST_ROWS, counts_line, render_rows
from coding_agent.web.views import TaskFilter

__all__ = ["EVENT_INTERVAL_SECONDS", "ListFeed", "list_updates"]

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

    def _stale(self) -> bool:
        if time.monotonic() - self._read_at < self._interval:
            return False
        self._rendered.clear()
        self._read_at = time.monotonic()
        return True

    async def rows(self) -> list[dict[str, Any]]:
        """Every task (read at most `interval` seconds ago); callers filter, never change them."""
        async with self._lock:
            if self._stale():
                self._rows = await run_in_threadpool(self._read)
            return self._rows

    async def update(self, only: TaskFilter) -> str:
        """The live list's update as `only` shows it (see `_list_update`)."""
        async with self._lock:
            fresh = self._stale()
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
