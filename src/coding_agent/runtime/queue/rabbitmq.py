"""`queue.backend: rabbitmq` (aio-pika): a durable queue, persistent messages, manual acks.

The queue is declared durable with a dead-letter queue beside it (`<name>.dead`): a
malformed message is logged and rejected without requeue, so the broker moves it there
instead of handing it out forever. `prefetch` (default: `workers`) bounds the messages a
worker holds unacknowledged; a worker that dies loses its connection and the broker
redelivers what it held (with `redelivered` set).

A connection lost while the service runs (a broker restart, a network blip) ends
nothing: aio-pika's robust connection reconnects (every `reconnect_interval`, 5 s, a URL
parameter) and consumes again. Meanwhile a publish raises `QueueUnavailable` (the
producer offers the task again next cycle); the messages that were delivered over the
lost connection are back in the broker, so acknowledging one is a no-op, and one still
waiting here unprocessed is dropped rather than worked (the broker hands it out again).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

import aio_pika
from aio_pika.abc import AbstractIncomingMessage, AbstractQueue, AbstractRobustConnection
from aiormq.exceptions import AMQPError, ChannelInvalidStateError

from coding_agent.errors import QueueUnavailable
from coding_agent.runtime.queue.base import Delivery, MalformedMessage, QueuedTask, decode, encode

__all__ = ["RabbitQueue"]

log = logging.getLogger(__name__)


# What aio-pika raises while the connection is down or for a channel that went with it.
_CONNECTION_LOST = (AMQPError, ChannelInvalidStateError, ConnectionError)


@dataclass
class _RabbitDelivery:
    item: QueuedTask
    redelivered: bool
    _message: AbstractIncomingMessage = field(repr=False)

    async def ack(self) -> None:
        try:
            await self._message.ack()
        except _CONNECTION_LOST as error:
            log.warning(
                "%s: its message came over a connection that has since been lost (%s); the broker has it again",
                self.item.key,
                type(error).__name__,
            )


def _came_over_a_lost_connection(message: AbstractIncomingMessage) -> bool:
    try:
        return message.channel.is_closed  # aio-pika raises instead for a closed channel
    except ChannelInvalidStateError:
        return True


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
        try:
            await self._queue.channel.default_exchange.publish(message, routing_key=self.name)
        except _CONNECTION_LOST as error:
            raise QueueUnavailable(f"queue {self.name}: the broker cannot be reached ({type(error).__name__})") from None

    async def get(self, wait: bool = True) -> Delivery | None:
        while True:
            if wait:
                message = await self._next_consumed()
                if _came_over_a_lost_connection(message):  # the broker has it again
                    continue
            else:
                try:
                    message = await self._queue.get(no_ack=False, fail=False)
                except _CONNECTION_LOST as error:
                    raise QueueUnavailable(f"queue {self.name}: the broker cannot be reached ({type(error).__name__})") from None
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
