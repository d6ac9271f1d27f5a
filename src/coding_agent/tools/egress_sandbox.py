"""What the bwrap sandbox needs to reach the egress proxy: one bind, a forwarder, proxy env.

The sandbox keeps `--unshare-net` (only its own loopback). The proxy's Unix socket is
bound read-only at `SANDBOX_SOCKET`; the command is wrapped so that `socat` first
listens on `127.0.0.1:PROXY_PORT` inside and forwards every connection to that socket,
and `HTTP(S)_PROXY` point there. The forwarder dies with the sandbox (its PID
namespace ends with the command). Additive to `sandbox.sandbox_argv`: extra arguments
(after the private /tmp, which holds the mount point), extra env, a wrapped command.

The forwarder starts for every command, also when the allow-list is empty: without it
a request would fail inside the sandbox unseen, while SPEC 7.1 wants each refusal
listed in the PR body with the command that tried. Its cost is socat's start (about
10 ms; benchmarks/bench_sandbox_run.py --egress), awaited by a blocking read.
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from coding_agent.domain.egress_policy import parse_entry

__all__ = [
    "EGRESS_NO_PROXY_ENV",
    "EGRESS_SOCKET_ENV",
    "EgressSandbox",
    "PROXY_PORT",
    "SANDBOX_SOCKET",
    "forwarder_argv",
    "no_proxy_value",
    "socat_path",
]

SANDBOX_SOCKET = "/tmp/.coding-agent-egress.sock"
PROXY_PORT = 3128
# How the host tells the workspace MCP server where the proxy is (never a secret).
EGRESS_SOCKET_ENV = "CODING_AGENT_EGRESS_SOCKET"
EGRESS_NO_PROXY_ENV = "CODING_AGENT_EGRESS_NO_PROXY"
_LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")


def socat_path() -> str | None:
    """socat under /usr or /bin: the directories every sandbox has, read-only."""
    return shutil.which("socat", path="/usr/bin:/bin:/usr/local/bin")


def forwarder_argv(port: int, socket_path: str, socat: str = "socat", log: bool = False) -> list[str]:
    """socat listening on 127.0.0.1:`port`, one child per connection, each to `socket_path`.

    `log`: notices on stderr (`-d -d`), among them "listening on" once it is ready.

    What runs inside the sandbox (`wrap_command`), and what benchmarks/bench_egress.py
    measures on the host: one definition, so the figure is the sandbox's.
    """
    listen = f"TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr"
    # -b: socat copies 8 KiB at a time by default; 256 KiB keeps large downloads faster.
    return [socat, "-b", "262144", *(["-d", "-d"] if log else []), listen, f"UNIX-CONNECT:{socket_path}"]


def no_proxy_value(hosts: Iterable[str]) -> str:
    """NO_PROXY for the sandbox: its own loopback, except loopback hosts an entry lists.

    A server a test starts inside the sandbox is reached directly; but when the operator
    lists `127.0.0.1:8080` (a local package index on the host), requests to 127.0.0.1
    must go through the proxy to reach the host's loopback instead of the sandbox's.
    """
    listed = {parse_entry(entry).host for entry in hosts}
    return ",".join(name for name in _LOCAL_NAMES if name not in listed)


@dataclass(frozen=True)
class EgressSandbox:
    """The proxy's socket on the host and the NO_PROXY list for commands that may use it."""

    socket_path: Path
    no_proxy: str = "localhost,127.0.0.1,::1"

    @classmethod
    def from_environment(cls) -> EgressSandbox | None:
        """The binding the host passed to this (workspace server) process, if any."""
        path = os.environ.get(EGRESS_SOCKET_ENV, "")
        if not path:
            return None
        return cls(Path(path), os.environ.get(EGRESS_NO_PROXY_ENV, "localhost,127.0.0.1,::1"))

    def server_env(self) -> dict[str, str]:
        """The variables that pass this binding to the workspace server."""
        return {EGRESS_SOCKET_ENV: str(self.socket_path), EGRESS_NO_PROXY_ENV: self.no_proxy}

    @property
    def available(self) -> bool:
        """Whether the forwarder exists; without it a command would only wait for nothing."""
        return socat_path() is not None

    def binds(self) -> list[tuple[str, str]]:
        """(host path, sandbox path), read-only: the proxy socket, under the private /tmp.

        (`connect` on a socket needs no write access to its mount.) With `env()` and
        `wrap_command`, what `sandbox.run_command` adds to the bwrap sandbox.
        """
        return [(str(self.socket_path), SANDBOX_SOCKET)]

    def env(self) -> dict[str, str]:
        proxy = f"http://127.0.0.1:{PROXY_PORT}"
        names = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
        return {**{name: proxy for name in names}, "NO_PROXY": self.no_proxy, "no_proxy": self.no_proxy}

    def wrap_command(self, command: str) -> str:
        """A shell script (for the sandbox's `sh -c`) that starts the forwarder, then `command`.

        Under bash (the sandbox's shell when /bin/bash exists) the script waits for
        socat's own "listening on" notice through a pipe: a blocking read, ready the
        moment socat listens (mostly socat's own start, ~10 ms), with no probe processes
        or sleeps. SIGPIPE is ignored in socat, so its later notices, written to the
        closed pipe, cost nothing. If socat cannot listen, the read ends at its exit and
        the command's requests fail, which it reports itself. POSIX sh polls with socat
        (at most ~2 s). `command` runs in a shell of its own (`exec`), so its syntax and
        exit code are what they would be unwrapped.
        """
        socat = shlex.quote(socat_path() or "socat")
        forwarder = shlex.join(forwarder_argv(PROXY_PORT, SANDBOX_SOCKET, socat_path() or "socat"))
        if os.path.exists("/bin/bash"):
            logged = shlex.join(forwarder_argv(PROXY_PORT, SANDBOX_SOCKET, socat_path() or "socat", log=True))
            return (
                f"exec 3< <(trap '' PIPE; exec {logged} 2>&1 >/dev/null </dev/null)\n"
                "while IFS= read -r _l <&3; do case $_l in *' listening on '*) break;; esac; done\n"
                f"exec 3<&-\nexec /bin/bash -c {shlex.quote(command)}\n"
            )
        return (
            f"{forwarder} </dev/null >/dev/null 2>&1 &\n"
            f"_i=0; until {socat} -u OPEN:/dev/null TCP:127.0.0.1:{PROXY_PORT} 2>/dev/null || [ $_i -ge 200 ]; "
            "do _i=$((_i+1)); sleep 0.01; done\n"
            f"exec /bin/sh -c {shlex.quote(command)}\n"
        )
