"""The MCP tool hub: every configured server started once per run, called through live sessions.

Starting a server per call costs hundreds of milliseconds (DESIGN "Known pitfalls"), so
each server gets one long-lived runner task that owns its transport and its
`ClientSession` for the whole run: anyio cancel scopes must be entered and left in the
same task, and only the runner ever enters or leaves them. Calls from any other task go
straight to the session (requests are multiplexed by id), so a call costs what a bare
client's call costs plus a cancel scope.

The transport is the official SDK's stdio client, wrapped per server by
`tools/mcp_connection.py` (process group, stderr, pid); the built-in workspace server
the config adds (`BuiltinWorkspaceServerConfig`) instead runs in this process on memory
streams (`tools/workspace_inprocess.py`: no interpreter start per run). `tools/mcp_server.py`
keeps each server across its one restart; this module holds the servers, the tool
index and the call results.

A server that dies (or whose session breaks) is restarted once and the call retried; if
it dies again it is reported down, and the other servers keep working.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
from mcp import types as mcp_types
from mcp.client.stdio import get_default_environment
from mcp.shared.exceptions import McpError

from coding_agent.config import MCPServerConfig, ToolsConfig
from coding_agent.errors import ToolError
from coding_agent.llm.types import ToolSpec
from coding_agent.redaction import Redactor
from coding_agent.tools.mcp_connection import Launch
from coding_agent.tools.mcp_server import ManagedServer, ServerDown
from coding_agent.tools.sandbox import contains_secret, scrubbed_environment
from coding_agent.tools.types import ToolResult

__all__ = ["ToolHub", "cap_output", "render_content"]

logger = logging.getLogger(__name__)

_WORKSPACE_PLACEHOLDER = "{workspace}"


def _call_timeout(configured: float, args: dict[str, Any]) -> float:
    """How long to wait for a call: the configured timeout, or longer when the call
    itself asks for a longer `timeout_seconds` (the workspace server's `run` does), so the
    hub never abandons a command that is still within the time it was given.
    """
    requested = args.get("timeout_seconds")
    if isinstance(requested, (int, float)) and not isinstance(requested, bool) and requested > 0:
        return max(configured, float(requested) + _CALL_TIMEOUT_GRACE_SECONDS)
    return configured


_CALL_TIMEOUT_GRACE_SECONDS = 5.0


def cap_output(text: str, max_chars: int) -> tuple[str, int]:
    """Cut `text` to `max_chars`, keeping the start and the end, and say how much was cut.

    Three quarters of the budget go to the head and a quarter to the tail: the start shows
    what the output is, the end usually holds the verdict (the failing assertion, the exit
    status).
    """
    if len(text) <= max_chars:
        return text, 0
    head = max_chars * 3 // 4
    tail = max_chars - head
    cut = len(text) - head - tail
    tail_text = text[-tail:] if tail else ""
    return f"{text[:head]}\n[... {cut} characters cut ...]\n{tail_text}", cut


def render_content(result: mcp_types.CallToolResult) -> str:
    """The text of a tool result: text parts joined, anything else described in a line."""
    parts: list[str] = []
    for item in result.content:
        if isinstance(item, mcp_types.TextContent):
            parts.append(item.text)
        elif isinstance(item, mcp_types.ImageContent):
            parts.append(f"[image content: {item.mimeType}, {len(item.data)} base64 characters, not shown]")
        elif isinstance(item, mcp_types.AudioContent):
            parts.append(f"[audio content: {item.mimeType}, {len(item.data)} base64 characters, not shown]")
        elif isinstance(item, mcp_types.EmbeddedResource):
            resource = item.resource
            if isinstance(resource, mcp_types.TextResourceContents):
                parts.append(f"[resource {resource.uri}]\n{resource.text}")
            else:
                parts.append(f"[binary resource {resource.uri} ({resource.mimeType or 'unknown type'}), not shown]")
        elif isinstance(item, mcp_types.ResourceLink):
            parts.append(f"[resource link: {item.uri}]")
        else:
            parts.append(f"[{getattr(item, 'type', 'unknown')} content, not shown]")
    if not parts and result.structuredContent is not None:
        parts.append(json.dumps(result.structuredContent, ensure_ascii=False, indent=2))
    return "\n".join(parts)


def _matches(patterns: list[str] | None, server: str, tool: str) -> bool:
    if patterns is None:
        return True
    return any(fnmatch.fnmatchcase(tool, p) or fnmatch.fnmatchcase(f"{server}/{tool}", p) for p in patterns)


class ToolHub:
    """All MCP servers of one run, as one flat set of `server/tool` tools.

    Use as `async with ToolHub(...) as hub:`. The servers live in runner tasks of their
    own, so `call` may come from any task of the same event loop, concurrently too.
    `secrets` are values (tokens, API keys) that must never appear in a server's
    environment; a variable holding one is left out, whatever its name.
    """

    def __init__(
        self,
        servers: list[MCPServerConfig],
        settings: ToolsConfig,
        workspace: Path,
        secrets: Sequence[str] = (),
        *,
        max_restarts: int = 1,
    ) -> None:
        self._settings = settings
        self._workspace = Path(workspace).resolve()
        self._secrets = tuple(secret for secret in secrets if secret)
        self._redactor = Redactor(self._secrets)
        self._servers = [ManagedServer(config, self._launch(config), self._secrets, max_restarts) for config in servers]
        self._index: dict[str, tuple[ManagedServer, str]] = {}
        self._specs: list[ToolSpec] = []
        self._closed = False

    def _launch(self, config: MCPServerConfig) -> Launch:
        workspace = str(self._workspace)
        argv = [item.replace(_WORKSPACE_PLACEHOLDER, workspace) for item in config.command]
        extra = {key: value.replace(_WORKSPACE_PLACEHOLDER, workspace) for key, value in config.env.items()}
        withheld = sorted(key for key, value in extra.items() if contains_secret(value, self._secrets))
        if withheld:
            logger.warning(
                "MCP server %s: env %s withheld because it holds a secret the tools must not see",
                config.mcp_server_name,
                ", ".join(withheld),
            )
        env = scrubbed_environment(extra, self._secrets)
        # The SDK's stdio_client adds a few parent variables (HOME, PATH, USER...) that the
        # environment does not set; one holding a secret is overridden, never inherited.
        for key, value in get_default_environment().items():
            if key not in env and contains_secret(value, self._secrets):
                env[key] = ""
        return Launch(config.mcp_server_name, argv, env, self._workspace)

    async def __aenter__(self) -> ToolHub:
        if not self._workspace.is_dir():
            raise ToolError(f"the workspace {self._workspace} does not exist; MCP servers cannot start there")
        timeout = self._settings.startup_timeout_seconds
        try:
            results = await asyncio.gather(*(server.start(timeout) for server in self._servers), return_exceptions=True)
        except BaseException:
            await self._stop_all()
            raise
        errors = [result for result in results if isinstance(result, BaseException)]
        if errors:
            await self._stop_all()
            for error in errors:
                if not isinstance(error, ToolError):
                    raise error
            raise errors[0]
        self._build_index()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._closed = True  # no restart may bring a server back after this
        await self._stop_all()

    async def _stop_all(self) -> None:
        # Signal every runner first, synchronously: even if this task is being cancelled,
        # the runners (tasks of their own) still shut their servers down.
        for server in self._servers:
            server.request_stop()
        with anyio.CancelScope(shield=True):
            await asyncio.gather(*(server.stop() for server in self._servers), return_exceptions=True)

    def _build_index(self) -> None:
        self._index.clear()
        self._specs.clear()
        for server in self._servers:
            assert server.connection is not None
            name = server.config.mcp_server_name
            allow = server.config.tools_allow
            for tool in server.connection.tools:
                if not _matches(allow, name, tool.name):
                    continue
                full = f"{name}/{tool.name}"
                self._index[full] = (server, tool.name)
                self._specs.append(ToolSpec(full, tool.description or "", dict(tool.inputSchema)))
            for pattern in allow or ():
                if not any(_matches([pattern], name, tool.name) for tool in server.connection.tools):
                    logger.warning("MCP server %s: tools_allow entry %r matches no tool", name, pattern)

    @property
    def tool_specs(self) -> list[ToolSpec]:
        return list(self._specs)

    @property
    def system_prompts(self) -> dict[str, str]:
        return {server.config.mcp_server_name: server.config.system_prompt for server in self._servers}

    def server_pids(self) -> dict[str, int]:
        """The process id of each live server process (for diagnostics and tests; a server
        in this process has none)."""
        pids: dict[str, int] = {}
        for server in self._servers:
            connection = server.connection
            if connection is not None and connection.alive and connection.pid is not None:
                pids[server.config.mcp_server_name] = connection.pid
        return pids

    def _result(self, name: str, text: str, started: float, is_error: bool) -> ToolResult:
        # A tool may print a secret it found (a config file, an error echoing a header);
        # the model and the issue comments must never see it.
        text = self._redactor.text(text)
        capped, cut = cap_output(text, self._settings.max_output_chars)
        return ToolResult(
            name=name,
            text=capped,
            is_error=is_error,
            duration_seconds=time.perf_counter() - started,
            output_chars=len(text),
            cut_chars=cut,
        )

    async def call(self, name: str, args: dict[str, Any]) -> ToolResult:
        """Call `server/tool`. Every failure is a result with `is_error`, for the model to read."""
        started = time.perf_counter()
        entry = self._index.get(name)
        if entry is None:
            known = ", ".join(sorted(self._index)) or "none"
            return self._result(name, f"unknown tool {name!r}. Known tools: {known}", started, True)
        if self._closed:
            return self._result(name, "the tool hub is closed: this run's MCP servers were stopped", started, True)
        if not isinstance(args, dict):
            return self._result(name, f"the arguments of {name} must be a JSON object", started, True)
        server, tool = entry
        timeout = _call_timeout(self._settings.call_timeout_seconds, args)
        try:
            result = await server.call(tool, args, timeout, self._settings.startup_timeout_seconds)
        except ServerDown:
            message = (
                f"MCP server {server.config.mcp_server_name!r} is down: it stopped, was restarted once and "
                "stopped again. Its tools cannot be used in this run; the other tools still work."
            )
            return self._result(name, message, started, True)
        except McpError as error:
            text = self._redactor.text(error.error.message)
            return self._result(name, f"tool {name} failed: {text}", started, True)
        except Exception as error:  # e.g. a result that breaks its own output schema
            return self._result(name, f"tool {name} failed: {error.__class__.__name__}", started, True)
        if result is None:
            message = (
                f"tool {name} timed out after {timeout:g}s and its result was abandoned; "
                "try a smaller or quicker request"
            )
            return self._result(name, message, started, True)
        return self._result(name, render_content(result), started, bool(result.isError))
