"""Waiting on a condition with a deadline: the one way tests wait for something.

Tests never sleep a fixed time hoping something happened; they poll a condition and
fail, naming what they waited for, when the deadline passes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["wait_for"]

T = TypeVar("T")

POLL_SECONDS = 0.02


def wait_for(condition: Callable[[], T], timeout: float, what: str) -> T:
    """Poll `condition` until it returns something truthy, and return that.

    Raises AssertionError naming `what` after `timeout` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(POLL_SECONDS)
