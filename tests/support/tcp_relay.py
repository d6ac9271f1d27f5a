"""A loopback TCP relay that a test can cut: a broker's or a database's connection lost
mid-run, the way a restart or a network blip loses it, while the service stays up.

The relay runs its own event loop in a thread, so a test can cut from anywhere (a replay
model's action, a sync test, the service's own loop). `cut()` closes every connection
it relays now; new connections are relayed as before (the service can reconnect), unless
`refusing` is set, which closes them at once (the service stays down until it is unset).
`stall()` keeps every connection open but relays nothing, either way, until `flow()`: a
peer that stops answering without closing anything (a hung broker, a black-holed route).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from types import TracebackType

__all__ = ["TcpRelay"]


class TcpRelay:
    """`with TcpRelay(host, port) as relay:` connect to `relay.port` instead of `port`."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcp-relay", daemon=True)
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None
        self.port = 0
        self.cuts = 0  # calls of cut()
        self.connections = 0  # accepted, over the relay's life
        self.refusing = False
        self._flowing: asyncio.Event | None = None  # made in the relay's loop

    def __enter__(self) -> TcpRelay:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._relay, "127.0.0.1", 0), self._loop
        ).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    @property
    def open_connections(self) -> int:
        """Connections relayed now."""
        return len(self._writers) // 2

    def stall(self) -> None:
        """Relay nothing from now on (connections stay open) until `flow()`."""
        asyncio.run_coroutine_threadsafe(self._set_flowing(False), self._loop).result(10)

    def flow(self) -> None:
        asyncio.run_coroutine_threadsafe(self._set_flowing(True), self._loop).result(10)

    async def _set_flowing(self, flowing: bool) -> None:
        event = self._flowing_event()
        if flowing:
            event.set()
        else:
            event.clear()

    def _flowing_event(self) -> asyncio.Event:
        if self._flowing is None:
            self._flowing = asyncio.Event()
            self._flowing.set()
        return self._flowing

    def cut(self) -> None:
        """Close every relayed connection now (both sides see it end)."""
        self.cuts += 1
        asyncio.run_coroutine_threadsafe(self._cut(), self._loop).result(10)

    async def _cut(self) -> None:
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _close(self) -> None:
        await self._cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _relay(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        if self.refusing:
            client_writer.transport.abort()
            return
        try:
            server_reader, server_writer = await asyncio.open_connection(*self._target)
        except OSError:
            client_writer.transport.abort()
            return
        pair = {client_writer, server_writer}
        self._writers |= pair
        try:
            flowing = self._flowing_event()
            await asyncio.gather(
                _pipe(client_reader, server_writer, flowing), _pipe(server_reader, client_writer, flowing)
            )
        finally:
            self._writers -= pair
            for writer in pair:
                writer.transport.abort()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, flowing: asyncio.Event) -> None:
    with contextlib.suppress(OSError, asyncio.IncompleteReadError):
        while data := await reader.read(65536):
            await flowing.wait()
            writer.write(data)
            await writer.drain()
    writer.transport.abort()
