"""The proxy's Unix socket, where a sandbox hands over its listening port (SPEC 7.1).

Relaying every byte through a forwarder process inside the sandbox (socat: TCP in,
Unix socket out) costs a second relay on every download (benchmarks/bench_egress.py:
socat then the proxy measured 1.4-1.7x of a direct download). Instead the forwarder (`egress_sandbox.py`) creates
the listening socket `127.0.0.1:3128` in the sandbox's own network namespace, sends
its descriptor here (SCM_RIGHTS) with `HANDSHAKE`, and execs the command. The proxy
then accepts the sandbox's connections on that socket itself: a socket keeps the
namespace it was made in, so the data path is client -> proxy -> origin, one hop, and
downloads are spliced in the kernel as before.

There is no answer to wait for: the socket listens before it is sent, so a connection
the command makes before the proxy has taken it waits in its backlog, and the command
never waits for the agent's event loop to come round (on a busy machine, milliseconds
on every `run`). A handoff the proxy refuses (it never refuses the forwarder's, short
of the caps below) leaves nobody accepting once the forwarder has exec'd: the
command's connections are refused, and the proxy logs why.

The handed-over socket is leased for as long as the forwarder's Unix connection
stays open: the forwarder leaves it open in the command (`LEASE_FD`), so it closes
when the sandbox ends (its PID namespace dies with the command, and every process in
it). EOF, or anything at all written on it, ends the lease: the proxy closes the
listening socket, and with it the last reference that kept the sandbox's network
namespace alive.

Anything in the sandbox can connect to this socket, so everything on it is hostile
until checked: a first message that is not exactly `HANDSHAKE` with exactly one
descriptor that is a listening TCP socket is refused, every descriptor received is
closed unless it becomes a lease (received close-on-exec, so no child inherits one in
between), and the number of connections waiting or leased is capped (`MAX_PENDING`,
`MAX_LEASES`) so a sandbox cannot run the agent process out of descriptors through
it. A first message that carries no descriptor and is not the handshake is HTTP from
a socat forwarder (the fallback where the sandbox has no usable python3): it is
handed to the proxy's HTTP protocol with what was already read.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import cast

__all__ = ["HANDSHAKE", "LEASE_FD", "MAX_LEASES", "MAX_PENDING", "ListenerHandoff", "ProtocolFactory"]

logger = logging.getLogger(__name__)

HANDSHAKE = b"coding-agent egress listener v1\n"
# Where the forwarder keeps its end of the lease in the command: high enough that no
# shell script's own `exec 3>...` or `{fd}>` redirections (10 and up, allocated
# upwards) closes it by accident.
LEASE_FD = 63
MAX_PENDING = 64
MAX_LEASES = 16
_FIRST_MESSAGE_SECONDS = 30.0
_READ = 65536
# Room for two descriptors: a second one is how a message with too many is told apart.
_ANCILLARY = socket.CMSG_SPACE(2 * array.array("i").itemsize)

ProtocolFactory = Callable[[bytes], asyncio.Protocol]


def _received_fds(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    fds = array.array("i")
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    return list(fds)


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _listening_tcp_socket(fd: int) -> socket.socket | None:
    """`fd` as a socket if it is a listening TCP socket; else None, and `fd` closed."""
    try:
        candidate = socket.socket(fileno=fd)  # reads the family and type from the descriptor
    except Exception:  # not a socket at all (a file, a pipe, an eventfd), or not one Python reads
        _close_all([fd])
        return None
    try:
        listening = candidate.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1
        if listening and candidate.family in (socket.AF_INET, socket.AF_INET6) and candidate.type == socket.SOCK_STREAM:
            return candidate
    except Exception:
        pass
    candidate.close()
    return None


async def _readable(sock: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    ready = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(sock.fileno(), wake)
    try:
        await ready
    finally:
        loop.remove_reader(sock.fileno())


class ListenerHandoff:
    """The proxy's Unix socket: takes sandboxes' listening sockets, and socat's HTTP.

    `protocol_factory(initial)` makes the proxy's protocol for one client connection,
    with the bytes already read from it (empty for connections on a leased listener).
    """

    def __init__(self, protocol_factory: ProtocolFactory) -> None:
        self._factory = protocol_factory
        self._socket: socket.socket | None = None
        self._acceptor: asyncio.Task[None] | None = None
        self._pending: set[asyncio.Task[None]] = set()
        self._leases: dict[asyncio.Task[None], asyncio.Server | None] = {}
        self.refused = 0  # connections closed for not being what they should (tests, logs)

    @property
    def leases(self) -> int:
        """Listening sockets of live sandboxes this proxy accepts on."""
        return sum(1 for server in self._leases.values() if server is not None)

    def start(self, path: Path) -> None:
        """Listen on `path` (mode 0600: anyone in the sandbox connects as the agent's user)."""
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(str(path))
            os.chmod(path, 0o600)
            listener.listen(MAX_PENDING)
            listener.setblocking(False)
        except BaseException:
            listener.close()
            raise
        self._socket = listener
        self._acceptor = asyncio.get_running_loop().create_task(self._accept_forever(listener))

    async def close(self) -> None:
        """Stop accepting; close every waiting connection and every leased listener."""
        tasks = [task for task in (self._acceptor, *self._pending, *self._leases) if task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._acceptor = None
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    async def _accept_forever(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                connection, _ = await loop.sock_accept(listener)
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                continue
            except OSError as error:  # EMFILE and the like: let descriptors free up, then go on
                logger.warning("egress proxy: cannot accept on its socket (%s); retrying in 1 s", error)
                await asyncio.sleep(1.0)
                continue
            if len(self._pending) + len(self._leases) >= MAX_PENDING:
                self.refused += 1
                connection.close()
                continue
            task = loop.create_task(self._first_message(connection))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

    async def _first_message(self, connection: socket.socket) -> None:
        """Read the first message: a handshake becomes a lease, HTTP goes to the proxy."""
        connection.setblocking(False)
        handed_on = False
        fds: list[int] = []
        try:
            async with asyncio.timeout(_FIRST_MESSAGE_SECONDS):
                while True:
                    await _readable(connection)
                    try:
                        data, ancillary, flags, _ = connection.recvmsg(_READ, _ANCILLARY, socket.MSG_CMSG_CLOEXEC)
                        break
                    except (BlockingIOError, InterruptedError):
                        continue
            fds = _received_fds(ancillary)
            if fds or data == HANDSHAKE:
                if data != HANDSHAKE or len(fds) != 1 or flags & socket.MSG_CTRUNC:
                    self._refuse(f"{len(fds)} descriptor(s) with a message of {len(data)} bytes")
                    return
                listener = _listening_tcp_socket(fds.pop())
                if listener is None:
                    self._refuse("the descriptor is not a listening TCP socket")
                    return
                handed_on = True
                self._start_lease(connection, listener)
            elif data:
                await asyncio.get_running_loop().connect_accepted_socket(lambda: self._factory(data), connection)
                handed_on = True
        except (OSError, TimeoutError, ValueError):
            pass  # the peer went away, never spoke, or sent what cannot be read
        finally:
            _close_all(fds)
            if not handed_on:
                connection.close()

    def _refuse(self, what: str) -> None:
        self.refused += 1
        logger.warning("egress proxy: refused a connection on its socket: %s", what)

    def _start_lease(self, connection: socket.socket, listener: socket.socket) -> None:
        if self.leases >= MAX_LEASES:
            listener.close()
            connection.close()
            self._refuse(f"more than {MAX_LEASES} sandboxes at once")
            return
        task = asyncio.get_running_loop().create_task(self._lease(connection, listener))
        self._leases[task] = None
        task.add_done_callback(self._leases.pop)

    async def _lease(self, connection: socket.socket, listener: socket.socket) -> None:
        """Serve the sandbox's listener until its lease connection ends (or says anything)."""
        server: asyncio.Server | None = None
        try:
            try:
                server = await asyncio.get_running_loop().create_server(lambda: self._factory(b""), sock=listener)
            except BaseException:
                listener.close()
                raise
            self._leases[cast("asyncio.Task[None]", asyncio.current_task())] = server  # this coroutine runs as a task
            await _readable(connection)  # EOF when the sandbox ends; any data ends it too
        except OSError:
            pass
        finally:
            if server is not None:
                server.close()  # closes the listening socket: the namespace can go
            connection.close()
