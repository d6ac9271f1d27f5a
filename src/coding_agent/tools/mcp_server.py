"""One configured MCP server of a run across its restarts: its live connection (only
ever one that finished its handshake), starting it within the startup timeout, and the
one restart when a call finds it broken, after which it is down for the run.

The hub (`tools/hub.py`) holds one per server; the transport is `mcp_connection.py` (a
process on stdio), or `workspace_inprocess.py` for the built-in server the config adds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from mcp import types as mcp_types

from coding_agent.config import BuiltinWorkspaceServerConfig, MCPServerConfig
from coding_agent.errors import ToolError
from coding_agent.tools.mcp_connection import Broken, Connection, Launch
from coding_agent.tools.mcp_session import SessionHolder
from coding_agent.tools.workspace_inprocess import InProcessConnection

__all__ = ["ManagedServer", "ServerDown", "connect"]

# The hub's logger: its restart warnings read as the hub's, as before this module was split off.
logger = logging.getLogger("coding_agent.tools.hub")


class ServerDown(Exception):
    """The server died again after its one restart."""


def connect(config: MCPServerConfig, launch: Launch, secrets: Sequence[str]) -> SessionHolder:
    """The built-in workspace server the config adds in this process; every other entry,
    an operator's own workspace server command included, as the process it names."""
    if isinstance(config, BuiltinWorkspaceServerConfig):
        return InProcessConnection(launch, config, secrets)
    return Connection(launch, secrets)


class ManagedServer:
    """One configured server across restarts: its tools, its live connection, its one restart."""

    def __init__(self, config: MCPServerConfig, launch: Launch, secrets: Sequence[str], max_restarts: int) -> None:
        self.config = config
        self.launch = launch
        self._secrets = secrets
        self._restarts_left = max_restarts
        self._lock = asyncio.Lock()
        self.connection: SessionHolder | None = None  # only ever a connection that finished its handshake
        self._starting: SessionHolder | None = None
        self.down = False

    async def start(self, timeout: float) -> SessionHolder:
        connection = connect(self.config, self.launch, self._secrets)
        self._starting = connection
        connection.start()
        try:
            await asyncio.wait_for(asyncio.shield(connection.ready.wait()), timeout)
        except TimeoutError:
            await connection.stop()
            raise ToolError(
                f"MCP server {self.launch.name!r} (command {self.launch.program!r}) could not be started: "
                f"it did not finish the MCP handshake within {timeout:g}s"
            ) from None
        except BaseException:
            await connection.stop()
            raise
        finally:
            self._starting = None
        if connection.startup_error is not None:
            await connection.stop()
            raise connection.startup_error
        self.connection = connection
        return connection

    def _connections(self) -> list[SessionHolder]:
        return [c for c in (self.connection, self._starting) if c is not None]

    def request_stop(self) -> None:
        for connection in self._connections():
            connection.request_stop()

    async def stop(self) -> None:
        for connection in self._connections():
            await connection.stop()

    async def call(
        self, tool: str, arguments: dict[str, Any], timeout: float, startup_timeout: float
    ) -> mcp_types.CallToolResult | None:
        """Call on the live connection; restart once if it is broken, then give up for good."""
        connection = self.connection
        if self.down or connection is None:
            raise ServerDown
        try:
            return await connection.call_tool(tool, arguments, timeout)
        except Broken:
            pass
        async with self._lock:
            if self.down:
                raise ServerDown
            if self.connection is connection:  # nobody restarted it while we waited
                await connection.stop()
                if self._restarts_left <= 0:
                    self.down = True
                    raise ServerDown
                self._restarts_left -= 1
                logger.warning("MCP server %s stopped; restarting it once", self.launch.name)
                try:
                    await self.start(startup_timeout)
                except ToolError as error:
                    logger.warning("%s", error)
                    self.down = True
                    raise ServerDown from None
            current = self.connection
        assert current is not None
        try:
            return await current.call_tool(tool, arguments, timeout)
        except Broken:
            async with self._lock:
                if self.connection is current and self._restarts_left <= 0:
                    self.down = True
                    await current.stop()
            raise ServerDown from None
