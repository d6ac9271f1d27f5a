"""`queue.backend: rabbitmq` (aio-pika): a durable queue, persistent messages, manual acks.

The queue is declared durable with a dead-letter queue beside it (`<name>.dead`): a
malformed message is logged and rejected without requeue, so the broker moves it there
instead of handing it out forever. `prefetch` (default: `workers`) bounds the messages a
worker holds unacknowledged; a worker that dies loses its connection and the broker
redelivers what it held (with `redelivered` set).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

import aio_pika
from aio_pika.abc import AbstractIncomingMessage, AbstractQueue, AbstractRobustConnection

from coding_agent.runtime.queue.base import Delivery, MalformedMessage, QueuedTask, decode, encode

__all__ = ["RabbitQueue"]

log = logging.getLogger(__name__)


@dataclass
class _RabbitDelivery:
    item: QueuedTask
    redelivered: bool
    _message: AbstractIncomingMessage = field(repr=False)

    async def ack(self) -> None:
        await self._message.ack()


class RabbitQueue:
    shared = True

    def __init__(self, connection: AbstractRobustConnection, queue: AbstractQueue, name: str) -> None:
        self.name = name
        self._connection = connection
        self._queue = queue
        self._consumed: asyncio.Queue[AbstractIncomingMessage] | None = None
        self._consumer_tag: str | None = None

    @classmethod
    async def open(cls, url: str, name: str, prefetch: int) -> RabbitQueue:
        """Connect and declare; raises the connection error when the broker is down."""
        connection = await aio_pika.connect_robust(url, timeout=10)
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=prefetch)
        await channel.declare_queue(f"{name}.dead", durable=True)
        queue = await channel.declare_queue(
            name,
            durable=True,
            arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": f"{name}.dead"},
        )
        return cls(connection, queue, name)

    async def put(self, item: QueuedTask) -> None:
        message = aio_pika.Message(encode(item), delivery_mode=aio_pika.DeliveryMode.PERSISTENT, content_type="application/json")
        await self._queue.channel.default_exchange.publish(message, routing_key=self.name)

    async def get(self, wait: bool = True) -> Delivery | None:
        while True:
            if wait:
                message = await self._next_consumed()
            else:
                message = await self._queue.get(no_ack=False, fail=False)
                if message is None:
                    return None
            try:
                item = decode(message.body)
            except MalformedMessage as error:
                log.error("queue %s: malformed message dead-lettered: %s", self.name, error)
                await message.reject(requeue=False)
                continue
            return _RabbitDelivery(item, bool(message.redelivered), message)

    async def _next_consumed(self) -> AbstractIncomingMessage:
        if self._consumed is None:
            self._consumed = asyncio.Queue()
            self._consumer_tag = await self._queue.consume(self._consumed.put)
        return await self._consumed.get()

    async def aclose(self) -> None:
        # Unacknowledged messages go back to the queue when the connection closes.
        await self._connection.close()
