"""A graceful shutdown in bounded time (SPEC 8.3), for every command that works tasks.

A rolling deploy, `docker stop`, a Kubernetes scale-in or a systemd restart sends SIGTERM
and, a grace later, SIGKILL. On the first SIGTERM or SIGINT the process stops taking work
and every run pauses at its next checkpoint; `/healthz` answers 503 from then on. Once
`scheduling.shutdown_grace_seconds` have passed, a model request or tool call still in
flight is cut (`ShutdownSignal.cut`) and its run pauses as it stood before it. The
pauses' writes then have `FINISH_SECONDS`, each bounded by what is left of them; what is
still going after that is cancelled, the service closed within `CLOSE_SECONDS`, and the
process exits 0. A thread that outlives all that (a blocking call in a worker thread that
does not answer) cannot hold the exit up: a backstop ends the process
`BACKSTOP_SECONDS` later. What could not be written is finished by the next worker, as
after a crash (the lease lapses, or was released).

A second SIGTERM or SIGINT during the grace ends the process at once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from coding_agent.runtime.service import AgentService

__all__ = ["GracefulShutdown", "FINISH_SECONDS", "CLOSE_SECONDS", "BACKSTOP_SECONDS"]

log = logging.getLogger(__name__)

# After the grace: the paused runs' writes (WIP push, comment, labels, lease, queue message).
FINISH_SECONDS = 3.0
# Then: the service's close (the queue's connection, the forge clients, the store).
CLOSE_SECONDS = 1.5
# Then, whatever still runs, the process ends.
BACKSTOP_SECONDS = 1.0


class GracefulShutdown:
    """The signal handling of one process working tasks: `install` it in the running event
    loop, then `guard` the command's work and `close` the service through it."""

    def __init__(
        self, service: AgentService, stop: asyncio.Event, on_second_signal: Callable[[int], None] | None = None
    ) -> None:
        """`on_second_signal`: what a second signal does instead of ending the process
        at once (`demo --serve` raises KeyboardInterrupt, to remove its files on the way)."""
        self._on_second = on_second_signal
        self._service = service
        self._stop = stop
        self._grace = service.config.scheduling.shutdown_grace_seconds
        self._loop: asyncio.AbstractEventLoop | None = None
        self._main: asyncio.Task[object] | None = None
        self.overdue = False  # the command's work was cancelled, its time being up

    def install(self) -> None:
        """Handle SIGTERM and SIGINT from now on; the current task is the one cancelled
        when the shutdown's time is up."""
        self._loop = loop = asyncio.get_running_loop()
        self._main = asyncio.current_task()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._first, signum)

    @property
    def started(self) -> bool:
        return self._service.shutdown.is_set()

    def _first(self, signum: int) -> None:
        loop = self._loop
        assert loop is not None
        log.info(
            "signal %d: shutting down; the running tasks pause within %g s (scheduling.shutdown_grace_seconds), "
            "a second signal ends the process at once",
            signum,
            self._grace,
        )
        for each in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(each, self._second, each)
        self._service.request_shutdown(self._grace, FINISH_SECONDS)
        self._stop.set()
        loop.call_later(self._grace, self._cut)
        loop.call_later(self._grace + FINISH_SECONDS, self._time_up)
        backstop = threading.Timer(self._grace + FINISH_SECONDS + CLOSE_SECONDS + BACKSTOP_SECONDS, _backstop)
        backstop.daemon = True
        backstop.start()

    def _second(self, signum: int) -> None:
        log.warning("signal %d again: ending the process now; its tasks are taken over once their lease lapses", signum)
        if self._on_second is not None:
            self._on_second(signum)
        _end_now(128 + signum)

    def _cut(self) -> None:
        log.info("shutdown: the grace is over; model requests and tool calls still in flight are cut")
        self._service.shutdown.cut()

    def _time_up(self) -> None:
        if self._main is not None and not self._main.done():
            log.warning("shutdown: its time is up; what is still being written is left to the next worker")
            self.overdue = True
            self._main.cancel()

    async def guard(self, work: Awaitable[int]) -> int:
        """`work`'s exit code; 0 when the shutdown's time ran out on it."""
        try:
            return await work
        except asyncio.CancelledError:
            if not self.overdue:
                raise
            self._uncancel()
            return 0

    def _uncancel(self) -> None:
        """The time-up cancel is handled: the task goes on to close the service."""
        current = asyncio.current_task()
        if current is not None and current is self._main:
            current.uncancel()

    async def close(self) -> None:
        """Close the service: at once as a rule, within `CLOSE_SECONDS` in a shutdown (a
        broker that does not answer: its unacknowledged messages come back anyway once
        the connection is gone)."""
        if not self.started:
            await self._service.aclose()
            return
        try:
            await asyncio.wait_for(self._service.aclose(), CLOSE_SECONDS)
        except TimeoutError:
            log.warning("shutdown: the service did not close in %g s; exiting anyway", CLOSE_SECONDS)
        except asyncio.CancelledError:  # cancelled while closing, its time being up
            if not self.overdue:
                raise
            self._uncancel()


    def exit_if_shut_down(self, code: int) -> None:
        """After a shutdown, end the process here with `code`, its writes done and its
        service closed: what is left (cancelling the leftover tasks, joining worker
        threads, the interpreter's own teardown, whose garbage collection alone took
        seconds on a loaded machine) is nothing the next process needs, and the grace
        did not allow for it."""
        if self.started:
            log.info("shutdown: done; exiting %d", code)
            _end_now(code)


def _end_now(code: int, flush_logs: bool = True) -> None:
    """End the process now, whatever its threads are doing. `flush_logs`: only from the
    event loop's thread (another thread may hold a handler's lock)."""
    if flush_logs:
        logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _backstop() -> None:
    """In its own thread: the main one may be stuck (joining a worker thread at exit)."""
    log.warning("shutdown: still running %g s after the grace; exiting", FINISH_SECONDS + CLOSE_SECONDS + BACKSTOP_SECONDS)
    _end_now(0, flush_logs=False)
