"""What one run writes to the state store while it works: its progress and its lease.

A `RunLedger` is made for a run as it starts and bound to it then (task key, run id,
the worker's lease), so the loop and its steering are handed the ledger's parts and
never the task: `step` (the per-step heartbeat: steps, token usage, the lease extended),
`record_usage` (a model call's usage, written with the next step), and the lease check
at each checkpoint (`LeaseGuard`). Leaving the ledger (`async with`) waits for the last
progress write and writes the usage no heartbeat took, so nothing lands after the run.
"""

from __future__ import annotations

import asyncio
import logging
import time
from types import TracebackType

from coding_agent.agent.loop import Checkpoint, Decision, Steering
from coding_agent.agent.steering import LeaseLost
from coding_agent.domain.lease import LeaseWatch
from coding_agent.domain.ports import RunStore
from coding_agent.llm.base import LLMClient
from coding_agent.llm.types import TokenUsage

__all__ = ["RunLedger", "LeaseGuard"]

# The runner's logger: these lines read as the run's, as before they moved here.
log = logging.getLogger("coding_agent.agent.runner")


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
            None, self._store.heartbeat, self._key, self._owner, self._lease_seconds, self._run_uuid, steps, usages
        )
        write.add_done_callback(self._note_step_write)
        self._step_write = write

    def _note_step_write(self, done: asyncio.Future[bool]) -> None:
        if done.cancelled():
            return
        if done.exception() is not None:
            log.warning("run %s: could not record its progress: %s", self._run_uuid, type(done.exception()).__name__)
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
        usages, self._pending_usage = self._pending_usage, []
        self._store.record_usages(self._run_uuid, self._key, usages)

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
        await asyncio.to_thread(self._flush_usage)


class LeaseGuard:
    """The run's steering, behind a lease check at every checkpoint: the step's progress
    write (started when the reply came, in a thread) is awaited there, so a lease found
    taken stops the run before the reply is acted on."""

    def __init__(self, inner: Steering, ledger: RunLedger) -> None:
        self._inner, self._ledger = inner, ledger

    async def checkpoint(self, point: Checkpoint, llm: LLMClient) -> Decision:
        self._ledger.check_lease()
        await self._ledger.await_step_write()
        return await self._inner.checkpoint(point, llm)
