"""The byte relay under the egress proxy: asyncio protocols, not streams.

A download through the proxy should cost about what it costs direct
(benchmarks/bench_egress.py: < 1.2x). Streams copy every chunk into a buffer and wake a
coroutine per chunk; protocols hand each received chunk straight to the other
transport, with backpressure (a full write buffer pauses reading on the other side).

`ClientSide` first collects the request head (up to a limit, within a deadline), then
pauses and hands it to the proxy's callback, which answers and closes, or links it to
an `UpstreamSide` it connected. Once linked, the download direction is spliced in the
kernel where it can be (`egress_splice.py`): no copy of the body through Python.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any

from coding_agent.tools.egress_request import head_end
from coding_agent.tools.egress_splice import DownloadSplice, splice_available

__all__ = ["Busy", "ClientSide", "UpstreamSide", "answer_bytes"]

_WRITE_BUFFER_HIGH = 1024 * 1024
_REASONS = {400: "Bad Request", 403: "Forbidden", 408: "Request Timeout", 411: "Length Required",
            431: "Request Header Fields Too Large", 502: "Bad Gateway", 503: "Service Unavailable"}  # fmt: skip


def answer_bytes(status: int, message: str) -> bytes:
    """A complete plain-text HTTP/1.1 response that closes the connection."""
    body = (message + "\n").encode()
    head = (
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


class Busy(asyncio.Protocol):
    """A connection over the proxy's limit: answered 503 and closed at once."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.write(answer_bytes(503, "coding-agent egress proxy: too many connections at once"))
        transport.close()


class _Side(asyncio.Protocol):
    """One end of a relay: what it receives goes to `peer`; backpressure both ways."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self._eof = False
        self.splice: DownloadSplice | None = None  # set on both sides while spliced

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.write(data)

    def eof_received(self) -> bool:
        """Pass the half-close on; close both once both directions are done."""
        self._eof = True
        peer = self.peer
        if peer is None or peer.transport is None or peer._eof:
            self.close()
            return False
        if peer.transport.can_write_eof():
            with contextlib.suppress(OSError, RuntimeError):
                peer.transport.write_eof()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        if self.splice is not None:
            self.splice.stop()  # before the transport closes the socket it watches
        self.transport = None
        if self.peer is not None:
            self.peer.close()

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None and self.peer.splice is None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        # A spliced upstream is read by the splice, never again by its transport.
        if self.peer is not None and self.peer.transport is not None and self.peer.splice is None:
            self.peer.transport.resume_reading()

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()


class UpstreamSide(_Side):
    """The connection to the origin server."""

    def spliced_eof(self) -> None:
        """The origin's EOF, seen by the splice (its transport no longer reads)."""
        self.eof_received()


HeadHandler = Callable[["ClientSide", bytes, bytes], Coroutine[Any, Any, None]]


class ClientSide(_Side):
    """The connection from the sandbox: reads the head, then relays."""

    def __init__(
        self, on_head: HeadHandler, limit: int, timeout: float, registry: set[ClientSide], initial: bytes = b""
    ) -> None:
        super().__init__()
        self._on_head = on_head
        self._limit = limit
        self._timeout = timeout
        self._registry = registry
        self._initial = initial
        self._buffer = bytearray()
        self._timer: asyncio.TimerHandle | None = None
        self._upload_left: int | None = None  # bytes still relayed to the origin; None: all
        self.task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """`initial`: what was read before this protocol took the connection over (the
        proxy's socket reads a first message to tell a handshake from HTTP); it is taken
        here, before the transport's first read, so nothing overtakes it."""
        super().connection_made(transport)
        self._registry.add(self)
        self._timer = asyncio.get_running_loop().call_later(self._timeout, self.answer, 408, "no request head in time")
        if self._initial:
            initial, self._initial = self._initial, b""
            self.data_received(initial)

    def data_received(self, data: bytes) -> None:
        if self.peer is not None or self.task is not None:
            self._upload(data)
            return
        searched = len(self._buffer)
        self._buffer += data
        end = head_end(self._buffer, searched)
        if end < 0:
            if len(self._buffer) > self._limit:
                self.answer(431, "request head too large")
            return
        assert self.transport is not None
        self.transport.pause_reading()
        if self._timer is not None:
            self._timer.cancel()
        head, rest = bytes(self._buffer[:end]), bytes(self._buffer[end:])
        self._buffer.clear()
        self.task = asyncio.get_running_loop().create_task(self._on_head(self, head, rest))

    def eof_received(self) -> bool:
        if self.peer is None:
            self._eof = True
            if self.task is None:  # EOF before a whole head: an empty probe, or garbage
                if self._buffer.strip():
                    self.answer(400, "incomplete request")
                else:
                    self.close()
            return True  # still answering (the task writes and closes)
        return super().eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self.task is not None and not self.task.done():
            self.task.cancel()
        self._registry.discard(self)
        super().connection_lost(exc)

    def answer(self, status: int, message: str) -> None:
        """Answer with a plain-text response and close."""
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(answer_bytes(status, message))
            self.transport.close()

    def link(
        self, upstream: UpstreamSide, to_client: bytes, to_upstream: bytes, following: bytes,
        upload_limit: int | None = None,
    ) -> None:  # fmt: skip
        """Start relaying: `to_client` (e.g. `200 Connection Established`) and `to_upstream`
        (the rewritten head) are written first, then `following` (what the client sent
        after its head).

        `upload_limit`: how many bytes of the client's (its request's body) the origin
        gets; what comes after them (a pipelined second request, never checked) is dropped.
        None: everything, for a CONNECT tunnel's opaque stream.
        """
        if self.transport is None or self.transport.is_closing() or upstream.transport is None:
            upstream.close()
            self.close()
            return
        self.peer, upstream.peer = upstream, self
        for transport in (self.transport, upstream.transport):
            # Fewer pause/resume round trips on large bodies than the 64 KiB default.
            transport.set_write_buffer_limits(high=_WRITE_BUFFER_HIGH)
        if to_client:
            self.transport.write(to_client)
        self._upload_left = upload_limit
        if to_upstream:
            upstream.transport.write(to_upstream)
        self._upload(following)
        if self._eof and upstream.transport.can_write_eof():
            upstream.transport.write_eof()  # the client half-closed while we connected
        self._splice_download(upstream)
        self.transport.resume_reading()

    def _upload(self, data: bytes) -> None:
        if self._upload_left is not None:
            data = data[: self._upload_left]
            self._upload_left -= len(data)
        if data:
            super().data_received(data)

    def _splice_download(self, upstream: UpstreamSide) -> None:
        """Hand origin -> client to the kernel, when nothing is queued in the client's transport."""
        assert self.transport is not None and upstream.transport is not None
        client, origin = self.transport.get_extra_info("socket"), upstream.transport.get_extra_info("socket")
        if not splice_available() or client is None or origin is None or self.transport.get_write_buffer_size():
            return
        try:
            splice = DownloadSplice(origin.fileno(), client.fileno(), upstream.spliced_eof, self.close)
        except OSError:  # no descriptor left for the pipe: the protocols relay it instead
            return
        upstream.transport.pause_reading()
        self.splice = upstream.splice = splice
