"""What one run writes to the state store while it works: its progress and its lease.

A `RunLedger` is made for a run as it starts and bound to it then (task key, run id,
the worker's lease), so the loop and its steering are handed the ledger's parts and
never the task: `step` (the per-step heartbeat: steps, token usage, the lease extended),
`record_usage` (a model call's usage, written with the next step), and the lease check
at each checkpoint (`check_lease`, `await_step_write`, `confirm_after_outage`, which
the run's steering calls first). Leaving the ledger (`async with`) waits for the last
progress write and writes the usage no heartbeat took, so nothing lands after the run.

A state store that cannot be reached is a pause, not a failure: every store call of the
run goes through `stored`, which waits for the store as long as it is away, and then,
before the run goes on, confirms that the lease is still this worker's (an outage longer
than the lease may have let another worker take the task over: then the run stops
without writing anything more, `LeaseLost`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

from coding_agent.agent.steering import LeaseLost
from coding_agent.domain.lease import LeaseWatch
from coding_agent.domain.ports import RunStore
from coding_agent.llm.types import TokenUsage
from coding_agent.retry import store_unavailable, through_store_outage

__all__ = ["RunLedger"]

T = TypeVar("T")

log = logging.getLogger(__name__)


class RunLedger:
    """One run's progress writes (a worker thread each, never two at once) and its lease."""

    def __init__(
        self, store: RunStore, owner: str, key: str, run_uuid: str, lease: LeaseWatch | None, lease_seconds: float
    ) -> None:
        self._store, self._owner, self._key, self._run_uuid = store, owner, key, run_uuid
        self._lease, self._lease_seconds = lease, lease_seconds
        self._pending_usage: list[tuple[int, int]] = []
        self._last_write: float | None = None
        self._step_write: asyncio.Future[bool] | None = None
        self._lost = False
        self._unconfirmed = False  # a progress write met the store away: confirm the lease

    async def stored(self, call: Callable[..., T], *args: Any) -> T:
        """`call(*args)`, a blocking store call, in a worker thread; while the store cannot
        be reached, waits for it (the run holds where it is), then confirms the lease."""
        return await through_store_outage(lambda: call(*args), self._who(), self._confirm_lease)

    def _who(self) -> str:
        return f"{self._key}: run {self._run_uuid}"

    async def _confirm_lease(self) -> None:
        """After an outage: extend the lease if it is still ours, else stop the run. Only
        another worker's claim takes it, and only after it ran out, so a run whose
        process lived through the outage keeps it unless the outage outlasted it."""
        self._unconfirmed = False
        held = await through_store_outage(
            lambda: self._store.leases.renew_lease(self._key, self._owner, self._lease_seconds), self._who()
        )
        if not held:
            self._lost = True
            raise self._lease_lost()

    async def confirm_after_outage(self) -> None:
        """At a checkpoint: if a progress write met the store away, the run goes on only
        once the store answers and the lease is still its own."""
        if self._unconfirmed:
            await self._confirm_lease()

    def check_lease(self) -> None:
        """Stop the run once the worker's lease is gone: the task is another worker's now."""
        if self._lease is not None and self._lease.lost:
            raise self._lease_lost()

    def _lease_lost(self) -> LeaseLost:
        return LeaseLost(f"lease of {self._key} lost to another worker during run {self._run_uuid}")

    def step(self, steps: int) -> None:
        """Record the run's progress (steps, token usage) and stop if the lease is gone.

        The lease itself is kept alive by the worker's heartbeat (`runtime/lease.py`),
        whatever the run waits on. This per-step write (which extends it too) runs in a
        worker thread, never on the event loop; a write that finds the lease gone stops
        the run at its next step. Written at most every tenth of the lease (10 s at
        most), and never two at once, so a transaction is not part of every step's cost.
        """
        self.check_lease()
        if self._lost:
            raise self._lease_lost()
        now = time.monotonic()
        interval = min(self._lease_seconds / 10, 10.0)
        pending = self._step_write
        if (self._last_write is not None and now - self._last_write < interval) or (
            pending is not None and not pending.done()
        ):
            return
        self._last_write = now
        usages, self._pending_usage = self._pending_usage, []
        write = asyncio.get_running_loop().run_in_executor(
            None, self._store.runs.heartbeat, self._key, self._owner, self._lease_seconds, self._run_uuid, steps, usages
        )
        write.add_done_callback(lambda done: self._note_step_write(done, usages))
        self._step_write = write

    def _note_step_write(self, done: asyncio.Future[bool], usages: list[tuple[int, int]]) -> None:
        if done.cancelled():
            return
        error = done.exception()
        if error is not None:
            if store_unavailable(error):
                # Written with the next step instead; the next checkpoint waits for the store.
                self._pending_usage[:0] = usages
                self._unconfirmed = True
                return
            log.warning("run %s: could not record its progress: %s", self._run_uuid, type(error).__name__)
        elif not done.result():
            self._lost = True

    async def await_step_write(self) -> None:
        """Wait for the step's progress write; stop if it found the lease taken."""
        pending = self._step_write
        if pending is not None and not pending.done():
            await asyncio.wait({pending})
        if self._lost:
            raise self._lease_lost()

    def record_usage(self, usage: TokenUsage) -> None:
        """Queue a model call's usage; the step's heartbeat writes it in its transaction."""
        self._pending_usage.append((usage.prompt_tokens, usage.completion_tokens))

    def _flush_usage(self) -> None:
        """Write usage not yet written by a heartbeat (calls after the last one)."""
        self._store.runs.record_usages(self._run_uuid, self._key, self._pending_usage)
        self._pending_usage = []  # after the write: a store away keeps them for the next try

    async def __aenter__(self) -> RunLedger:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        """Wait for the run's last progress write, so nothing lands after its end, and
        write the usage no heartbeat took."""
        pending, self._step_write = self._step_write, None
        if pending is not None:
            await asyncio.wait({pending})
        await through_store_outage(self._flush_usage, self._who())
