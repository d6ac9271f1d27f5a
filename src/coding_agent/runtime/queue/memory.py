"""`queue.backend: memory`: an in-process asyncio queue, the embedded default.

It knows every message it holds, waiting or being worked (until its acknowledgement), so
the producer can tell exactly which `queued` entries of the store lost their message: a
worker that took one while the store was away could record neither its pick-up nor its
release (`Held`).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from coding_agent.runtime.queue.base import Delivery, Held, QueuedTask

__all__ = ["MemoryQueue"]


@dataclass
class _MemoryDelivery:
    item: QueuedTask
    _done: Callable[[str], None] = field(repr=False)
    redelivered: bool = False

    async def ack(self) -> None:
        self._done(self.item.key)


class MemoryQueue:
    shared = False

    def __init__(self, name: str = "memory") -> None:
        self.name = name
        self._items: asyncio.Queue[QueuedTask] = asyncio.Queue()
        self._held: Counter[str] = Counter()  # keys queued or handed out, not yet acknowledged

    def depth(self) -> int:
        return self._items.qsize()

    async def put(self, item: QueuedTask, delay: float = 0.0) -> None:
        self._held[item.key] += 1
        if delay > 0:
            asyncio.get_running_loop().call_later(delay, self._items.put_nowait, item)
        else:
            self._items.put_nowait(item)

    async def get(self, wait: bool = True) -> Delivery | None:
        if not wait and self._items.empty():
            return None
        return _MemoryDelivery(await self._items.get(), self._forget)

    async def held(self) -> Held:
        return Held(frozenset(self._held), time.time())

    def _forget(self, key: str) -> None:
        self._held[key] -= 1
        if self._held[key] <= 0:
            del self._held[key]

    def drain(self) -> list[QueuedTask]:
        """What is still queued (at shutdown: its dedup entries are released)."""
        items = []
        while not self._items.empty():
            item = self._items.get_nowait()
            self._forget(item.key)
            items.append(item)
        return items

    async def aclose(self) -> None:
        return None
