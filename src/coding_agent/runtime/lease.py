"""The heartbeat that keeps a running task's lease (SPEC 3).

The lease used to be renewed after model replies only, so a model call or a test run
longer than the lease let a second worker take the task over while the first still
worked it: both published. The heartbeat is its own asyncio task, renewing every third
of the lease whatever the run is waiting on, in a worker thread so that a slow database
never stalls the event loop. Two missed beats (a database hiccup) still leave a third
before the lease runs out; a renewal that finds the lease held by another owner marks
it lost, and the run stops at its next step without writing anything more.

While the store cannot be reached, the beats come sooner (`retry.STORE_OUTAGE`, never
further apart than the interval), so the lease is renewed as soon as the store is back:
a renewal only needs the lease to be still ours, not to be still running, and only
another worker's claim of a lease that ran out takes it away.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from types import TracebackType

from sqlalchemy.exc import SQLAlchemyError

from coding_agent.retry import STORE_OUTAGE, store_unavailable
from coding_agent.store.leases import Leases

__all__ = ["LeaseHeartbeat"]

log = logging.getLogger(__name__)


class LeaseHeartbeat:
    """`async with LeaseHeartbeat(...) as lease:` renews the lease until the block ends.

    Implements `domain.lease.LeaseWatch` (`lost`).
    """

    def __init__(self, leases: Leases, task_key: str, owner: str, lease_seconds: float) -> None:
        self._leases = leases
        self._key = task_key
        self._owner = owner
        self._lease_seconds = lease_seconds
        self._lost = False
        self._task: asyncio.Task[None] | None = None
        self.beats = 0

    @property
    def lost(self) -> bool:
        return self._lost

    @property
    def interval(self) -> float:
        return self._lease_seconds / 3

    async def __aenter__(self) -> LeaseHeartbeat:
        self._task = asyncio.create_task(self._beat(), name=f"lease-heartbeat {self._key}")
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _beat(self) -> None:
        failures = 0
        while True:
            wait = self.interval if not failures else min(self.interval, STORE_OUTAGE.delay_for(failures, None))
            await asyncio.sleep(wait)
            try:
                held = await asyncio.to_thread(self._leases.renew_lease, self._key, self._owner, self._lease_seconds)
            except SQLAlchemyError as error:
                failures += 1
                if failures == 1 or not store_unavailable(error):
                    log.warning("%s: lease heartbeat failed (%s); retrying", self._key, type(error).__name__)
                continue
            if failures:
                log.info("%s: lease heartbeat renewed the lease again", self._key)
                failures = 0
            self.beats += 1
            if not held:
                log.warning("%s: the lease is held by another worker now; the run stops at its next step", self._key)
                self._lost = True
                return
