"""One retry policy for every outward call: forge, model and git; and the wait through
an outage of the state store.

SPEC 4: transient errors are retried 3 times with exponential backoff, honouring
`Retry-After` and rate-limit hints. Adapters raise `TransientError` for what is worth
retrying; everything else passes straight through.

The state store is different: a run cannot go on without it, and giving up ends the run
failed while its work is sound. Whether an error means "the store cannot be
reached right now" is decided here, once (`store_unavailable`), and a run's store calls
wait for it as long as it takes (`through_store_outage`), on the event loop's clock,
never blocking it.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import sqlite3
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from coding_agent.errors import TransientError

__all__ = ["RetryPolicy", "retry_async", "parse_retry_after", "store_unavailable", "through_store_outage", "STORE_OUTAGE"]

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


# PostgreSQL's SQLSTATEs of a server that cannot serve now: class 08 (the connection
# failed or was lost) and 57P01-57P03 (shut down, crashed, still starting).
_UNAVAILABLE_STATES = ("08", "57P01", "57P02", "57P03")
# SQLite's words for a file it cannot use right now: another writer past busy_timeout,
# a directory or file it may not open, a disk that fails a read.
_SQLITE_UNAVAILABLE = ("database is locked", "unable to open database file", "disk i/o error")

# Between two looks at a store that cannot be reached: half a second at first, then
# longer, never more than five (a store back after a restart is seen within seconds).
STORE_OUTAGE = RetryPolicy(retries=0, base_delay=0.5, max_delay=5.0)


def store_unavailable(error: BaseException) -> bool:
    """Does `error` say the state store cannot be reached right now (a restart, a
    failover, a lost connection, a locked or unopenable SQLite file), rather than that
    the statement is wrong? The one place that tells them apart."""
    if isinstance(error, DBAPIError) and error.connection_invalidated:
        return True
    if not isinstance(error, (OperationalError, InterfaceError)):
        return False
    original = error.orig
    if isinstance(original, sqlite3.Error):
        return any(words in str(original).lower() for words in _SQLITE_UNAVAILABLE)
    state = getattr(original, "sqlstate", None)
    if state:
        return str(state).startswith(_UNAVAILABLE_STATES)
    # A driver error without a SQLSTATE never reached a server: the connection could not
    # be made (refused, timed out) or was closed under it.
    return True


async def through_store_outage(
    call: Callable[[], T],
    what: str,
    after_outage: Callable[[], Awaitable[None]] | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T:
    """`call` (a blocking store call) in a worker thread, again and again while the store
    cannot be reached, however long that takes; any other error passes through.

    The outage is logged once as it starts and once as it ends, without a traceback
    (`what` names who waits). `after_outage` runs once the call went through after a
    wait, before its answer is returned: a run confirms its lease there.
    """
    attempt = 0
    while True:
        try:
            result = await asyncio.to_thread(call)
        except DBAPIError as error:
            if not store_unavailable(error):
                raise
            attempt += 1
            if attempt == 1:
                reason = type(error.orig or error).__name__
                log.warning("%s: the state store cannot be reached (%s); waiting for it", what, reason)
            await sleep(STORE_OUTAGE.delay_for(attempt, None))
            continue
        if attempt:
            log.info("%s: the state store is back", what)
            if after_outage is not None:
                await after_outage()
        return result
