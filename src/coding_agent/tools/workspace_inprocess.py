"""The built-in workspace server inside the agent process, on the SDK's memory streams.

Starting `python -m coding_agent.tools.workspace_server` for every run cost about 1.7
CPU-seconds of imports (the mcp SDK, pydantic, ...) before the run's first model request;
sixteen runs at once on a small machine spent more time importing than working
(docs/performance.md). The agent process has imported all of that already, so the hub
runs the built-in server the config adds (`BuiltinWorkspaceServerConfig`) here: the same
`create_server` (one implementation of the tools; the stdio transport stays for
`coding-agent mcp-workspace`, an operator's own entries and other clients), connected
through the SDK's in-memory session, one server and session per run (SPEC 6: started
once per run, kept alive, called with a timeout, restarted once by the hub if its
session fails).

Nothing gives the model new reach (SPEC 15): it still only calls the same tools. The file
tools confine every path to the root (`paths.ConfinedRoot`) and do their blocking work in
worker threads; `run` goes through bwrap exactly as before; `run` and git take their
allow-listed variables from the hub's scrubbed launch environment, never from this
process's environment, which holds the agent's tokens.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from mcp.server.fastmcp import FastMCP
from mcp.shared.memory import create_connected_server_and_client_session

from coding_agent.config import BuiltinWorkspaceServerConfig
from coding_agent.errors import ToolError
from coding_agent.tools.egress_sandbox import EgressSandbox
from coding_agent.tools.mcp_connection import Launch
from coding_agent.tools.mcp_session import SessionHolder, first_error
from coding_agent.tools.sandbox import bwrap_problem
from coding_agent.tools.workspace_server import create_server

__all__ = ["InProcessConnection"]

logger = logging.getLogger("coding_agent.tools.hub")


class InProcessConnection(SessionHolder):
    """The built-in workspace server of one run, in this process, and the hub's session to it.

    Its root is the run's workspace (the directory a process would be started in), its
    sandbox the config's."""

    def __init__(self, launch: Launch, config: BuiltinWorkspaceServerConfig, secrets: Sequence[str]) -> None:
        super().__init__(launch.name, secrets)
        self._launch = launch
        self._sandbox = config.sandbox

    def _fail(self, reason: str) -> None:
        self.startup_error = ToolError(
            f"MCP server {self._launch.name!r} (the built-in workspace server) could not be started: "
            f"{self._redactor.text(reason)}"
        )

    def _build(self) -> FastMCP:
        """The server (in a worker thread: it opens the root and checks bwrap once per process)."""
        env = self._launch.env
        if self._sandbox == "bwrap":
            bwrap_problem()  # cached: the first `run` then does not block the event loop on the probe
        return create_server(self._launch.cwd, self._sandbox, None, EgressSandbox.from_environment(env), source_env=env)

    async def _run(self) -> None:
        try:
            with self._scope:
                server = await asyncio.to_thread(self._build)
                # The SDK's in-memory pair: the server in a task of its own, the session
                # handed over after the handshake.
                async with create_connected_server_and_client_session(server) as session:
                    await self._hold(session, handshake_done=True)
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
