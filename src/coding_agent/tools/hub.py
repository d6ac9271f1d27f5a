"""The MCP tool hub: every configured server started once per run, called through live sessions.

Starting a server per call costs hundreds of milliseconds (DESIGN "Known pitfalls"), so
each server gets one long-lived runner task that owns its transport and its
`ClientSession` for the whole run: anyio cancel scopes must be entered and left in the
same task, and only the runner ever enters or leaves them. Calls from any other task go
straight to the session (requests are multiplexed by id), so a call costs what a bare
client's call costs plus a cancel scope.

The transport is the official SDK's (`mcp.client.stdio.stdio_client`). What it does not
do is added around it: the environment is the scrubbed one (the SDK's few inherited
variables are overridden when they hold a secret), stderr goes to a pipe drained here
(bounded tail for error messages, redacted debug log, its EOF marks the server gone),
the process id is found through that pipe (the SDK hides the process), and at the end
the server's whole process group is killed so no child outlives the run.

A server that dies (or whose session breaks) is restarted once and the call retried; if
it dies again it is reported down, and the other servers keep working.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import fnmatch
import json
import logging
import os
import signal
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp import types as mcp_types
from mcp.client.stdio import get_default_environment, stdio_client
from mcp.shared.exceptions import McpError

from coding_agent.config import MCPServerConfig, ToolsConfig
from coding_agent.errors import ToolError
from coding_agent.llm.types import ToolSpec
from coding_agent.redaction import Redactor
from coding_agent.tools.sandbox import contains_secret, scrubbed_environment
from coding_agent.tools.types import ToolResult

__all__ = ["ToolHub", "cap_output", "render_content"]

logger = logging.getLogger(__name__)

_STDERR_TAIL_LINES = 20
_WORKSPACE_PLACEHOLDER = "{workspace}"


class _Broken(Exception):
    """The session can no longer carry requests: the process died or the pipes closed."""


class _ServerDown(Exception):
    """The server died again after its one restart."""


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


def _first_error(error: BaseException) -> BaseException:
    """The first real error, looking inside exception groups (task groups wrap them)."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


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


@dataclass(frozen=True)
class _Launch:
    """How to start one server: the resolved command line, environment and directory."""

    name: str
    argv: list[str]
    env: dict[str, str]
    cwd: Path

    @property
    def program(self) -> str:
        return self.argv[0]


class _Connection:
    """One server process and its session, owned by the task running `run()`.

    Other tasks only call `call_tool`; `stop` asks the runner to leave its contexts.
    """

    def __init__(self, launch: _Launch, secrets: Sequence[str]) -> None:
        self._redactor = Redactor(secrets)
        self._launch = launch
        self._secrets = secrets
        self.pid: int | None = None
        self.tools: list[mcp_types.Tool] = []
        self.startup_error: ToolError | None = None
        self.ready = asyncio.Event()  # set when usable, or when startup failed
        self._wake = asyncio.Event()  # stop requested or the process exited
        self._finished = asyncio.Event()
        self._session: ClientSession | None = None
        self._closed = False
        self._inflight: set[anyio.CancelScope] = set()
        self._stderr_tail: deque[str] = deque(maxlen=_STDERR_TAIL_LINES)
        self._task: asyncio.Task[None] | None = None
        self._scope = anyio.CancelScope()

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"mcp-server:{self._launch.name}")

    def request_stop(self) -> None:
        """Ask the runner to leave (without waiting): safe to call from any task, even a cancelled one."""
        self._wake.set()
        if not self.ready.is_set():
            # Still in the handshake: nothing graceful to wait for. The process goes first,
            # so that the SDK's shutdown (stdin EOF, wait) finds it gone at once.
            self._kill_group(signal.SIGKILL)
            self._scope.cancel()

    async def stop(self) -> None:
        """Leave the session and end the process (stdin closed, then SIGTERM, then SIGKILL)."""
        self.request_stop()
        if self._task is not None:
            await self._finished.wait()

    @property
    def alive(self) -> bool:
        return self._session is not None and not self._closed

    def _kill_group(self, sig: int) -> None:
        if self.pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)

    def _fail(self, reason: str) -> None:
        self.startup_error = ToolError(
            f"MCP server {self._launch.name!r} (command {self._launch.program!r}) could not be started: {reason}"
        )
        if self._stderr_tail:
            logger.warning(
                "MCP server %s stderr before it failed:\n%s",
                self._launch.name,
                self._redactor.text("\n".join(self._stderr_tail)),
            )

    async def _run(self) -> None:
        launch = self._launch
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        errlog = os.fdopen(write_fd, "w")
        try:
            with self._scope:
                async with anyio.create_task_group() as group:
                    group.start_soon(self._drain_stderr, read_fd)
                    try:
                        await self._serve(errlog)
                    finally:
                        group.cancel_scope.cancel()
        except Exception as error:  # the runner reports, it never raises
            cause = _first_error(error)
            if isinstance(cause, OSError) and self.pid is None:  # the spawn itself failed
                reasons = {FileNotFoundError: "command not found", PermissionError: "permission denied"}
                self._fail(reasons.get(type(cause)) or cause.strerror or cause.__class__.__name__)
            else:
                logger.warning("MCP server %s session ended: %s", launch.name, cause.__class__.__name__)
        finally:
            if not self.ready.is_set() and self.startup_error is None and not self._wake.is_set():
                self._fail("it ended before finishing the MCP handshake")
            with contextlib.suppress(OSError):
                errlog.close()
            with contextlib.suppress(OSError):
                os.close(read_fd)
            # Children the server left behind in its group would outlive the run otherwise.
            self._kill_group(signal.SIGKILL)
            self._end()

    def _end(self) -> None:
        self._closed = True
        self._session = None
        for scope in list(self._inflight):
            scope.cancel()
        self.ready.set()
        self._finished.set()

    async def _serve(self, errlog: TextIO) -> None:
        """The SDK's stdio transport and session, held until a stop is asked or the server ends."""
        launch = self._launch
        parameters = StdioServerParameters(command=launch.argv[0], args=launch.argv[1:], env=launch.env, cwd=launch.cwd)
        pipe = os.fstat(errlog.fileno()).st_ino
        async with stdio_client(parameters, errlog=errlog) as (read_stream, write_stream):
            errlog.close()  # the child holds its own copy: EOF on the pipe now means it is gone
            self.pid = _child_with_stderr(pipe)
            async with ClientSession(read_stream, write_stream) as session:
                try:
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
        # A closed connection usually means the process died; give it a moment to be reaped
        # so that the message can say so and give the exit code.
        code = None
        with anyio.move_on_after(1.0):
            code = await _exit_code(self.pid)
        if code is not None:  # the code is known while the process is unreaped, not after
            self._fail("it exited during startup" + (f" (exit code {code})" if code >= 0 else ""))
        elif isinstance(error, McpError):
            self._fail(f"the MCP handshake failed: {self._redactor.text(error.error.message)}")
        else:
            self._fail(f"the MCP handshake failed ({error.__class__.__name__})")
        self._kill_group(signal.SIGKILL)

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

    async def _drain_stderr(self, fd: int) -> None:
        """Read the server's stderr so that a chatty server never blocks on a full pipe; its
        end (EOF: the process and its children are gone) ends the session."""
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        buffer = ""
        while True:
            await anyio.wait_readable(fd)
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                continue
            if not chunk:
                break
            lines = (buffer + decoder.decode(chunk)).split("\n")
            buffer = lines.pop()
            for line in lines:
                if line.strip():
                    self._stderr_tail.append(line)
                    logger.debug("MCP server %s: %s", self._launch.name, self._redactor.text(line))
        if not self._wake.is_set() and self.ready.is_set():
            logger.warning("MCP server %s exited", self._launch.name)
        self._closed = True
        self._wake.set()

    # -- calls -----------------------------------------------------------------------
    async def call_tool(self, tool: str, arguments: dict[str, Any], timeout: float) -> mcp_types.CallToolResult | None:
        """The server's result, or None on timeout. Raises `_Broken` when the session is gone."""
        session = self._session
        if session is None or self._closed:
            raise _Broken
        scope = anyio.CancelScope(deadline=anyio.current_time() + timeout)
        self._inflight.add(scope)
        try:
            with scope:
                return await session.call_tool(tool, arguments)
        except McpError as error:
            if error.error.code == mcp_types.CONNECTION_CLOSED:
                raise _Broken from None
            raise
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
            raise _Broken from None
        finally:
            self._inflight.discard(scope)
        if self._closed:
            raise _Broken  # the runner cancelled us because the session ended
        return None


def _child_with_stderr(pipe_inode: int) -> int | None:
    """The pid of our child process whose stderr is the pipe `pipe_inode`.

    The SDK's `stdio_client` does not expose its process; its pid is needed to stop the
    server's whole process group and for diagnostics. The pipe is this connection's own,
    so the match is unambiguous even when several servers start at once.
    """
    me = str(os.getpid())
    target = f"pipe:[{pipe_inode}]"
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", encoding="utf-8", errors="replace") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            if fields[1] == me and os.readlink(f"/proc/{entry.name}/fd/2") == target:
                return int(entry.name)
        except (OSError, IndexError):
            continue
    return None


async def _exit_code(pid: int | None) -> int | None:
    """The exit code of our child `pid` once it has exited (without reaping it), else None."""
    if pid is None:
        return None
    while True:
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            return -1  # already reaped by the SDK's process handle: the code is gone
        if state in ("Z", "X"):
            return _zombie_exit_code(pid)
        await anyio.sleep(0.05)


def _zombie_exit_code(pid: int) -> int:
    """Field 52 of /proc/<pid>/stat: the wait status of an exited, unreaped process."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            status = int(handle.read().rsplit(")", 1)[1].split()[49])
    except (OSError, IndexError, ValueError):
        return -1
    return (status >> 8) & 0xFF if status & 0x7F == 0 else -(status & 0x7F)


class _Server:
    """One configured server across restarts: its tools, its live connection, its one restart."""

    def __init__(self, config: MCPServerConfig, launch: _Launch, secrets: Sequence[str], max_restarts: int) -> None:
        self.config = config
        self.launch = launch
        self._secrets = secrets
        self._restarts_left = max_restarts
        self._lock = asyncio.Lock()
        self.connection: _Connection | None = None  # only ever a connection that finished its handshake
        self._starting: _Connection | None = None
        self.down = False

    async def start(self, timeout: float) -> _Connection:
        connection = _Connection(self.launch, self._secrets)
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

    def _connections(self) -> list[_Connection]:
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
            raise _ServerDown
        try:
            return await connection.call_tool(tool, arguments, timeout)
        except _Broken:
            pass
        async with self._lock:
            if self.down:
                raise _ServerDown
            if self.connection is connection:  # nobody restarted it while we waited
                await connection.stop()
                if self._restarts_left <= 0:
                    self.down = True
                    raise _ServerDown
                self._restarts_left -= 1
                logger.warning("MCP server %s stopped; restarting it once", self.launch.name)
                try:
                    await self.start(startup_timeout)
                except ToolError as error:
                    logger.warning("%s", error)
                    self.down = True
                    raise _ServerDown from None
            current = self.connection
        assert current is not None
        try:
            return await current.call_tool(tool, arguments, timeout)
        except _Broken:
            async with self._lock:
                if self.connection is current and self._restarts_left <= 0:
                    self.down = True
                    await current.stop()
            raise _ServerDown from None


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
        self._servers = [_Server(config, self._launch(config), self._secrets, max_restarts) for config in servers]
        self._index: dict[str, tuple[_Server, str]] = {}
        self._specs: list[ToolSpec] = []
        self._closed = False

    def _launch(self, config: MCPServerConfig) -> _Launch:
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
        return _Launch(config.mcp_server_name, argv, env, self._workspace)

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
        """The process id of each live server (for diagnostics and tests)."""
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
        except _ServerDown:
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
