"""The RabbitMQ queue against a real broker: persistent round trip, manual ack, a
malformed message dead-lettered instead of handed out forever, and a connection lost
while the queue is in use (through a relay the test cuts)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import aio_pika
import pytest

from coding_agent.errors import QueueUnavailable
from coding_agent.runtime.queue import Delivery, QueuedTask
from coding_agent.runtime.queue.rabbitmq import RabbitQueue
from tests.support.services import amqp_url, reachable
from tests.support.tcp_relay import TcpRelay
from tests.support.waiting import wait_until_async


@pytest.fixture
async def name() -> AsyncIterator[str]:
    if not reachable(amqp_url()):
        pytest.skip("RabbitMQ is not reachable at " + amqp_url())
    queue_name = f"coding-agent.test.{uuid.uuid4().hex[:10]}"
    yield queue_name
    connection = await aio_pika.connect_robust(amqp_url())
    async with connection:
        channel = await connection.channel()
        for each in (queue_name, f"{queue_name}.dead", f"{queue_name}.wait"):
            await channel.queue_delete(each)


async def _dead_letters(name: str) -> list[bytes]:
    connection = await aio_pika.connect_robust(amqp_url())
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(f"{name}.dead", durable=True)
        bodies = []
        while (message := await queue.get(no_ack=True, fail=False)) is not None:
            bodies.append(message.body)
        return bodies


async def test_a_message_is_redelivered_until_acked(name: str) -> None:
    first = await RabbitQueue.open(amqp_url(), name, prefetch=1)
    await first.put(QueuedTask("github:acme/widgets#7", "new"))
    delivery = await first.get(wait=False)
    assert delivery is not None and delivery.item == QueuedTask("github:acme/widgets#7", "new")
    assert not delivery.redelivered
    await first.aclose()  # lost before its ack: the broker hands it out again

    second = await RabbitQueue.open(amqp_url(), name, prefetch=1)
    try:
        again = await second.get(wait=False)
        assert again is not None and again.item.key == "github:acme/widgets#7" and again.redelivered
        await again.ack()
        assert await second.get(wait=False) is None
    finally:
        await second.aclose()


@pytest.mark.parametrize(
    "body",
    [b"not json", b"[1, 2]", b'{"key": "github:acme/widgets#7", "reason": "whatever"}', b'{"key": "rm -rf /", "reason": "new"}'],
)
async def test_a_malformed_message_is_dead_lettered_not_retried(name: str, body: bytes) -> None:
    queue = await RabbitQueue.open(amqp_url(), name, prefetch=1)
    try:
        channel = await queue._connection.channel()  # a raw publisher, as a foreign producer would be
        await channel.default_exchange.publish(aio_pika.Message(body), routing_key=name)
        await queue.put(QueuedTask("gitlab:acme/widgets!3", "continue"))
        delivery = await queue.get(wait=False)
        assert delivery is not None and delivery.item == QueuedTask("gitlab:acme/widgets!3", "continue")
        await delivery.ack()
        assert await queue.get(wait=False) is None, "the malformed message is not handed out again"
    finally:
        await queue.aclose()
    assert await _dead_letters(name) == [body]


async def test_a_lost_connection_loses_no_message_and_the_queue_comes_back(name: str) -> None:
    """While the broker is away a publish says so (`QueueUnavailable`, not aio-pika's own
    errors); acknowledging a message that came over the lost connection is a no-op (the
    broker took it back); one that came over it and still waits here is not handed out
    (it is the broker's again); once the connection is back both are handed out again."""
    with TcpRelay("127.0.0.1", 5672) as relay:
        queue = await RabbitQueue.open(f"amqp://guest:guest@127.0.0.1:{relay.port}/?reconnect_interval=0.2", name, 2)
        try:
            await queue.put(QueuedTask("github:acme/widgets#7", "new"))
            await queue.put(QueuedTask("github:acme/widgets#6", "new"))
            delivery = await queue.get()  # #6 comes with it (prefetch 2) and waits here
            relay.refusing = True
            relay.cut()

            async def publish_refused() -> QueueUnavailable | None:  # once the client has seen the connection go
                try:
                    await queue.put(QueuedTask("github:acme/widgets#8", "new"))
                except QueueUnavailable as error:
                    return error
                return None

            refused = await wait_until_async(publish_refused, 10, "a publish to be refused")
            assert "the broker cannot be reached" in str(refused)
            with pytest.raises(QueueUnavailable, match="the broker cannot be reached"):
                await queue.held()  # says so at once, not once the connection is back
            await delivery.ack()  # no error: the broker has it again
            relay.refusing = False
            again = [await asyncio.wait_for(queue.get(), 60) for _ in range(2)]
            assert sorted(each.item.key for each in again) == ["github:acme/widgets#6", "github:acme/widgets#7"]
            assert all(each.redelivered for each in again), "none of them from the lost connection"
            for each in again:
                await each.ack()
            await queue.put(QueuedTask("github:acme/widgets#9", "new"))
            assert (await asyncio.wait_for(queue.get(), 60)).item.key == "github:acme/widgets#9"
        finally:
            await queue.aclose()


async def test_a_message_put_back_with_a_delay_comes_again_after_it(name: str) -> None:
    """`put(item, delay)` parks the message in the wait queue, from which the broker moves
    it back into the queue once the delay is over; while any message waits, `held` cannot
    vouch for the store's entries, and once none does it says the queue holds nothing."""
    queue = await RabbitQueue.open(amqp_url(), name, prefetch=1)
    try:
        empty = await queue.held()
        assert empty is not None and empty.keys == frozenset()
        await queue.put(QueuedTask("github:acme/widgets#7", "continue"), delay=10)
        assert await queue.held() is None, "a message waits, in the wait queue"
        assert await queue.get(wait=False) is None, "not handed out before its delay"

        async def back() -> Delivery | None:
            return await queue.get(wait=False)

        again = await wait_until_async(back, 60, "the message to come back")
        assert again.item == QueuedTask("github:acme/widgets#7", "continue")
        await again.ack()
        assert await queue.held() is not None, "nothing waits any more"
    finally:
        await queue.aclose()

