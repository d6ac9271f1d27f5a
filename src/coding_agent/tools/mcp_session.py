"""A `ClientSession` owned by one runner task, whatever transport carries it.

anyio cancel scopes must be entered and left in one task, so one runner task owns the
transport and the session; other tasks only call `call_tool` (requests are multiplexed
by id). The transports are a server process on stdio (`mcp_connection.Connection`) and
the built-in workspace server in this process on memory streams
(`workspace_inprocess.InProcessConnection`); the hub treats both alike.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import anyio
from mcp import ClientSession, types as mcp_types
from mcp.shared.exceptions import McpError

from coding_agent.errors import ToolError
from coding_agent.redaction import Redactor

__all__ = ["Broken", "SessionHolder", "first_error"]


class Broken(Exception):
    """The session can no longer carry requests: the process died or the pipes closed."""



def first_error(error: BaseException) -> BaseException:
    """The first real error, looking inside exception groups (task groups wrap them)."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


class SessionHolder:
    """A `ClientSession` held by one runner task, whatever carries it (a process, memory).

    Other tasks only call `call_tool`; `stop` asks the runner to leave its contexts.
    Subclasses implement `_run`, which opens the transport and calls `_hold`.
    """

    pid: int | None = None

    def __init__(self, name: str, secrets: Sequence[str]) -> None:
        self._redactor = Redactor(secrets)
        self._name = name
        self.tools: list[mcp_types.Tool] = []
        self.startup_error: ToolError | None = None
        self.ready = asyncio.Event()  # set when usable, or when startup failed
        self._wake = asyncio.Event()  # stop requested or the server ended
        self._stop_requested = False  # which of the two: an end before `ready` is a failure
        self._finished = asyncio.Event()
        self._session: ClientSession | None = None
        self._closed = False
        self._inflight: set[anyio.CancelScope] = set()
        self._task: asyncio.Task[None] | None = None
        self._scope = anyio.CancelScope()

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"mcp-server:{self._name}")

    async def _run(self) -> None:
        raise NotImplementedError

    def request_stop(self) -> None:
        """Ask the runner to leave (without waiting): safe to call from any task, even a cancelled one."""
        self._stop_requested = True
        self._wake.set()
        if not self.ready.is_set():
            self._abort_startup()
            self._scope.cancel()

    def _abort_startup(self) -> None:
        """Still in the handshake: nothing graceful to wait for (a process is killed here)."""

    async def stop(self) -> None:
        """Leave the session and end the server."""
        self.request_stop()
        if self._task is not None:
            await self._finished.wait()

    @property
    def alive(self) -> bool:
        return self._session is not None and not self._closed

    def _end(self) -> None:
        self._closed = True
        self._session = None
        for scope in list(self._inflight):
            scope.cancel()
        self.ready.set()
        self._finished.set()

    async def _hold(self, session: ClientSession, *, handshake_done: bool = False) -> None:
        """Handshake (unless the transport did it), list the tools, then keep the session
        until a stop is asked or it ends."""
        try:
            if not handshake_done:
                await session.initialize()
            self.tools = await self._list_tools(session)
        except Exception as error:  # reported through startup_error
            await self._startup_failed(error)
            return
        self._session = session
        self.ready.set()
        try:
            await self._wake.wait()
        finally:
            self._closed = True
            self._session = None
            for scope in list(self._inflight):
                scope.cancel()

    async def _startup_failed(self, error: Exception) -> None:
        if isinstance(error, McpError):
            self._fail(f"the MCP handshake failed: {self._redactor.text(error.error.message)}")
        else:
            self._fail(f"the MCP handshake failed ({error.__class__.__name__})")

    def _fail(self, reason: str) -> None:
        raise NotImplementedError

    @staticmethod
    async def _list_tools(session: ClientSession) -> list[mcp_types.Tool]:
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        while True:
            params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            tools.extend(page.tools)
            cursor = page.nextCursor
            if not cursor:
                return tools

    # -- calls -----------------------------------------------------------------------
    async def call_tool(self, tool: str, arguments: dict[str, Any], timeout: float) -> mcp_types.CallToolResult | None:
        """The server's result, or None on timeout. Raises `Broken` when the session is gone."""
        session = self._session
        if session is None or self._closed:
            raise Broken
        scope = anyio.CancelScope(deadline=anyio.current_time() + timeout)
        self._inflight.add(scope)
        try:
            with scope:
                return await session.call_tool(tool, arguments)
        except McpError as error:
            if error.error.code == mcp_types.CONNECTION_CLOSED:
                raise Broken from None
            raise
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
            raise Broken from None
        finally:
            self._inflight.discard(scope)
        if self._closed:
            raise Broken  # the runner cancelled us because the session ended
        return None
