"""One MCP server process and its `ClientSession`, on the official SDK's stdio transport.

The SDK's `stdio_client` spawns the server and frames JSON-RPC; what it does not do is
added here around it, because the hub needs it (SPEC 6, 15):
- the environment is the hub's scrubbed one (the SDK's few inherited variables are
  overridden when they hold a secret, see `ToolHub._launch`);
- stderr goes to a pipe drained here: a bounded, redacted tail for error messages, and
  its EOF (the process and its children are gone) ends the session at once;
- the process id, which the SDK hides, is found through that pipe: it is needed to kill
  the server's whole process group at the end (no child outlives the run), and for
  diagnostics and tests.
The session itself (one runner task, calls from any task) is `mcp_session.SessionHolder`.
"""

from __future__ import annotations

import codecs
import contextlib
import logging
import os
import signal
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import anyio
from mcp import ClientSession, StdioServerParameters, types as mcp_types
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import McpError

from coding_agent.errors import ToolError
from coding_agent.tools.mcp_session import Broken, SessionHolder, first_error

__all__ = ["Broken", "Connection", "Launch"]

logger = logging.getLogger("coding_agent.tools.hub")

_STDERR_TAIL_LINES = 20


@dataclass(frozen=True)
class Launch:
    """How to start one server: the resolved command line, environment and directory."""

    name: str
    argv: list[str]
    env: dict[str, str]
    cwd: Path

    @property
    def program(self) -> str:
        return self.argv[0]


class Connection(SessionHolder):
    """One server process and its session, on the SDK's stdio transport."""

    def __init__(self, launch: Launch, secrets: Sequence[str]) -> None:
        super().__init__(launch.name, secrets)
        self._launch = launch
        self._secrets = secrets
        self.pid: int | None = None
        self._stderr_tail: deque[str] = deque(maxlen=_STDERR_TAIL_LINES)

    def _abort_startup(self) -> None:
        # The process goes first, so that the SDK's shutdown (stdin EOF, wait) finds it gone at once.
        self._kill_group(signal.SIGKILL)

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
            cause = first_error(error)
            if isinstance(cause, OSError) and self.pid is None:  # the spawn itself failed
                reasons = {FileNotFoundError: "command not found", PermissionError: "permission denied"}
                self._fail(reasons.get(type(cause)) or cause.strerror or cause.__class__.__name__)
            else:
                logger.warning("MCP server %s session ended: %s", launch.name, cause.__class__.__name__)
        finally:
            # Ended before the handshake and not asked to: a failure, even when its stderr's
            # end (which sets `_wake`) was seen before the session's own error. A stdio
            # server's session ends by itself only when its process closes its pipes, so
            # this is the same quick exit `_startup_failed` reports, whichever error came
            # first (under load, a write to its gone stdin often does).
            if not self.ready.is_set() and self.startup_error is None and not self._stop_requested:
                self._fail("it exited during startup, before finishing the MCP handshake")
            with contextlib.suppress(OSError):
                errlog.close()
            with contextlib.suppress(OSError):
                os.close(read_fd)
            # Children the server left behind in its group would outlive the run otherwise.
            self._kill_group(signal.SIGKILL)
            self._end()

    async def _serve(self, errlog: TextIO) -> None:
        """The SDK's stdio transport and session, held until a stop is asked or the server ends."""
        launch = self._launch
        parameters = StdioServerParameters(command=launch.argv[0], args=launch.argv[1:], env=launch.env, cwd=launch.cwd)
        pipe = os.fstat(errlog.fileno()).st_ino
        async with stdio_client(parameters, errlog=errlog) as (read_stream, write_stream):
            errlog.close()  # the child holds its own copy: EOF on the pipe now means it is gone
            self.pid = _child_with_stderr(pipe)
            async with ClientSession(read_stream, write_stream) as session:
                await self._hold(session)

    async def _startup_failed(self, error: Exception) -> None:
        # A closed connection usually means the process died; give it a moment to be reaped
        # so that the message can say so and give the exit code.
        code = None
        with anyio.move_on_after(1.0):
            code = await _exit_code(self.pid)
        if code is not None:  # the code is known while the process is unreaped, not after
            self._fail("it exited during startup" + (f" (exit code {code})" if code >= 0 else ""))
        elif self.pid is None and isinstance(error, McpError) and error.error.code == mcp_types.CONNECTION_CLOSED:
            # No child of ours held its stderr when we looked, just after the start, and the
            # connection closed: it had exited already (a quick exit, its code unknown).
            self._fail("it exited during startup")
        else:
            await super()._startup_failed(error)
        self._kill_group(signal.SIGKILL)

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


def _child_with_stderr(pipe_inode: int) -> int | None:
    """The pid of our child process whose stderr is the pipe `pipe_inode`.

    The SDK's `stdio_client` does not expose its process; its pid is needed to stop the
    server's whole process group and for diagnostics. The pipe is this connection's own,
    so the match is unambiguous even when several servers start at once.
    """
    me = str(os.getpid())
    target = f"pipe:[{pipe_inode}]"
    with os.scandir("/proc") as entries:  # closed also when it returns from inside the loop
        for entry in entries:
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
