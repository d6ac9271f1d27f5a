"""The start gate (runtime/start_gate.py): a few runs start at a time, none waits long."""

from __future__ import annotations

import asyncio

import pytest

from coding_agent.runtime.start_gate import StartGate


def test_a_slot_is_given_back_once_and_the_next_run_takes_it() -> None:
    async def scenario() -> list[str]:
        gate, order = StartGate(1, max_wait_seconds=60), []
        first_in, second_in = asyncio.Event(), asyncio.Event()

        async def first() -> None:
            async with gate.slot() as give_back:
                order.append("first in")
                first_in.set()
                await asyncio.sleep(0)
                order.append("first ready")
                give_back()
                give_back()  # a second call gives back nothing more
                await second_in.wait()  # still in the block: the slot is already free
                order.append("first ends")

        async def second() -> None:
            await first_in.wait()
            async with gate.slot():
                order.append("second in")
                second_in.set()

        await asyncio.gather(first(), second())
        return order

    assert asyncio.run(asyncio.wait_for(scenario(), 30)) == ["first in", "first ready", "second in", "first ends"]


def test_a_run_that_waited_too_long_goes_ahead_without_a_slot() -> None:
    async def scenario() -> list[str]:
        gate, order = StartGate(1, max_wait_seconds=0.05), []
        holding, done = asyncio.Event(), asyncio.Event()

        async def holder() -> None:
            async with gate.slot():
                holding.set()
                await done.wait()  # a slow clone: holds its slot until the other is through
                order.append("holder ends")

        async def waiter() -> None:
            await holding.wait()
            async with gate.slot():
                order.append("waiter in")
            done.set()

        await asyncio.gather(holder(), waiter())
        async with gate.slot():  # the holder's slot came back; the waiter took none
            order.append("third in")
        return order

    assert asyncio.run(asyncio.wait_for(scenario(), 30)) == ["waiter in", "holder ends", "third in"]


def test_a_gate_needs_a_slot() -> None:
    with pytest.raises(ValueError):
        StartGate(0)
