"""`queue.backend: memory`: an in-process asyncio queue, the embedded default."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from coding_agent.runtime.queue.base import Delivery, QueuedTask

__all__ = ["MemoryQueue"]


@dataclass
class _MemoryDelivery:
    item: QueuedTask
    redelivered: bool = False

    async def ack(self) -> None:
        return None


class MemoryQueue:
    shared = False

    def __init__(self, name: str = "memory") -> None:
        self.name = name
        self._items: asyncio.Queue[QueuedTask] = asyncio.Queue()

    def depth(self) -> int:
        return self._items.qsize()

    async def put(self, item: QueuedTask) -> None:
        self._items.put_nowait(item)

    async def get(self, wait: bool = True) -> Delivery | None:
        if not wait and self._items.empty():
            return None
        return _MemoryDelivery(await self._items.get())

    def drain(self) -> list[QueuedTask]:
        """What is still queued (at shutdown: its dedup entries are released)."""
        items = []
        while not self._items.empty():
            items.append(self._items.get_nowait())
        return items

    async def aclose(self) -> None:
        return None
