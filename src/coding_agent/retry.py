"""One retry policy for every outward call: forge, model and git.

SPEC 4: transient errors are retried 3 times with exponential backoff, honouring
`Retry-After` and rate-limit hints. Adapters raise `TransientError` for what is worth
retrying; everything else passes straight through.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from coding_agent.errors import TransientError

__all__ = ["RetryPolicy", "retry_async", "parse_retry_after"]

T = TypeVar("T")
log = logging.getLogger(__name__)


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry.

    `max_delay` caps any single wait, including a server's Retry-After, so that a
    misbehaving server cannot park a worker for an hour.
    """

    retries: int = 3
    base_delay: float = 1.0
    max_delay: float = 60.0
    jitter: float = 0.1

    def delay_for(self, attempt: int, hint: float | None) -> float:
        """Seconds to wait before retry number `attempt` (1-based)."""
        if hint is not None and hint >= 0:
            return min(hint, self.max_delay)
        backoff = self.base_delay * (2 ** (attempt - 1))
        return min(backoff * (1 + random.uniform(0, self.jitter)), self.max_delay)


async def retry_async(
    call: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    what: str,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T:
    """Run `call`, retrying `TransientError` up to `policy.retries` times.

    `what` names the operation in the log ("github GET issues"); the last error is
    re-raised unchanged when the retries are used up.
    """
    attempt = 0
    while True:
        try:
            return await call()
        except TransientError as error:
            attempt += 1
            if attempt > policy.retries:
                raise
            delay = policy.delay_for(attempt, error.retry_after)
            log.warning("%s failed (%s); retry %d/%d in %.2fs", what, error, attempt, policy.retries, delay)
            await sleep(delay)
