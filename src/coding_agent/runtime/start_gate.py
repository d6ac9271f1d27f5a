"""Runs start a few at a time: between its claim and its clone being ready, a run holds
one of a few start slots (`scheduling.starts_at_once`, default the CPU count).

Why: a run's start (the claim's forge requests, the comment and permission reads, the
clone) is CPU work on one event loop and a few git processes. When sixteen runs start
together, the loop interleaves them, so all sixteen finish starting at about the same
moment, as late as the last one; their model replies then come back together, and so
do their deliveries (commit, push, pull request, labels), sixteen at once again at the
end. A few at a time, the first runs reach their model while the others still start,
and their ends are spread the same way. (Measured with `benchmarks/bench_runtime.py
--timeline`, 16 runs on 2 cores: the end after the last model reply went from 0.76-0.87 s
with no gate to 0.16-0.44 s with two slots.)

No run waits for unrelated work for long: a run that has waited `max_wait_seconds`
(`scheduling.start_wait_seconds`, 2 s) for a slot goes ahead without one, so a slow
clone of a huge repository holds the others back by at most that. A setup
(`setup.commands`, which can take minutes) runs after the slot is given back.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

__all__ = ["StartGate", "default_starts_at_once"]

MAX_WAIT_SECONDS = 2.0


def default_starts_at_once() -> int:
    """The CPU count: a start is mostly CPU work (the event loop and git). Measured with
    `benchmarks/bench_runtime.py --starts-at-once N` (16 tasks on 2 cores, quiet
    machine, 16 vs 1): 1 and 2 slots 1.14-1.20x, 3 1.17-1.21x, 4 1.22-1.25x, 16 (no
    gate) 1.31-1.33x. One slot would let a single slow start hold back every other."""
    return os.cpu_count() or 1


class StartGate:
    """`size` start slots, shared by the runs of this process."""

    def __init__(self, size: int, max_wait_seconds: float = MAX_WAIT_SECONDS) -> None:
        if size < 1:
            raise ValueError("a start gate needs at least one slot")
        self._size = size
        self._max_wait = max_wait_seconds
        self._semaphore: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _slots(self) -> asyncio.Semaphore:
        """The semaphore of the running loop (`run --once` in tests may run several loops)."""
        loop = asyncio.get_running_loop()
        if self._semaphore is None or self._loop is not loop:
            self._semaphore, self._loop = asyncio.Semaphore(self._size), loop
        return self._semaphore

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[Callable[[], None]]:
        """Hold a slot (or go ahead without one after `max_wait_seconds`) until the
        callable it yields is called, or the block ends, whichever comes first."""
        slots = self._slots()
        try:
            held = await asyncio.wait_for(slots.acquire(), self._max_wait)
        except TimeoutError:
            held = False
        given_back = False

        def give_back() -> None:
            nonlocal given_back
            if held and not given_back:
                given_back = True
                slots.release()

        try:
            yield give_back
        finally:
            give_back()
