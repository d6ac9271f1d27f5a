"""The host's own git: an async wrapper that runs `git` with the forge credential per command.

Two things make the host's git calls safe in a workspace the model has written to:

- The credential is an `http.<origin>.extraHeader` given to that one child process
  through `GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_n`/`GIT_CONFIG_VALUE_n` in its environment:
  never in the remote URL, never in `.git/config`, never on a command line (which every
  user of the machine can read in /proc), never in the environment of the MCP servers
  or of the commands the model runs.
- Every call runs with the host-written configuration of `tools/host_git.py`: the git
  directory outside the workspace named explicitly, no system or global config, hooks,
  fsmonitor, filters, credential helpers and submodule recursion switched off.

The child's environment is built from an allow-list (as for tool processes) plus the
proxy and CA variables git needs to reach a forge behind a corporate proxy.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from coding_agent.errors import AgentError, TransientError
from coding_agent.redaction import Redactor
from coding_agent.tools.host_git import HARDENING, hardened_git_environment
from coding_agent.tools.sandbox import scrubbed_environment

__all__ = ["Git", "GitAuth", "GitError", "GitResult", "PushRejected", "HARDENING"]

log = logging.getLogger(__name__)

# Passed through from the agent's environment: how git reaches the forge, nothing secret.
_NETWORK_ENV = (
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "GIT_SSL_CAINFO",
    "GIT_SSL_CAPATH",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
)

# stderr fragments of failures worth retrying: the forge or the network, not the request.
_TRANSIENT_MARKERS = (
    "returned error: 500",
    "returned error: 502",
    "returned error: 503",
    "returned error: 504",
    "returned error: 429",
    "could not resolve host",
    "failed to connect",
    "connection reset",
    "connection refused",
    "connection timed out",
    "operation timed out",
    "rpc failed",
    "early eof",
)


class GitError(AgentError):
    """A git command failed; the message names the command and git's own words, redacted."""


class PushRejected(GitError):
    """The forge refused a push: non-fast-forward, 403, or a server-side rule."""


@dataclass(frozen=True)
class GitAuth:
    """The `Authorization` header for one forge, scoped to the URL prefix it may go to.

    `renew`, when given, is asked for the header before every command: a credential that
    expires (a GitHub App's installation token) is then current at each fetch and push of
    a run that outlives it. `header` is the one from when the auth was made."""

    url: str
    header: str = field(repr=False)
    renew: Callable[[], Awaitable[str | None]] | None = field(default=None, repr=False, compare=False)

    async def current(self) -> GitAuth | None:
        """This auth with the header as it is now (None: no credential to send)."""
        if self.renew is None:
            return self if self.header else None
        header = await self.renew()
        return GitAuth(self.url, header) if header else None

    @property
    def scope(self) -> str:
        """`scheme://host[:port]/`: the header is sent to this origin only."""
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc}/"

    @property
    def secret_parts(self) -> list[str]:
        """What must never be printed: the header and its credential part."""
        value = self.header.split(":", 1)[-1].strip()
        return [self.header, value, value.split(" ", 1)[-1]]


@dataclass(frozen=True)
class GitResult:
    returncode: int
    stdout: str
    stderr: str


class Git:
    """Runs git commands for the host. One instance per run; `redact` masks secrets in errors."""

    def __init__(self, *, timeout: float, redact: Callable[[str], str] = lambda text: text) -> None:
        self._timeout = timeout
        self._redact = redact

    def _environment(self, cwd: Path | None, auth: GitAuth | None, extra: Mapping[str, str] | None) -> dict[str, str]:
        env = scrubbed_environment()
        env.update({name: os.environ[name] for name in _NETWORK_ENV if name in os.environ})
        env.update({"LC_ALL": "C", "LANGUAGE": ""})
        settings = ((f"http.{auth.scope}.extraHeader", auth.header),) if auth is not None else ()
        env = hardened_git_environment(env, work_tree=cwd, settings=settings)
        env.update(extra or {})
        return env

    def _clean(self, text: str, auth: GitAuth | None) -> str:
        if auth is not None:
            text = Redactor(auth.secret_parts).text(text)
        return self._redact(text).strip()

    async def run(
        self,
        cwd: Path | None,
        *args: str,
        auth: GitAuth | None = None,
        env: Mapping[str, str] | None = None,
        input: str | None = None,
        check: bool = True,
    ) -> GitResult:
        """Run `git <args>` in `cwd` (`input` on its stdin).

        `cwd` is a workspace: git works on it with its git directory outside it
        (`git_dir_for`); None runs git outside any repository (clone, ls-remote).

        Raises `GitError` (or `TransientError` for network and 5xx trouble) when it fails
        and `check` is set.
        """
        what = f"git {_subcommand(args)}".rstrip()
        if auth is not None:
            auth = await auth.current()
        process = await asyncio.create_subprocess_exec(
            "git",
            *args,
            cwd=str(cwd) if cwd is not None else None,
            env=self._environment(cwd, auth, env),
            stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        try:
            data = input.encode() if input is not None else None
            out, err = await asyncio.wait_for(process.communicate(data), self._timeout)
        except TimeoutError:
            _kill(process)
            await process.wait()
            raise TransientError(f"{what} timed out after {self._timeout:g} seconds") from None
        except asyncio.CancelledError:
            _kill(process)
            raise
        stderr = self._clean(err.decode(errors="replace"), auth)
        result = GitResult(process.returncode or 0, out.decode(errors="replace"), stderr)
        if check and result.returncode != 0:
            raise self.failure(what, result)
        return result

    def failure(self, what: str, result: GitResult) -> AgentError:
        """The error for a failed command: transient for network and 5xx trouble."""
        detail = _last_lines(result.stderr)
        message = f"{what} failed (exit {result.returncode})" + (f": {detail}" if detail else "")
        lowered = result.stderr.lower()
        if any(marker in lowered for marker in _TRANSIENT_MARKERS):
            return TransientError(message)
        return GitError(message)


def _subcommand(args: tuple[str, ...]) -> str:
    """The git command `args` run (`fetch` in `-c k=v --git-dir=d fetch ...`), for messages."""
    after_c = False
    for arg in args:
        if after_c:
            after_c = False
        elif arg == "-c":
            after_c = True
        elif not arg.startswith("-"):
            return arg
    return ""


def _kill(process: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _last_lines(text: str, count: int = 4, limit: int = 600) -> str:
    """The end of git's stderr, where it says what went wrong (hints left out)."""
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("hint:")]
    return " / ".join(lines[-count:])[-limit:]

