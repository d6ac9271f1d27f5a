"""Opens the configured queue (`queue.backend`)."""

from __future__ import annotations

from coding_agent.config import AgentConfig
from coding_agent.runtime.queue.base import TaskQueue
from coding_agent.runtime.queue.memory import MemoryQueue

__all__ = ["open_queue"]


async def open_queue(config: AgentConfig) -> TaskQueue:
    settings = config.queue
    if settings.backend == "memory":
        return MemoryQueue()
    from coding_agent.runtime.queue.rabbitmq import RabbitQueue  # aio-pika only when used

    return await RabbitQueue.open(settings.url, settings.name, settings.prefetch or config.workers)
