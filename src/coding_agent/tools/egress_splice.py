"""The download direction of an egress relay, moved in the kernel (`os.splice`).

A relay through protocols copies every chunk twice across the kernel boundary (recv
into a Python bytes, send out of it) and allocates it; on a large download that is most
of the proxy's cost (benchmarks/bench_egress.py). `splice(2)` moves the bytes from the
origin's socket into a pipe and from the pipe into the sandbox's socket without them
ever reaching Python. Only the origin -> sandbox direction is spliced (downloads are
what is large); requests still go through the protocols.

The pump takes over reading the upstream socket from its (paused) transport and writes
the client socket directly, so it starts only when nothing is queued in the client's
transport; it passes the origin's EOF on as a half-close, like the protocol relay.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import Callable

__all__ = ["DownloadSplice", "splice_available"]

_CHUNK = 1024 * 1024
_PIPE_SIZE = 1024 * 1024
_BURST = 4
_FLAGS = getattr(os, "SPLICE_F_MOVE", 0) | getattr(os, "SPLICE_F_NONBLOCK", 0)


def splice_available() -> bool:
    """Linux with Python's `os.splice` (3.10+)."""
    return hasattr(os, "splice") and hasattr(os, "SPLICE_F_NONBLOCK")


class DownloadSplice:
    """Moves what arrives on `source` (a socket fd) to `target` (a socket fd) until EOF.

    `on_eof` is called once the source is at EOF and everything is written; `on_error`
    when either end fails. The pump works on duplicates of the two descriptors (asyncio
    refuses a reader on a transport's own fd); `stop()` (idempotent) unregisters and
    closes them and the pipe, and must come before the transports close theirs.
    """

    def __init__(self, source: int, target: int, on_eof: Callable[[], None], on_error: Callable[[], None]) -> None:
        self._loop = asyncio.get_running_loop()
        self._on_eof, self._on_error = on_eof, on_error
        opened: list[int] = []
        try:  # four descriptors, or none (the caller falls back to the protocol relay)
            opened += os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
            opened.append(os.dup(source))
            opened.append(os.dup(target))
        except OSError:
            for descriptor in opened:
                os.close(descriptor)
            raise
        self._read_end, self._write_end, self._source, self._target = opened
        with contextlib.suppress(OSError):  # a bigger pipe: fewer wake-ups; the default (64 KiB) works
            fcntl.fcntl(self._write_end, getattr(fcntl, "F_SETPIPE_SZ", 1031), _PIPE_SIZE)
        self._pending = 0
        self._stopped = False
        self._loop.add_reader(self._source, self._readable)

    def _readable(self) -> None:
        """Move what the origin has sent until it has nothing more right now (one wake-up
        of the loop per burst, not per pipe-full), at most `_BURST` pipe-fulls: the loop
        is the agent's, and other work waits while this runs."""
        for _ in range(_BURST):
            if self._pending or self._stopped:
                return
            try:
                moved = os.splice(self._source, self._write_end, _CHUNK, flags=_FLAGS)
            except BlockingIOError:
                return
            except OSError:
                self._fail()
                return
            if moved == 0:
                self._finish()
                return
            self._pending += moved
            self._flush()

    def _flush(self) -> None:
        while self._pending:
            try:
                written = os.splice(self._read_end, self._target, self._pending, flags=_FLAGS)
            except BlockingIOError:
                # The sandbox reads slower than the origin sends: stop reading until it drains.
                self._loop.remove_reader(self._source)
                self._loop.add_writer(self._target, self._writable)
                return
            except OSError:
                self._fail()
                return
            self._pending -= written

    def _writable(self) -> None:
        self._flush()
        if not self._pending and not self._stopped:
            self._loop.remove_writer(self._target)
            self._loop.add_reader(self._source, self._readable)

    def _finish(self) -> None:
        self.stop()
        self._on_eof()

    def _fail(self) -> None:
        self.stop()
        self._on_error()

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._loop.remove_reader(self._source)
        self._loop.remove_writer(self._target)
        for end in (self._read_end, self._write_end, self._source, self._target):
            with contextlib.suppress(OSError):
                os.close(end)
