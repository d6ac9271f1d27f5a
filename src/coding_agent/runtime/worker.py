"""The workers (SPEC 11.1): `workers` slots, each taking the next queued key as soon as it
is free, claiming the task, running it under a lease heartbeat, and acknowledging the
message only when the run reached done, failed, stopped or paused.

A message is a hint, never a decision, whoever published it (SPEC 15): a key outside the
configured scope is dropped before any forge request (`Scope`), the claim re-reads the
task and checks its labels, its lease and who triggered it, and a `continue` continues
only a run the state store knows of (`Recovery.try_take`), so a duplicate, stale or
forged key costs a look and nothing else.

A redelivered message (its worker stopped mid-run) whose task the stopped worker's lease
still holds does not keep a slot waiting: it is put back on the queue, as a run to
continue, to come again once that lease has run out, and the slot takes other work.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from sqlalchemy.exc import OperationalError

from coding_agent.agent.runner import RunResult, TaskRunner
from coding_agent.agent.steering import ShutdownSignal
from coding_agent.config import AgentConfig
from coding_agent.domain.tasks import Task, TaskKey
from coding_agent.errors import AgentError, QueueUnavailable
from coding_agent.redaction import Redactor
from coding_agent.runtime.ci_watch import CiFixClaim, CiWatcher
from coding_agent.runtime.followups import FollowUpIntake
from coding_agent.runtime.intake import Claim, Intake, ReviewClaim
from coding_agent.runtime.lease import LeaseHeartbeat
from coding_agent.runtime.native_memory import give_back_free_memory
from coding_agent.runtime.producer import source_for
from coding_agent.runtime.queue import Delivery, QueuedTask, TaskQueue
from coding_agent.runtime.recovery import Recovery, Takeover
from coding_agent.runtime.scope import Scope
from coding_agent.sources.base import Source
from coding_agent.store.queue_entries import QueueEntries
from coding_agent.store.state import StateStore, store_unreachable

__all__ = ["Workers", "Outcome"]

log = logging.getLogger(__name__)

# A message put back until a lease runs out comes again this much later than that, so that
# it finds the lease out (the holder's clock may lag a little).
LEASE_READ_MARGIN = 1.0

Outcome = RunResult | str | None  # a run's result, an error message, or nothing to do


class Workers:
    def __init__(
        self,
        config: AgentConfig,
        sources: list[Source],
        store: StateStore,
        owner: str,
        runner: TaskRunner,
        intake: Intake,
        followups: FollowUpIntake,
        recovery: Recovery,
        entries: QueueEntries,
        redactor: Redactor,
        shutdown: ShutdownSignal,
        snapshots: dict[str, Task],
        ci: CiWatcher | None = None,
    ) -> None:
        """`ci`: the CI watches (SPEC 16) a done run's push starts (None: CI feedback off)."""
        self._config = config
        self._ci = ci
        self._sources = sources
        self._store = store
        self._owner = owner
        self._runner = runner
        self._intake = intake
        self._followups = followups
        self._recovery = recovery
        self._entries = entries
        self._redactor = redactor
        self._shutdown = shutdown
        self._snapshots = snapshots
        self._scope = Scope(config)
        self._running: set[str] = set()  # queue keys this process is working now
        self._runs_ended = 0
        self._serving = False  # `serve`, `worker`: working until stopped (not `run --once`)
        # Set once `scheduling.restart_after_runs` runs have ended and none is in progress:
        # `serve` and `worker` then stop taking work and the process starts afresh.
        self.restart_due = asyncio.Event()
        self.on_event: Callable[[str, str], None] = lambda event, key: None  # observers (tests, metrics)

    async def run(
        self, queue: TaskQueue, stop: asyncio.Event | None = None, produced: asyncio.Event | None = None
    ) -> list[Outcome]:
        """Work the queue with `workers` slots until `stop`; with `produced` (`run --once`),
        until that is set (the producer's cycle has ended) and the queue is empty. The
        outcomes are kept for `run --once` only: `serve` and `worker` would hold one per
        task they ever worked (none is returned)."""
        outcomes: list[Outcome] = []
        self._serving = produced is None
        if self._serving:  # ready for the first task before it comes
            self._runner.libraries.load_soon()
        kept = outcomes if produced is not None else None
        slots = [self._slot(queue, stop, produced, kept) for _ in range(self._config.workers)]
        await asyncio.gather(*slots)
        return outcomes

    async def _slot(
        self,
        queue: TaskQueue,
        stop: asyncio.Event | None,
        produced: asyncio.Event | None,
        outcomes: list[Outcome] | None,
    ) -> None:
        while not self._shutdown.is_set() and not (stop is not None and stop.is_set()):
            try:
                delivery = await _next(queue, stop, produced)
            except QueueUnavailable as error:  # a look without waiting (`run --once`) found the broker away
                log.error("%s; this cycle takes no more work", error)
                return
            if delivery is None:
                return
            outcome: Outcome = None
            try:
                outcome = await self.handle(delivery.item, delivery.redelivered, queue)
                if outcomes is not None:
                    outcomes.append(outcome)
            finally:
                await self._done_with(delivery, outcome, queue)
            outcome = None  # nothing of the task stays with the slot while it waits

    async def _done_with(self, delivery: Delivery, outcome: Outcome, queue: TaskQueue) -> None:
        """Acknowledge the message; a run paused by the shutdown first goes back on a
        shared queue as a run to continue, so that another worker resumes it at once
        (SPEC 8.3). Both are bounded by the shutdown's time: a message the broker did
        not take back is offered again by the producer, which finds the paused run."""
        if isinstance(outcome, RunResult) and outcome.status == "paused" and self._shutdown.is_set() and queue.shared:
            await self._shutdown.bounded(self._give_back(queue, outcome.task_key), f"{outcome.task_key}: its queue message")
        await self._shutdown.bounded(delivery.ack(), f"{delivery.item.key}: the acknowledgement of its message")

    async def _give_back(self, queue: TaskQueue, key: str) -> None:
        try:
            if await asyncio.to_thread(self._entries.try_enqueue, key):
                await queue.put(QueuedTask(key, "continue"))
                log.info("%s: paused for the shutdown; back on the queue for the next worker", key)
        except Exception as error:  # the broker or the store away: the producer offers the paused run
            log.warning("%s: paused for the shutdown, but could not be queued again (%s)", key, type(error).__name__)

    async def handle(self, item: QueuedTask, redelivered: bool = False, queue: TaskQueue | None = None) -> Outcome:
        """Claim and run one queued task; the queue entry is released whatever happens.
        `queue`: where a redelivery that must wait for a lease is put back (None: it is
        dropped, and the producer offers the run once the lease has run out)."""
        key = item.key
        if key in self._running:
            # Delivered again while it runs here: RabbitMQ hands an unacknowledged message
            # back after a lost connection, maybe to this very process. Its run goes on; this
            # copy claims nothing and leaves the queue entry to that run.
            log.info("%s: delivered again while it runs here; dropped", key)
            return None
        self._running.add(key)
        source = source_for(self._sources, key)
        outcome: Outcome = None
        try:
            if source is None:
                log.error("%s: no configured source for this task key; dropped", key)
                return None
            if not await self._in_scope(source, key):
                log.warning("%s: outside the configured scope; dropped", key)
                return None
            picked_at = time.monotonic()  # its clone holds every push made before now
            self._runner.libraries.load_soon()  # `run --once`: while this task is claimed
            await asyncio.to_thread(self._entries.mark_running, key)
            self.on_event("picked", key)
            async with source.session():
                outcome = await self._claim_and_run(source, item, redelivered, picked_at, queue)
            return outcome
        except OperationalError as error:
            # The store went away before the run started (a run catches its own errors):
            # no run began. A lease the claim took runs out; the queue entry lapses
            # (`QueueEntries`), and the producer offers the task again.
            message = f"{key}: {store_unreachable(error, self._redactor)}; the task is offered again later"
            log.error(message)
            return message
        except Exception:  # unforeseen before the run (a bug, a race lost twice): not the worker's end
            log.exception("%s: could not be picked up; the task is offered again later", key)
            return f"{key}: could not be picked up (see the agent's log); the task is offered again later"
        finally:
            self._snapshots.pop(key, None)
            self._running.discard(key)
            try:
                await asyncio.to_thread(self._entries.release, key)
            except OperationalError as error:
                log.error("%s: %s; its queue entry lapses by itself", key, store_unreachable(error, self._redactor))
            if isinstance(outcome, RunResult):
                self._runs_ended += 1
                if not self._running:
                    await self._at_rest()

    async def _at_rest(self) -> None:
        """A run ended and none is left: what the runs freed goes back to the system (not
        after a look that ran nothing: a poll's follow-up checks are many), and after
        `scheduling.restart_after_runs` runs the process is due to start afresh.

        Python's allocator never hands back a 1 MiB arena while one block in it is alive,
        and the runs' peaks, laid out anew each time, leave a few long-lived blocks in
        more arenas as the runs go by: the resident set creeps up by about 0.5 MB per 100
        runs with no object growing in number (docs/performance.md). A fresh process
        image is the one way to give those arenas back."""
        await asyncio.to_thread(give_back_free_memory)
        limit = self._config.scheduling.restart_after_runs
        if self._serving and limit and self._runs_ended >= limit and not self._running and not self.restart_due.is_set():
            log.info(
                "%d runs ended since the process last started and none is in progress: it starts afresh "
                "to give its memory back (scheduling.restart_after_runs)",
                self._runs_ended,
            )
            self.restart_due.set()

    async def _claim_and_run(
        self, source: Source, item: QueuedTask, redelivered: bool, picked_at: float, queue: TaskQueue | None
    ) -> Outcome:
        key = item.key
        if self._shutdown.is_set() or self._recovery.paused_by_signal():
            return None  # released: the producer offers it again once the pause is lifted
        try:
            claimed = await self._claim(source, item)
            if claimed is None and redelivered:
                claimed = await self._after_stopped_worker(source, key, queue)
        except AgentError as error:
            message = f"{key}: claim failed: {self._redactor.text(str(error))}"
            log.error(message)
            return message
        if claimed is None:
            return None
        return await self._run(source, key, claimed, picked_at)

    async def _run(self, source: Source, key: str, claimed: Claim, picked_at: float) -> Outcome:
        continuation = claimed.continuation if isinstance(claimed, Takeover) else None
        reply_to = claimed.reply_to if isinstance(claimed, ReviewClaim) else None
        # The lease is the claimed task's: a review-thread follow-up queued under its PR/MR's
        # key runs (and holds the lease of) the issue the PR/MR was opened for.
        held = str(claimed.task.key)
        self.on_event("started", key)
        try:
            lease_seconds = self._config.scheduling.lease_seconds
            async with LeaseHeartbeat(self._store.leases, held, self._owner, lease_seconds) as lease:
                result = await self._runner.run(
                    source,
                    claimed.task,
                    claimed.requester,
                    continuation,
                    lease,
                    reply_to,
                    picked_at,
                    writers=claimed.writers,
                    ci_fix=claimed.ci_fix if isinstance(claimed, CiFixClaim) else None,
                )
            if self._ci is not None:
                await self._ci.after_run(source, claimed, result)
            return result
        except Exception:  # a bug in one run must not end `serve` or the other runs (SPEC 15)
            log.exception("%s: the run ended with an internal error", key)
            return f"{key}: the run ended with an internal error (see the agent's log)"
        finally:
            # Released by its end as a rule; a lease an internal error left behind is no
            # longer this process's run once it runs out: recovery here may take it over.
            self._store.leases.let_go(held, self._owner)
            self.on_event("ended", key)

    async def _in_scope(self, source: Source, key: str) -> bool:
        """Whether `key`'s repository is one this agent works; read from the forge only
        when the key cannot tell (then kept as the claim's snapshot)."""
        verdict = self._scope.of_key(TaskKey.parse(key))
        if verdict is False:
            return False
        # A GitHub App's source narrows the scope to its installations' repositories.
        refusal = getattr(source, "refusal", None)
        if refusal is not None:
            reason = await refusal(TaskKey.parse(key).project)
            if reason is not None:
                log.warning("%s: not started: %s", key, reason)
                return False
        if verdict is not None:
            return verdict
        task = self._snapshots.get(key) or await source.get_task(TaskKey.parse(key))
        self._snapshots[key] = task
        return self._scope.admits(task)

    async def _claim(self, source: Source, item: QueuedTask) -> Claim | None:
        if item.reason == "continue":
            return await self._recovery.try_take(source, item.key)
        task = self._snapshots.get(item.key) or await source.get_task(TaskKey.parse(item.key))
        claim: Callable[[Source, Task], Awaitable[Claim | None]] = (
            self._followups.try_claim if item.reason == "followup" else self._intake.try_claim
        )
        return await claim(source, task)

    async def _after_stopped_worker(self, source: Source, key: str, queue: TaskQueue | None) -> Claim | None:
        """The message came back from a worker that stopped holding it: continue what that
        worker left, once its lease has run out.

        Until then the message is put back, as a run to continue, to be handed out when the
        lease runs out (read again then: a holder that renewed it meanwhile is alive after
        all, and the task is its own). The slot takes other work meanwhile."""
        lease = await asyncio.to_thread(self._store.leases.live_lease, key)
        if lease is None:
            return await self._recovery.try_take(source, key)
        if lease.owner == self._owner:
            return None  # a run of this process holds it (under another queue key): not stopped
        if queue is not None:
            delay = lease.seconds_left + LEASE_READ_MARGIN
            log.info("%s: redelivered while %s holds its lease; put back for %.0f s, until it runs out", key, lease.owner, delay)
            await queue.put(QueuedTask(key, "continue"), delay=delay)
        return None


async def _next(queue: TaskQueue, stop: asyncio.Event | None, produced: asyncio.Event | None = None) -> Delivery | None:
    if produced is not None:
        if not produced.is_set():
            # The producer is still at it: wait for its next offer, or for its end.
            delivery = await _next(queue, produced)
            if delivery is not None:
                return delivery
        return await queue.get(wait=False)
    getting = asyncio.ensure_future(queue.get())
    if stop is None:
        return await getting
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({getting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if getting.done():
        return getting.result()
    getting.cancel()
    try:
        return await getting  # it may have completed just before the cancel
    except asyncio.CancelledError:
        return None
