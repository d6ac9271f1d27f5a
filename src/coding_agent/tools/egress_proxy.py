"""The host-side egress proxy: the sandbox's only way out (SPEC 7.1).

The sandbox has a network namespace of its own with nothing but loopback
(`--unshare-net`); a Unix socket of this proxy is bound into it, and a forwarder
inside hands this proxy a socket listening on the sandbox's `127.0.0.1:3128` through
it (`egress_sandbox.py`, `egress_handoff.py`): the proxy accepts the sandbox's
connections itself, one hop between the command and the origin. (Where the sandbox
has no python3 for that, socat relays `127.0.0.1:3128` to the Unix socket, and the
proxy reads HTTP on it directly.) The proxy speaks plain HTTP forwarding (absolute-form
`GET http://host/...`) and `CONNECT host:443` for TLS, and checks every request against
the allow-list of the current phase (`setup` or `run`): once for the name the client
asked for, and again for the address it resolves to — it connects to that checked
address itself, so a name cannot resolve to something else between check and connect.

One request per connection (`Connection: close` both ways): a redirect the client
follows is a new request, checked again. The head is read strictly (`egress_request.py`:
no bare LF, folded or duplicate `Host` headers), the origin gets exactly one `Host`, the
checked URL's authority, and of what the client sends after its head only the body
(`Content-Length` bytes): a second request on the connection never reaches the origin.
Refusals answer 403 with the reason, are logged, and are kept (`refusals`) with the
command that tried, for the PR body.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal
from urllib.parse import urlsplit

from coding_agent.domain.egress_policy import (
    AllowList,
    EgressPolicyError,
    EgressVerdict,
    normalize_host,
    split_host_port,
)
from coding_agent.errors import AgentError
from coding_agent.tools.egress_handoff import ListenerHandoff
from coding_agent.tools.egress_relay import Busy, ClientSide, UpstreamSide
from coding_agent.tools.egress_request import MalformedRequest, RequestHead

__all__ = [
    "MAX_CLIENTS",
    "MAX_SOCKET_PATH",
    "EgressProxy",
    "EgressUnavailable",
    "Phase",
    "Refusal",
    "blocked_lines",
    "socket_directory",
]

logger = logging.getLogger(__name__)

Phase = Literal["setup", "run"]
Resolver = Callable[[str, int], Awaitable[list[str]]]

_HEAD_LIMIT = 65536
# sun_path holds 108 bytes on Linux, the terminating NUL among them.
MAX_SOCKET_PATH = 107
_SOCKET_NAME = "proxy.sock"
# Connections open at once (each download holds six descriptors in the agent process:
# two sockets, the splice's pipe and its two duplicates). Package managers open a
# dozen or so; a command opening thousands must not run the agent out of descriptors.
MAX_CLIENTS = 64
_HEAD_TIMEOUT_SECONDS = 30.0
_CONNECT_TIMEOUT_SECONDS = 15.0
# Hop-by-hop (RFC 9110 7.6.1) and proxy headers, and Host: never passed on as sent.
_HOP_HEADERS = frozenset(
    {"proxy-connection", "proxy-authorization", "connection", "keep-alive", "host", "te", "trailer", "upgrade"}
)


@dataclass(frozen=True)
class Refusal:
    """One refused request: what was asked, why not, in which phase, by which command."""

    host: str
    port: int
    reason: str
    phase: Phase
    command: str


def blocked_lines(refusals: Sequence[Refusal]) -> list[str]:
    """`blocked: host:port, by command` lines, one per distinct (host, port, command)."""
    seen: dict[tuple[str, int, str], None] = {}
    for refusal in refusals:
        seen.setdefault((refusal.host, refusal.port, refusal.command), None)
    lines = []
    for host, port, command in seen:
        # Both come from the sandbox: nothing in them may become markdown or a mention.
        safe_host = re.sub(r"[^A-Za-z0-9.:_*\[\]-]", "?", host)
        shown = re.sub(r"[`\x00-\x1f]", "'", command)
        shown = shown if len(shown) <= 120 else shown[:117] + "..."
        lines.append(f"blocked: {safe_host}:{port}, by `{shown}`")
    return lines


async def _resolve(host: str, port: int) -> list[str]:
    """The addresses of `host`; an IP literal is its own (getaddrinfo would only echo it,
    after a hop through the executor's thread on every request)."""
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


class EgressUnavailable(AgentError):
    """The proxy's socket cannot be made: the run ends saying so, in one line naming the path."""


_DIRECTORY_PREFIX = "ca-egress-"
_DIRECTORY_NAME = re.compile(rf"{_DIRECTORY_PREFIX}(\d+)-[^/]+")
_swept: set[str] = set()


def socket_directory() -> Path:
    """A new private directory (0700) where a Unix socket can listen, whatever the
    temp directory's depth.

    A Unix socket's path has at most `MAX_SOCKET_PATH` bytes, which a `TMPDIR` a few
    dozen characters deep (a test run's, a container's) already passes. So the temp
    directory is used when the path fits in it, else `$XDG_RUNTIME_DIR` (the user's own),
    else `/tmp`. (Not an abstract socket: it is bound into the sandbox as a file, and an
    abstract one is not reachable from the sandbox's network namespace.)

    The directory's name carries this process's id: a process killed with its proxy open
    (SIGKILL, the OOM killer) cannot remove its directory, so the first directory a
    process makes in a place sweeps the ones left there by dead processes
    (`_sweep_dead`) instead of letting them pile up over a worker's restarts.
    """
    prefix = f"{_DIRECTORY_PREFIX}{os.getpid()}-"
    tried: list[str] = []
    for base in dict.fromkeys(filter(None, (tempfile.gettempdir(), os.environ.get("XDG_RUNTIME_DIR"), "/tmp"))):
        # mkdtemp appends 8 characters to the prefix
        example = os.path.join(base, prefix + "x" * 8, _SOCKET_NAME)
        if not _fits(example):
            tried.append(f"{base} is too deep")
            continue
        try:
            directory = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
        except OSError as error:
            tried.append(f"{base}: {error.strerror or error}")
            continue
        if base not in _swept:
            _swept.add(base)
            _sweep_dead(Path(base))
        return directory
    raise EgressUnavailable(
        f"the egress proxy's socket cannot be made: no directory for a path of at most {MAX_SOCKET_PATH} bytes "
        f"({'; '.join(tried)})"
    )


def _sweep_dead(base: Path) -> None:
    """Remove the socket directories in `base` that a dead process of this user left.

    A directory is left alone unless all of these hold: it is named after a process id,
    it is this user's, no process of that id lives, and nothing listens on its socket.
    The last check keeps a live proxy's directory whose process this one cannot see (a
    temp directory shared with another pid namespace)."""
    try:
        entries = list(os.scandir(base))
    except OSError:
        return
    for entry in entries:
        named = _DIRECTORY_NAME.fullmatch(entry.name)
        pid = int(named[1]) if named is not None else None
        if pid is None or pid == os.getpid():
            continue
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.stat(follow_symlinks=False).st_uid != os.geteuid():
                continue
        except OSError:
            continue
        if _process_lives(pid) or _listened_on(Path(entry.path) / _SOCKET_NAME):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)


def _process_lives(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):  # someone else's process (EPERM), or no process id at all: left alone
        return True
    return True


def _listened_on(path: Path) -> bool:
    """Whether something accepts connections on the Unix socket at `path` (a connection
    made is closed at once: the proxy takes that as a client gone before its request)."""
    if not _fits(path):
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except OSError:  # no such file, refused: nobody listens
            return False
    return True


def _fits(path: str | Path) -> bool:
    """Whether a Unix socket can have `path` (at most `MAX_SOCKET_PATH` bytes)."""
    return len(os.fsencode(path)) <= MAX_SOCKET_PATH


def _check_length(path: Path) -> None:
    if not _fits(path):
        raise EgressUnavailable(
            f"the egress proxy cannot listen on {path}: a Unix socket's path has at most {MAX_SOCKET_PATH} bytes"
        )


class _Refused(Exception):
    def __init__(self, status: int, host: str, port: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.host, self.port, self.reason = status, host, port, reason


class EgressProxy:
    """One run's proxy on its own Unix socket. `async with EgressProxy(...) as proxy:`.

    `phase` switches the allow-list; `command` names what is running now (set by the
    caller around each setup command and each `run` tool call).
    """

    def __init__(
        self,
        setup_hosts: Sequence[str],
        run_hosts: Sequence[str],
        socket_dir: Path | None = None,
        resolver: Resolver = _resolve,
    ) -> None:
        self._lists: dict[Phase, AllowList] = {
            "setup": AllowList(list(setup_hosts), "security.egress.setup_hosts"),
            "run": AllowList(list(run_hosts), "security.egress.run_hosts"),
        }
        self._socket_dir = socket_dir
        self._own_dir: Path | None = None
        self._resolver = resolver
        self._handoff: ListenerHandoff | None = None
        self._clients: set[ClientSide] = set()
        self._busy_logged = False
        self.phase: Phase = "setup"
        self.command = "setup"
        self.refusals: list[Refusal] = []
        self.socket_path = Path()

    async def __aenter__(self) -> EgressProxy:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def start(self) -> Path:
        """Listen on a fresh socket in a private directory (0700); return the socket's path.

        Raises `EgressUnavailable` (one line, naming the path) when no socket can be made.
        """
        if self._socket_dir is None:
            self._own_dir = socket_directory()
            directory = self._own_dir
        else:
            directory = self._socket_dir
        self.socket_path = directory / _SOCKET_NAME
        handoff = ListenerHandoff(self._protocol)
        try:
            _check_length(self.socket_path)
            handoff.start(self.socket_path)
        except (OSError, EgressUnavailable) as error:
            await self.close()
            if isinstance(error, EgressUnavailable):
                raise
            raise EgressUnavailable(f"the egress proxy cannot listen on {self.socket_path}: {error}") from None
        self._handoff = handoff
        return self.socket_path

    @property
    def clients(self) -> int:
        """Client connections open now (at most about `MAX_CLIENTS`: one accept burst
        of the event loop may go over it before the first of them is counted)."""
        return len(self._clients)

    @property
    def leases(self) -> int:
        """How many sandboxes' listening sockets this proxy accepts on now."""
        return self._handoff.leases if self._handoff is not None else 0

    async def close(self) -> None:
        if self._handoff is not None:
            await self._handoff.close()
            clients = list(self._clients)
            for client in clients:
                client.close()
            tasks = [client.task for client in clients if client.task is not None]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._handoff = None
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        if self._own_dir is not None:
            shutil.rmtree(self._own_dir, ignore_errors=True)
            self._own_dir = None

    def _protocol(self, initial: bytes = b"") -> ClientSide | Busy:
        if len(self._clients) >= MAX_CLIENTS:
            if not self._busy_logged:
                self._busy_logged = True
                logger.warning("egress proxy: %d connections at once; further ones are answered 503", MAX_CLIENTS)
            return Busy()
        return ClientSide(self._on_head, _HEAD_LIMIT, _HEAD_TIMEOUT_SECONDS, self._clients, initial)

    async def _on_head(self, client: ClientSide, head: bytes, rest: bytes) -> None:
        """Decide on one request head; answer it, or connect and start relaying."""
        try:
            await self._serve(client, head, rest)
        except _Refused as refused:
            self._record(refused)
            client.answer(refused.status, f"coding-agent egress proxy refused the request: {refused.reason}")
        except Exception:
            logger.exception("egress proxy: a connection failed")
            client.answer(502, "coding-agent egress proxy: internal error")

    async def _serve(self, client: ClientSide, head: bytes, rest: bytes) -> None:
        try:
            request = RequestHead.parse(head)
        except MalformedRequest as malformed:
            logger.warning("egress proxy (%s): a malformed request from %r: %s",
                           self.phase, self.command[:200], malformed.reason)  # fmt: skip
            client.answer(malformed.status, f"coding-agent egress proxy: {malformed.reason}")
            return
        if request.method.upper() == "CONNECT":
            host, port = self._target(request.target, None)
            upstream = await self._open(host, port)
            client.link(upstream, b"HTTP/1.1 200 Connection Established\r\n\r\n", b"", rest)
        else:
            host, port, path = self._absolute(request.target)
            upstream = await self._open(host, port)
            authority = host if port == 80 else f"{host}:{port}"
            authority = f"[{host}]:{port}" if ":" in host else authority
            client.link(upstream, b"", _rewrite(request, path, authority), rest, upload_limit=request.body_length)

    def _target(self, authority: str, default_port: int | None) -> tuple[str, int]:
        try:
            host, port = split_host_port(authority, default_port)
            if port is None:
                raise EgressPolicyError(f"no port in {authority[:80]!r}")
            return normalize_host(host), port
        except EgressPolicyError as error:
            raise _Refused(400, authority[:80] or "(empty)", 0, str(error)) from None

    def _absolute(self, target: str) -> tuple[str, int, str]:
        try:
            url = urlsplit(target)
        except ValueError:
            raise _Refused(400, target[:80], 0, "malformed URL") from None
        if url.scheme.lower() != "http":
            raise _Refused(400, target[:80], 0, "only http:// URLs are forwarded (use CONNECT for https)")
        if "@" in url.netloc:
            raise _Refused(400, target[:80], 0, "user info in the URL is not allowed")
        host, port = self._target(url.netloc, 80)
        path = url.path or "/"
        return host, port, path + (f"?{url.query}" if url.query else "")

    async def _open(self, host: str, port: int) -> UpstreamSide:
        allow = self._lists[self.phase]
        decision = allow.check(host, port)
        if not decision.allowed:
            raise _Refused(403, host, port, decision.reason)
        try:
            addresses = await asyncio.wait_for(self._resolver(host, port), _CONNECT_TIMEOUT_SECONDS)
        except (OSError, TimeoutError):
            raise _Refused(502, host, port, f"{host} does not resolve") from None
        checked: list[str] = []
        for text in addresses:
            verdict: EgressVerdict = allow.check_resolved(decision, ipaddress.ip_address(text.split("%")[0]), host, port)
            if not verdict.allowed:
                raise _Refused(403, host, port, verdict.reason)
            checked.append(text)
        last: Exception | None = None
        for address in checked:
            try:
                loop = asyncio.get_running_loop()
                _, upstream = await asyncio.wait_for(
                    loop.create_connection(UpstreamSide, address, port), _CONNECT_TIMEOUT_SECONDS
                )
                return upstream
            except (OSError, TimeoutError) as error:
                last = error
        cause = last.__class__.__name__ if last else "no address"
        raise _Refused(502, host, port, f"cannot connect to {host}:{port} ({cause})")

    def _record(self, refused: _Refused) -> None:
        refusal = Refusal(refused.host, refused.port, refused.reason, self.phase, self.command)
        self.refusals.append(refusal)
        logger.warning(
            "egress proxy (%s) refused %s:%s for %r: %s",
            self.phase, refused.host, refused.port, self.command[:200], refused.reason,
        )  # fmt: skip


def _rewrite(request: RequestHead, path: str, authority: str) -> bytes:
    """The request head for the origin: origin-form path, no proxy or hop-by-hop headers.

    `Host` is the checked URL's authority, whatever the client sent: on a shared front
    (a CDN) another Host header would reach a site the allow-list does not name. And
    `Connection: close`: the proxy relays one request per connection, so the origin must
    not wait for a second.
    """
    named = {token.strip().lower() for value in request.values("connection") for token in value.split(",")}
    dropped = _HOP_HEADERS | named
    kept = [f"{name}: {value}" for name, value in request.headers if name.lower() not in dropped]
    head = [f"{request.method} {path} {request.version}", f"Host: {authority}", *kept, "Connection: close"]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
