"""What runs import once per process, loaded in a worker thread, never on the event loop.

A process's first run needs the model's SDK with what its first client loads lazily
(the SDK's resources, the TLS context) and the MCP SDK for the tool hub: about 0.8 s of
CPU here (0.43 s openai, 0.33 s MCP, on a 2-core VM). Imported on the event loop's
thread, as they were by the first run that used them, they stalled everything else the
process does for that long: the other runs' steps, the lease heartbeats, the webhooks.
In a worker thread the event loop goes on between the import's bytecodes (the GIL is
handed over every few milliseconds). Measured in docs/performance.md.

When: `serve` and `worker` start loading as they start, before any task comes
(`load_soon`); `run --once` as its first task is picked up, so that a poll from cron
that finds nothing loads nothing (benchmarks/bench_startup.py). Every run waits for
the load (`loaded`) before it builds its model client.
"""

from __future__ import annotations

import asyncio
import logging

from coding_agent.config import LLMConfig
from coding_agent.llm.factory import load_client_library

__all__ = ["RunLibraries"]

log = logging.getLogger(__name__)

_loaded = False  # imports are the process's: once loaded, by any service, loaded for all


class RunLibraries:
    """The libraries a run needs, loaded once for the process (one load at a time per
    event loop: a load that failed is tried again by the next run)."""

    def __init__(self, llm: LLMConfig) -> None:
        self._llm = llm
        self._loading: asyncio.Task[None] | None = None

    def _load(self) -> None:
        """Blocking: in a worker thread."""
        load_client_library(self._llm)
        import coding_agent.tools.hub  # noqa: F401 - the MCP SDK, for the runs' tool hubs

    def _task(self) -> asyncio.Task[None]:
        loop = asyncio.get_running_loop()
        loading = self._loading
        if loading is None or loading.get_loop() is not loop or (loading.done() and not _succeeded(loading)):
            loading = self._loading = loop.create_task(asyncio.to_thread(self._load))
            loading.add_done_callback(_report_failure)
        return loading

    def load_soon(self) -> None:
        """Start loading now, without waiting for it (nothing when already loaded)."""
        if not _loaded:
            self._task()

    async def loaded(self) -> None:
        """Return once the libraries are loaded; raise what the load raised (a broken
        installation), for the run to end failed with it."""
        global _loaded
        if _loaded:
            return
        # Shielded: a run cancelled while it waits leaves the load going for the others.
        await asyncio.shield(self._task())
        _loaded = True


def _succeeded(task: asyncio.Task[None]) -> bool:
    return not task.cancelled() and task.exception() is None


def _report_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and (error := task.exception()) is not None:
        log.error("loading the libraries runs need failed: %s", error)
