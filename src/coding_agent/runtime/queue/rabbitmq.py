"""`queue.backend: rabbitmq` (aio-pika): a durable queue, persistent messages, manual acks.

The queue is declared durable with a dead-letter queue beside it (`<name>.dead`): a
malformed message is logged and rejected without requeue, so the broker moves it there
instead of handing it out forever. `prefetch` (default: `workers`) bounds the messages a
worker holds unacknowledged; a worker that dies loses its connection and the broker
redelivers what it held (with `redelivered` set).

A message to be handed out later (`put(item, delay)`: a redelivered message whose task a
stopped worker's lease still holds) waits in `<name>.wait`, a queue nobody consumes: it
expires there after `delay` and is dead-lettered back into the queue. The broker expires
only the message at the head of a queue, so a later one with a shorter delay waits for
the one before it; the delays are all a lease's rest, so that is at most a lease.

A `queued` entry of the store whose message is gone (a purged queue, a queue deleted and
declared again) is found by `held`: while the broker holds no message waiting in either
queue, an entry queued more than `PICKUP_GRACE_SECONDS` ago has none.

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
import time
from dataclasses import dataclass, field

import aio_pika
from aio_pika.abc import AbstractIncomingMessage, AbstractQueue, AbstractRobustConnection
from aiormq.exceptions import AMQPError, ChannelInvalidStateError

from coding_agent.errors import QueueUnavailable
from coding_agent.runtime.queue.base import Delivery, Held, MalformedMessage, QueuedTask, decode, encode

__all__ = ["RabbitQueue"]

log = logging.getLogger(__name__)


# What aio-pika raises while the connection is down or for a channel that went with it.
_CONNECTION_LOST = (AMQPError, ChannelInvalidStateError, ConnectionError)

# A message the broker handed out is recorded as picked up (`QueueEntries.mark_running`)
# within moments; one waiting in a consumer's prefetch longer than this (a `prefetch`
# above `workers`) may be offered a second time, which its claim's lease makes harmless.
PICKUP_GRACE_SECONDS = 10.0
# How long `held` waits for the broker's answer (a connection lost unnoticed as yet).
HELD_TIMEOUT_SECONDS = 10.0


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

    def __init__(self, connection: AbstractRobustConnection, queue: AbstractQueue, later: AbstractQueue, name: str) -> None:
        self.name = name
        self._connection = connection
        self._queue = queue
        self._later = later
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
        later = await channel.declare_queue(
            f"{name}.wait", durable=True, arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": name}
        )
        return cls(connection, queue, later, name)

    async def put(self, item: QueuedTask, delay: float = 0.0) -> None:
        message = aio_pika.Message(
            encode(item),
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            content_type="application/json",
            expiration=delay if delay > 0 else None,
        )
        try:
            await self._queue.channel.default_exchange.publish(message, routing_key=self._later.name if delay > 0 else self.name)
        except _CONNECTION_LOST as error:
            raise QueueUnavailable(f"queue {self.name}: the broker cannot be reached ({type(error).__name__})") from None

    async def held(self) -> Held | None:
        """Nothing held (and the entries queued before the grace lost) while no message waits
        in the queue or its wait queue; None otherwise (which ones wait, AMQP cannot say)."""
        unreachable = f"queue {self.name}: the broker cannot be reached"
        if not self._connection.connected.is_set():  # a robust channel would wait for the reconnection
            raise QueueUnavailable(f"{unreachable} (reconnecting)")
        try:
            waiting = [
                (await asyncio.wait_for(queue.declare(), HELD_TIMEOUT_SECONDS)).message_count
                for queue in (self._queue, self._later)
            ]
        except (TimeoutError, *_CONNECTION_LOST) as error:
            raise QueueUnavailable(f"{unreachable} ({type(error).__name__})") from None
        return Held(frozenset(), time.time() - PICKUP_GRACE_SECONDS) if not any(waiting) else None

    async def get(self, wait: bool = True) -> Delivery | None:
        message: AbstractIncomingMessage | None
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
