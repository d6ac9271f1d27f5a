"""The pause triggers of SPEC 8.3, read at each checkpoint.

Three ways to ask a run to pause:

- the signal file (`pause_resume.signal_file`, default `<contexts>/pause_signal`): every
  run of every worker sharing the directory pauses, and resumes by itself once the
  file is gone;
- `coding-agent pause TASK`: a request row in the state store that the run's worker
  sees wherever it runs; the run then waits for `coding-agent resume`;
- a graceful shutdown (SIGTERM/SIGINT on a worker): the process's runs pause, and the
  next worker resumes them.

An operator's `stop` request travels the same way but is a stop, decided in the stop
phase of the checkpoint (after pause).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from coding_agent.agent.steering.signals import RunPaused
from coding_agent.config import AgentConfig

__all__ = ["ShutdownSignal", "PauseWatch", "pause_signal_path", "REQUEST_READ_SECONDS"]


def pause_signal_path(config: AgentConfig) -> Path:
    """Where the pause signal file lives for this configuration."""
    configured = config.pause_resume.signal_file
    return Path(configured) if configured else Path(config.context_storage.base_dir) / "pause_signal"


class ShutdownSignal:
    """Set once the process is asked to shut down; its running runs then pause."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()


# How long an answer of the state store about operator requests is reused: a checkpoint
# comes every few milliseconds in a fast loop, and an operator does not need it sooner.
REQUEST_READ_SECONDS = 0.25


class PauseWatch:
    """Answers "should this run pause now?" from the three triggers."""

    def __init__(
        self,
        enabled: bool,
        signal_file: Path,
        shutdown: ShutdownSignal,
        operator_request: Callable[[], str | None],
        clock: Callable[[], float] = time.monotonic,
        stored: Callable[[Callable[[], str | None]], Awaitable[Any]] | None = None,
    ) -> None:
        """`stored`: how the store read is made (the run's `StoreCall`, which waits through
        an outage); by default in a worker thread."""
        self.enabled = enabled
        self.signal_file = signal_file
        self._shutdown = shutdown
        self._operator_request = operator_request
        self._clock = clock
        self._stored = stored or asyncio.to_thread
        self._read_at: float | None = None
        self._request: str | None = None

    async def operator_request(self) -> str | None:
        """The operator's pending `pause` or `stop` for this task (a state store read,
        at most one per REQUEST_READ_SECONDS, in a thread: a PostgreSQL round trip or a
        SQLite lock wait must not stall the other runs on the event loop). While the store
        cannot be reached the run holds here, at its checkpoint, until it answers."""
        now = self._clock()
        if self._read_at is None or now - self._read_at >= REQUEST_READ_SECONDS:
            self._request, self._read_at = await self._stored(self._operator_request), now
        return self._request

    def pause_for(self, request: str | None) -> RunPaused | None:
        """The pause to raise now, given the operator's pending `request`, or None."""
        if not self.enabled:
            return None
        if request == "pause":
            return RunPaused("operator", hold=True)
        if self.signal_file.exists():
            return RunPaused("signal", hold=False)
        if self._shutdown.is_set():
            return RunPaused("shutdown", hold=False)
        return None
