"""Scrubbed environments and sandboxed shell commands for tool processes.

Tokens live in the agent's own environment (GITHUB_TOKEN, OPENAI_API_KEY, ...). A tool
process — an MCP server, or a shell command the model asked for — must never inherit
them, so environments are built from a short allow-list, never from a copy of
`os.environ` with a few names removed (a deny-list always misses the next token).

Shell commands run inside bubblewrap (`bwrap.py`: no capabilities, no network, only the
workspace and read-only system directories, an environment of four variables). There is
no silent fallback (SPEC 15): in `bwrap` mode a machine where bwrap cannot run refuses
the command with a message that says why; only `none`, which the operator must choose
(`security.sandbox: none`), runs a plain subprocess, in its own session, with the same
scrubbed environment. (About 350 lines: the environment scrubbing, the probe and
the capped, group-killing runner (time limit or a caller's stop) are one job — a command
that leaks nothing.)
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from coding_agent.tools.bwrap import SANDBOX_PATH, Bind, bwrap_argv
from coding_agent.tools.egress_sandbox import EgressSandbox, forwarder_problem

__all__ = [
    "ALLOWED_ENV_VARS",
    "CommandResult",
    "SandboxMode",
    "Bind",
    "SandboxUnavailable",
    "bwrap_problem",
    "bwrap_usable",
    "check_sandbox",
    "command_environment",
    "contains_secret",
    "run_command",
    "sandbox_argv",
    "scrubbed_environment",
]

logger = logging.getLogger(__name__)

# What a tool process may inherit from its parent: enough to find programs, pick a locale
# and a home, nothing that usually carries a credential.
ALLOWED_ENV_VARS: tuple[str, ...] = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "TERM",
    "TZ",
    "TMPDIR",
    "NODE_PATH",
    "PYTHONPATH",
)

SandboxMode = Literal["bwrap", "none"]

# Variables set for every shell command: no pager or prompt can hang a command that has
# no terminal, and the model sees plain output.
_COMMAND_DEFAULTS: dict[str, str] = {
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "GIT_TERMINAL_PROMPT": "0",
    "TERM": "dumb",
}

_KILL_GRACE_SECONDS = 5.0


def contains_secret(value: str, secrets: Sequence[str]) -> bool:
    """Whether `value` contains any non-empty secret (empty strings would match everything)."""
    return any(secret and secret in value for secret in secrets)


def scrubbed_environment(
    extra: Mapping[str, str] | None = None,
    secrets: Sequence[str] = (),
    source: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The allow-listed part of `source` (default `os.environ`) plus `extra`.

    Any variable whose value contains one of `secrets` is left out, whether it came from
    the parent or from `extra`: a configured server env must not smuggle a forge token
    into a tool process either. Shell functions exported by bash (`() {...`) are dropped.
    """
    source = os.environ if source is None else source
    env: dict[str, str] = {}
    for name in ALLOWED_ENV_VARS:
        value = source.get(name)
        if value is not None and not value.startswith("()"):
            env[name] = value
    env.update(extra or {})
    return {name: value for name, value in env.items() if not contains_secret(value, secrets)}


def _shell() -> str:
    return shutil.which("bash") or "/bin/sh"


def sandbox_argv(
    command: str,
    root: Path,
    extra_binds: Sequence[Bind] = (),
    extra_env: Mapping[str, str] | None = None,
    tmp_size_bytes: int | None = None,
    source_env: Mapping[str, str] | None = None,
    egress: EgressSandbox | None = None,
) -> list[str]:
    """The bwrap command line that runs `command` through the shell with `root` writable.

    `source_env` (default `os.environ`): where LANG comes from. `egress`: the proxy's
    socket bound in, its variables set, and the command started behind its forwarder.
    """
    shell = "/bin/bash" if os.path.exists("/bin/bash") else "/bin/sh"
    argv = [shell, "-c", command]
    if egress is not None:
        argv = egress.command_argv(shell, command)
        extra_binds = [*extra_binds, *(Bind(source, dest) for source, dest in egress.binds())]
        extra_env = {**(extra_env or {}), **egress.env()}
    return bwrap_argv(
        argv,
        root,
        bwrap=shutil.which("bwrap") or "bwrap",
        extra_binds=extra_binds,
        extra_env=extra_env,
        lang=scrubbed_environment(source=source_env).get("LANG"),
        tmp_size_bytes=tmp_size_bytes,
    )


@functools.lru_cache(maxsize=1)
def bwrap_problem() -> str | None:
    """Why bwrap cannot sandbox commands here, or None when it can (probed once per process)."""
    if shutil.which("bwrap") is None:
        return "bwrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    with tempfile.TemporaryDirectory(prefix="coding-agent-bwrap-probe-") as directory:
        try:
            completed = subprocess.run(
                sandbox_argv("true", Path(directory).resolve()),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=scrubbed_environment(),
                timeout=15,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"bwrap could not run ({error.__class__.__name__}: {error})"
    if completed.returncode != 0:
        reason = completed.stderr.decode(errors="replace").strip()[:200]
        return f"bwrap cannot create its namespaces here ({reason or f'exit {completed.returncode}'})"
    return None


def bwrap_usable(root: Path | None = None) -> bool:
    """Whether bwrap works here. `root` is accepted for old callers and ignored."""
    return bwrap_problem() is None


def check_sandbox(mode: SandboxMode) -> str | None:
    """What the agent must do at start: None (fine), a warning to log, or raise `SandboxUnavailable`.

    `bwrap` without a working bwrap refuses to start; `none` starts with a warning,
    every time, because every command the model runs then reaches the host.
    """
    if mode == "none":
        return (
            "security.sandbox is none: the model's commands run WITHOUT a sandbox, with access to "
            "this machine's files and network; use it only where the whole machine is disposable"
        )
    problem = bwrap_problem()
    if problem is not None:
        raise SandboxUnavailable(
            f"security.sandbox is bwrap, but {problem}. Install bubblewrap, or set security.sandbox: none "
            "to run the model's commands unsandboxed (not recommended)"
        )
    return None


class SandboxUnavailable(RuntimeError):
    """bwrap mode was asked for and bwrap cannot run here; the message says what to do."""


def command_environment(sandboxed: bool, source: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of an unsandboxed command: allow-listed variables plus fixed defaults.

    (A sandboxed command gets bwrap's own `--clearenv` environment; bwrap itself only
    needs PATH.)
    """
    env = scrubbed_environment(source=source)
    env.update(_COMMAND_DEFAULTS)
    if sandboxed:
        return {"PATH": env.get("PATH", SANDBOX_PATH)}
    return env


@dataclass(frozen=True)
class CommandResult:
    """What a shell command did. `output` is stdout and stderr interleaved, head and tail kept."""

    exit_code: int | None
    output: str
    timed_out: bool
    cut_bytes: int
    sandboxed: bool
    duration_seconds: float
    stopped: bool = False  # the caller's `stop` event ended it (killed like at the time limit)


class _CappedBuffer:
    """Keeps the first `head` and the last `tail` bytes of a stream of any length.

    The head shows what the command started with; the tail holds the summary lines
    (test failures, the last error) that matter most.
    """

    def __init__(self, head: int, tail: int) -> None:
        self._head_limit = head
        self._tail_limit = tail
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self._head_limit - len(self._head)
        if room > 0:
            self._head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self._tail += chunk
            if len(self._tail) > self._tail_limit:
                del self._tail[: len(self._tail) - self._tail_limit]

    def text(self) -> tuple[str, int]:
        """The kept output and how many bytes were dropped in the middle."""
        cut = self.total - len(self._head) - len(self._tail)
        head = self._head.decode(errors="replace")
        tail = self._tail.decode(errors="replace")
        if cut <= 0:
            return head + tail, 0
        return f"{head}\n[... {cut} bytes of output cut ...]\n{tail}", cut


@functools.lru_cache(maxsize=1)
def _warn_no_forwarder() -> None:
    """Once per process: `doctor` says it too, as a failed check, when hosts are listed."""
    logger.warning("sandboxed commands run without network: %s", forwarder_problem())


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def _drain(stream: asyncio.StreamReader, buffer: _CappedBuffer) -> None:
    while chunk := await stream.read(65536):
        buffer.add(chunk)


async def _wait(process: asyncio.subprocess.Process, timeout: float, stop: asyncio.Event | None) -> str:
    """"exited", "timed_out", or "stopped" (the caller set `stop` first)."""
    waiters = {asyncio.ensure_future(process.wait())}
    stopper = asyncio.ensure_future(stop.wait()) if stop is not None else None
    try:
        done, _ = await asyncio.wait(waiters | ({stopper} if stopper else set()), timeout=timeout,
                                     return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
    finally:
        for future in (*waiters, stopper):
            if future is not None and not future.done():
                future.cancel()
    if waiters & done:
        return "exited"
    return "stopped" if stopper is not None and stopper in done else "timed_out"


async def run_command(
    command: str,
    root: Path,
    timeout_seconds: float,
    mode: SandboxMode = "bwrap",
    max_output_bytes: int = 40000,
    source_env: Mapping[str, str] | None = None,
    extra_env: Mapping[str, str] | None = None,
    extra_binds: Sequence[Bind] = (),
    egress: EgressSandbox | None = None,
    stop: asyncio.Event | None = None,
    tmp_size_bytes: int | None = None,
) -> CommandResult:
    """Run `command` through the shell in `root`, sandboxed per `mode`, with a timeout.

    `extra_env` is added to the command's environment (the caller's own fixed settings,
    never inherited values); `extra_binds` are more paths shown inside the sandbox. The
    command gets its own session (process group); on timeout, and after it ends, the
    whole group is killed so that nothing it started in the background outlives it.
    Raises `SandboxUnavailable` in bwrap mode where bwrap cannot run. `egress`: reach the
    network through the host's egress proxy (SPEC 7.1; sandboxed commands only: the
    proxy's socket, its forwarder and the proxy variables are added to the sandbox).
    `stop`: set by the caller to end the command early (a watchdog, e.g. the setup's disk
    limit): its group is killed as at the time limit and the result says `stopped`.
    `tmp_size_bytes` caps the sandbox's private /tmp and /var/tmp.
    """
    sandboxed = mode != "none"
    if sandboxed:
        problem = bwrap_problem()
        if problem is not None:
            raise SandboxUnavailable(f"the command was not run: {problem} (security.sandbox is bwrap)")
        if egress is not None and not egress.available:
            _warn_no_forwarder()
            egress = None
        argv = sandbox_argv(command, root, extra_binds, extra_env, tmp_size_bytes, source_env, egress)
    else:
        argv = [_shell(), "-c", command]
    env = command_environment(sandboxed, source_env)
    if not sandboxed:
        env.update(extra_env or {})
    buffer = _CappedBuffer(head=max_output_bytes // 4, tail=max_output_bytes - max_output_bytes // 4)
    started = time.monotonic()
    returncode, ending = await _execute(argv, root, env, timeout_seconds, stop, buffer)
    output, cut = buffer.text()
    return CommandResult(
        exit_code=returncode if ending == "exited" else None,
        output=output,
        timed_out=ending == "timed_out",
        cut_bytes=cut,
        sandboxed=sandboxed,
        duration_seconds=time.monotonic() - started,
        stopped=ending == "stopped",
    )


async def _execute(
    argv: list[str],
    root: Path,
    env: dict[str, str],
    timeout_seconds: float,
    stop: asyncio.Event | None,
    buffer: _CappedBuffer,
) -> tuple[int | None, str]:
    """Run `argv` in its own session, its output into `buffer`, until it exits, times out
    or is stopped; then its whole group is killed. (Return code, how it ended.)"""
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=root,
        env=env,
        start_new_session=True,
    )
    assert process.stdout is not None
    reader = asyncio.create_task(_drain(process.stdout, buffer))
    ending = "exited"
    try:
        ending = await _wait(process, timeout_seconds, stop)
        _kill_group(process.pid)
        await process.wait()
        # Everything in the group is dead, so the pipe reaches EOF at once; the deadline
        # only guards against a process that escaped the group and kept the pipe open.
        try:
            await asyncio.wait_for(asyncio.shield(reader), _KILL_GRACE_SECONDS)
        except TimeoutError:
            reader.cancel()
    finally:
        if process.returncode is None:
            _kill_group(process.pid)
        if not reader.done():
            reader.cancel()
    return process.returncode, ending
