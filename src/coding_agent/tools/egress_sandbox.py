"""What the bwrap sandbox needs to reach the egress proxy: one bind, a forwarder, proxy env.

The sandbox keeps `--unshare-net` (only its own loopback). The proxy's Unix socket is
bound read-only at `SANDBOX_SOCKET`, `HTTP(S)_PROXY` point at `127.0.0.1:PROXY_PORT`,
and the command runs behind a forwarder that makes that port reach the proxy:

- python3 (`FORWARDER_SCRIPT`, the default): it listens on `127.0.0.1:PROXY_PORT` in
  the sandbox's namespace, hands that listening socket to the proxy over the Unix
  socket (`egress_handoff.py`) and execs the command, without waiting for an answer
  (connections wait in the socket's backlog until the proxy accepts them).
  Nothing of it stays running: the proxy accepts the sandbox's connections itself, so
  a download crosses one relay (the proxy) instead of two (socat, then the proxy;
  benchmarks/bench_egress.py). Its end of the handoff stays open in the command
  (`LEASE_FD`) and closes with the sandbox, which tells the proxy to let go of the
  socket. Started as `python3 -I -S` with only built-in modules (`_socket`, `posix`):
  no site, no workspace file on its path. Its start costs a few ms more than socat's
  (interpreter start, ~6 ms of CPU against ~3; benchmarks/bench_sandbox_run.py
  --egress), once per command; every download through it saves a relay.
- socat, where no python3 the sandbox can run is found: it listens on the port and
  relays each connection to the Unix socket (one more hop), started before the command
  as it always was.

The forwarder starts for every command, also when the allow-list is empty: without it
a request would fail inside the sandbox unseen, while SPEC 7.1 wants each refusal
listed in the PR body with the command that tried. Additive to `sandbox.sandbox_argv`:
extra binds (after the private /tmp, which holds the mount point), extra env, and the
command's argv (`command_argv`).
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from coding_agent.domain.egress_policy import parse_entry
from coding_agent.tools.bwrap import SYSTEM_DIRECTORIES
from coding_agent.tools.egress_handoff import HANDSHAKE, LEASE_FD

__all__ = [
    "EGRESS_NO_PROXY_ENV",
    "EGRESS_SOCKET_ENV",
    "FORWARDER_SCRIPT",
    "EgressSandbox",
    "PROXY_PORT",
    "SANDBOX_SOCKET",
    "forwarder_argv",
    "forwarder_problem",
    "no_proxy_value",
    "python_path",
    "socat_argv",
    "socat_path",
]

SANDBOX_SOCKET = "/tmp/.coding-agent-egress.sock"
PROXY_PORT = 3128
# How the host tells the workspace MCP server where the proxy is (never a secret).
EGRESS_SOCKET_ENV = "CODING_AGENT_EGRESS_SOCKET"
EGRESS_NO_PROXY_ENV = "CODING_AGENT_EGRESS_NO_PROXY"
_LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")
_SYSTEM_BIN = "/usr/bin:/bin:/usr/local/bin"

Forwarder = Literal["auto", "python", "socat"]

# argv: [-c, proxy socket, port, program, args...]. Whatever fails, the command still
# runs (without network, and told so on stderr): the forwarder must never be the
# reason a command did not run. Only built-in modules: `import socket` alone would
# double the start (enum, selectors).
FORWARDER_SCRIPT = f"""\
import _socket as s, posix, sys
a = sys.argv
try:
    l = s.socket(s.AF_INET, s.SOCK_STREAM)
    l.setsockopt(s.SOL_SOCKET, s.SO_REUSEADDR, 1)
    l.bind(("127.0.0.1", int(a[2])))
    l.listen(4096)
    c = s.socket(s.AF_UNIX, s.SOCK_STREAM)
    c.settimeout(30)
    c.connect(a[1])
    c.sendmsg([{HANDSHAKE!r}], [(s.SOL_SOCKET, s.SCM_RIGHTS, l.fileno().to_bytes(4, sys.byteorder))])
    posix.dup2(c.fileno(), {LEASE_FD})
except (OSError, ValueError) as e:
    sys.stderr.write("coding-agent: no network proxy in this sandbox (%s)\\n" % (e,))
posix.execv(a[3], a[3:])
"""


def socat_path() -> str | None:
    """socat under /usr or /bin: the directories every sandbox has, read-only."""
    return shutil.which("socat", path=_SYSTEM_BIN)


@functools.lru_cache(maxsize=1)
def python_path() -> str | None:
    """A python3 the sandbox can run: it and its standard library under the system
    directories bound into every sandbox (not a pyenv or uv interpreter under /root)."""
    found = shutil.which("python3", path=_SYSTEM_BIN)
    if found is None:
        return None
    real = Path(os.path.realpath(found))
    if not any(real.is_relative_to(directory) for directory in SYSTEM_DIRECTORIES):
        return None
    return found if any(real.parent.parent.glob("lib/python3*/os.py")) else None


def forwarder_problem() -> str | None:
    """Why no sandbox can reach the egress proxy here, or None when one can."""
    if python_path() is None and socat_path() is None:
        return (
            "neither python3 (with its standard library under /usr) nor socat was found under "
            "/usr/bin or /bin; the sandbox cannot reach the egress proxy (install python3 or socat)"
        )
    return None


def forwarder_argv(python: str, socket_path: str, port: int, program: Sequence[str]) -> list[str]:
    """The python3 forwarder: hand `127.0.0.1:port` to the proxy at `socket_path`, then
    exec `program`. What runs inside the sandbox (`command_argv`), and what
    benchmarks/bench_egress.py runs on the host: one definition, so the figure is the
    sandbox's."""
    return [python, "-I", "-S", "-c", FORWARDER_SCRIPT, socket_path, str(port), *program]


def socat_argv(port: int, socket_path: str, socat: str = "socat", log: bool = False) -> list[str]:
    """socat listening on 127.0.0.1:`port`, one child per connection, each to `socket_path`.

    `log`: notices on stderr (`-d -d`), among them "listening on" once it is ready.
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
    forwarder: Forwarder = "auto"  # "socat": the fallback, chosen on purpose (tests)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> EgressSandbox | None:
        """The binding the host passed to the workspace server, if any: in this process's
        environment (the stdio server), or in `environ` (the in-process server's)."""
        environ = os.environ if environ is None else environ
        path = environ.get(EGRESS_SOCKET_ENV, "")
        if not path:
            return None
        return cls(Path(path), environ.get(EGRESS_NO_PROXY_ENV, "localhost,127.0.0.1,::1"))

    def server_env(self) -> dict[str, str]:
        """The variables that pass this binding to the workspace server."""
        return {EGRESS_SOCKET_ENV: str(self.socket_path), EGRESS_NO_PROXY_ENV: self.no_proxy}

    def chosen(self) -> tuple[Literal["python", "socat"], str] | None:
        """The forwarder this sandbox gets and its path: python3 unless `forwarder` says
        socat or there is none; socat where it exists; None where neither does."""
        python, socat = python_path(), socat_path()
        if python is not None and self.forwarder != "socat":
            return "python", python
        if socat is not None and self.forwarder != "python":
            return "socat", socat
        return None

    @property
    def available(self) -> bool:
        """Whether a forwarder exists; without one a command would only wait for nothing."""
        return self.chosen() is not None

    def binds(self) -> list[tuple[str, str]]:
        """(host path, sandbox path), read-only: the proxy socket, under the private /tmp.

        (`connect` on a socket needs no write access to its mount.) With `env()` and
        `command_argv`, what `sandbox.sandbox_argv` adds to the bwrap sandbox.
        """
        return [(str(self.socket_path), SANDBOX_SOCKET)]

    def env(self) -> dict[str, str]:
        proxy = f"http://127.0.0.1:{PROXY_PORT}"
        names = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
        return {**{name: proxy for name in names}, "NO_PROXY": self.no_proxy, "no_proxy": self.no_proxy}

    def command_argv(self, shell: str, command: str) -> list[str]:
        """What the sandbox runs for `command`: `shell -c command` behind the forwarder.

        `command` runs in a shell of its own either way, so its syntax and exit code are
        what they would be unwrapped.
        """
        chosen = self.chosen()
        if chosen is None:
            return [shell, "-c", command]
        kind, path = chosen
        if kind == "python":
            return forwarder_argv(path, SANDBOX_SOCKET, PROXY_PORT, [shell, "-c", command])
        return [shell, "-c", _socat_script(path, shell, command)]


def _socat_script(socat: str, shell: str, command: str) -> str:
    """A shell script that starts socat, then `command`.

    Under bash the script waits for socat's own "listening on" notice through a pipe: a
    blocking read, ready the moment socat listens (~10 ms), with no probe processes or
    sleeps. SIGPIPE is ignored in socat, so its later notices, written to the closed
    pipe, cost nothing. If socat cannot listen, the read ends at its exit and the
    command's requests fail, which it reports itself. POSIX sh polls with socat (at
    most ~2 s).
    """
    if shell.endswith("bash"):
        logged = shlex.join(socat_argv(PROXY_PORT, SANDBOX_SOCKET, socat, log=True))
        return (
            f"exec 3< <(trap '' PIPE; exec {logged} 2>&1 >/dev/null </dev/null)\n"
            "while IFS= read -r _l <&3; do case $_l in *' listening on '*) break;; esac; done\n"
            f"exec 3<&-\nexec {shell} -c {shlex.quote(command)}\n"
        )
    forwarder = shlex.join(socat_argv(PROXY_PORT, SANDBOX_SOCKET, socat))
    return (
        f"{forwarder} </dev/null >/dev/null 2>&1 &\n"
        f"_i=0; until {shlex.quote(socat)} -u OPEN:/dev/null TCP:127.0.0.1:{PROXY_PORT} 2>/dev/null "
        "|| [ $_i -ge 200 ]; "
        "do _i=$((_i+1)); sleep 0.01; done\n"
        f"exec {shell} -c {shlex.quote(command)}\n"
    )
