"""The built-in workspace server inside the agent process, on the SDK's memory streams.

Starting `python -m coding_agent.tools.workspace_server` for every run cost about 1.7
CPU-seconds of imports (the mcp SDK, pydantic, ...) before the run's first model request;
sixteen runs at once on a small machine spent more time importing than working (issue
#13). The agent process has imported all of that already, so the hub runs this
installation's built-in server here: the same `create_server` (one implementation of the
tools; the stdio transport stays for `coding-agent mcp-workspace` and other clients),
connected through in-memory streams, one server and session per run (SPEC 6: started
once per run, kept alive, called with a timeout, restarted once by the hub if its
session fails).

Nothing gives the model new reach (SPEC 15): it still only calls the same tools. The file
tools confine every path to the root (`paths.ConfinedRoot`) and do their blocking work in
worker threads; `run` goes through bwrap exactly as before; `run` and git take their
allow-listed variables from the hub's scrubbed launch environment, never from this
process's environment, which holds the agent's tokens.

Only a command that starts this very installation runs here: `sys.executable -m
coding_agent.tools.workspace_server ...` or `sys.executable -m coding_agent.cli
mcp-workspace ...` (what `{python}` and `coding-agent` in the config become). Any other
command, such as another interpreter, gets a process as before.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sys
from collections.abc import Sequence
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import ClientSession
from mcp.server.fastmcp import FastMCP
from mcp.server.lowlevel import Server
from mcp.server.models import InitializationOptions
from mcp.shared.memory import create_client_server_memory_streams

from coding_agent.errors import ToolError
from coding_agent.tools.egress_sandbox import EgressSandbox
from coding_agent.tools.mcp_connection import Launch
from coding_agent.tools.mcp_session import SessionHolder, first_error
from coding_agent.tools.sandbox import bwrap_problem
from coding_agent.tools.workspace_server import ArgumentsRefused, create_server, parse_arguments

__all__ = ["InProcessConnection", "in_process_arguments"]

logger = logging.getLogger("coding_agent.tools.hub")

# The command lines that start the built-in server, after this interpreter.
_FORMS: tuple[tuple[str, ...], ...] = (
    ("-m", "coding_agent.tools.workspace_server"),
    ("-m", "coding_agent.cli", "mcp-workspace"),
)


def in_process_arguments(argv: Sequence[str]) -> list[str] | None:
    """The server's own arguments when `argv` starts this installation's built-in server, else None."""
    if not argv or argv[0] != sys.executable:
        return None
    for form in _FORMS:
        if tuple(argv[1 : 1 + len(form)]) == form:
            return list(argv[1 + len(form) :])
    return None


@functools.cache
def _sdk_version() -> str:
    """The version a FastMCP server announces in the handshake, found as the SDK finds it."""
    return Server("version").create_initialization_options().server_version


def _initialization_options(server: FastMCP) -> InitializationOptions:
    """The server's handshake options, as `create_initialization_options` builds them.

    A FastMCP server sets no version, so the SDK reads the mcp package's metadata for
    one (~0.25 ms of parsing on the event loop) every run; it cannot change while this
    process runs, so it is looked up once and given to each run's server.
    """
    lowlevel = server._mcp_server  # noqa: SLF001
    if not lowlevel.version:
        lowlevel.version = _sdk_version()
    return lowlevel.create_initialization_options()


class InProcessConnection(SessionHolder):
    """The built-in workspace server of one run, in this process, and the hub's session to it."""

    def __init__(self, launch: Launch, arguments: Sequence[str], secrets: Sequence[str]) -> None:
        super().__init__(launch.name, secrets)
        self._launch = launch
        self._arguments = list(arguments)

    def _fail(self, reason: str) -> None:
        self.startup_error = ToolError(
            f"MCP server {self._launch.name!r} (the built-in workspace server) could not be started: "
            f"{self._redactor.text(reason)}"
        )

    def _build(self) -> FastMCP:
        """The server (in a worker thread: it opens the root and checks bwrap once per process)."""
        options = parse_arguments(self._arguments, raise_errors=True, cwd=self._launch.cwd)
        env = self._launch.env
        if options.sandbox == "bwrap":
            bwrap_problem()  # cached: the first `run` then does not block the event loop on the probe
        return create_server(
            options.root, options.sandbox, options.git_dir, EgressSandbox.from_environment(env), source_env=env
        )

    async def _run(self) -> None:
        try:
            with self._scope:
                server = await asyncio.to_thread(self._build)
                await self._serve(server)
        except ArgumentsRefused as error:
            self._fail(str(error))
        except Exception as error:  # the runner reports, it never raises
            cause = first_error(error)
            if not self.ready.is_set():
                self._fail(f"{cause.__class__.__name__}: {cause}")
            else:
                logger.warning("MCP server %s session ended: %s", self._launch.name, cause.__class__.__name__)
        finally:
            if not self.ready.is_set() and self.startup_error is None and not self._wake.is_set():
                self._fail("it ended before finishing the MCP handshake")
            self._end()

    async def _serve(self, server: FastMCP) -> None:
        """The server on one end of the memory streams, the hub's session on the other."""
        async with create_client_server_memory_streams() as (client_streams, server_streams):
            async with anyio.create_task_group() as group:
                group.start_soon(self._serve_server, server, *server_streams)
                try:
                    async with ClientSession(*client_streams) as session:
                        await self._hold(session)
                finally:
                    group.cancel_scope.cancel()

    async def _serve_server(
        self,
        server: FastMCP,
        read_stream: MemoryObjectReceiveStream[Any],
        write_stream: MemoryObjectSendStream[Any],
    ) -> None:
        # FastMCP offers no public way to serve given streams; its low-level server does
        # (this is what the SDK's own `create_connected_server_and_client_session` does).
        lowlevel = server._mcp_server  # noqa: SLF001
        try:
            await lowlevel.run(read_stream, write_stream, _initialization_options(server))
        finally:
            # The server is gone: calls in flight and later ones see a broken session.
            self._closed = True
            self._wake.set()

