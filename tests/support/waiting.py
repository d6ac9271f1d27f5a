"""Waiting on a condition with a deadline: the one way tests wait for something.

Tests never sleep a fixed time hoping something happened; they poll a condition and
fail, naming what they waited for, when the deadline passes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["wait_for", "wait_until", "wait_until_async"]

T = TypeVar("T")

POLL_SECONDS = 0.02


def _poll(condition: Callable[[], T], deadline: float, timeout: float, what: str) -> T | None:
    """The condition's value when it is truthy, None while it is not; past the deadline an
    AssertionError naming `what`."""
    return _settled(condition(), deadline, timeout, what)


def _settled(value: T, deadline: float, timeout: float, what: str) -> T | None:
    if value:
        return value
    if time.monotonic() > deadline:
        raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
    return None


def wait_for(condition: Callable[[], T], timeout: float, what: str) -> T:
    """Poll `condition` until it returns something truthy, and return that.

    Raises AssertionError naming `what` after `timeout` seconds.
    """
    deadline = time.monotonic() + timeout
    while (value := _poll(condition, deadline, timeout, what)) is None:
        time.sleep(POLL_SECONDS)
    return value


async def wait_until(condition: Callable[[], T], timeout: float, what: str) -> T:
    """`wait_for` for async tests: polls without blocking the event loop the awaited work runs on."""
    deadline = time.monotonic() + timeout
    while (value := _poll(condition, deadline, timeout, what)) is None:
        await asyncio.sleep(POLL_SECONDS)
    return value


async def wait_until_async(condition: Callable[[], Awaitable[T]], timeout: float, what: str) -> T:
    """`wait_until` for a condition that has to await (an attempt that fails until the
    awaited state is reached, e.g. a publish refused once a lost connection is noticed)."""
    deadline = time.monotonic() + timeout
    while (value := _settled(await condition(), deadline, timeout, what)) is None:
        await asyncio.sleep(POLL_SECONDS)
    return value
