"""The agent as a process: a producer that finds work, a queue, and workers that take the
next task as soon as a slot is free (SPEC 11.1). No cycle barrier anywhere: a long task
never holds up polling or the start of other tasks.

- `run_cycle` (`run --once`): one producer cycle, then the queue is worked until empty.
- `serve`: the producer every `scheduling.interval_seconds` and the workers, together.
- `produce` / `work`: the split roles (`producer`, `worker`) for a shared RabbitMQ queue.

Claims happen in a worker slot, so a busy process never holds tasks it cannot start
yet: another process polling the same forge can take them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from sqlalchemy.exc import OperationalError

from coding_agent.agent.runner import RunResult, TaskRunner
from coding_agent.agent.steering import RunControls, ShutdownSignal
from coding_agent.config import AgentConfig
from coding_agent.context.memory import MemoryKeeper
from coding_agent.context.storage import ContextStorage
from coding_agent.llm.base import LLMClient
from coding_agent.redaction import Redactor
from coding_agent.runtime.budgets import Budgets
from coding_agent.runtime.ci_watch import CiWatcher
from coding_agent.runtime.cleanup import Cleanup
from coding_agent.runtime.followups import FollowUpIntake
from coding_agent.runtime.intake import Intake
from coding_agent.runtime.producer import Producer, ProducerReport
from coding_agent.runtime.queue import TaskQueue
from coding_agent.runtime.queue.factory import open_queue
from coding_agent.runtime.queue.memory import MemoryQueue
from coding_agent.runtime.recovery import Recovery
from coding_agent.runtime.worker import Outcome, Workers
from coding_agent.sources.base import Source
from coding_agent.sources.factory import create_sources, retry_policy
from coding_agent.store.leases import new_owner_id
from coding_agent.store.memories import MemoryStore
from coding_agent.store.queue_entries import QueueEntries
from coding_agent.store.state import StateStore, store_unreachable
from coding_agent.workspace.session import RunWorkspaces

__all__ = ["AgentService", "CycleReport"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CycleReport:
    """What one producer cycle found and what the workers did with the queue."""

    discovered: int
    results: tuple[RunResult, ...]
    errors: tuple[str, ...]


def _report(discovered: int, errors: tuple[str, ...], outcomes: list[Outcome]) -> CycleReport:
    results = tuple(outcome for outcome in outcomes if isinstance(outcome, RunResult))
    return CycleReport(discovered, results, errors + tuple(outcome for outcome in outcomes if isinstance(outcome, str)))


class AgentService:
    def __init__(
        self,
        config: AgentConfig,
        sources: list[Source] | None = None,
        store: StateStore | None = None,
        llm_factory: Callable[[], LLMClient] | None = None,
    ) -> None:
        self.config = config
        self.redactor = Redactor(config.secrets())
        self.store = store or StateStore(config.database.url)
        self.sources = sources if sources is not None else create_sources(config)
        self.owner = new_owner_id()
        self.budgets = Budgets(config, self.store.spend, self.redactor, owner=self.owner)
        self.ci = self._ci_watcher()
        self.intake, self.followups = self._intakes()
        self.shutdown = ShutdownSignal()
        self.controls = RunControls(config, self.store, self.redactor, self.owner, self.shutdown)
        # Read at each step's start; the limits are the process's config, so without any
        # daily budget a step pays nothing for them.
        self.controls.budget = self.budgets.pause_comment if self.budgets.enabled else None
        self.workspaces = RunWorkspaces(config.workspace, retry_policy(config), self.redactor)
        self.runner = TaskRunner(
            config,
            self.store,
            self.redactor,
            self.owner,
            llm_factory,
            self.controls,
            self._memories(),
            workspaces=self.workspaces,
        )
        storage = ContextStorage(config.context_storage.base_dir, self.redactor)
        self.recovery = Recovery(
            config, self.store, storage, self.controls, self.intake, self.followups, self.budgets
        )
        self.cleanup = Cleanup(config, self.store)
        self.entries = self._queue_entries()
        self.producer = self._producer()
        self.workers = Workers(
            config,
            self.sources,
            self.store,
            self.owner,
            self.runner,
            self.intake,
            self.followups,
            self.recovery,
            self.entries,
            self.redactor,
            self.shutdown,
            self.producer.snapshots,
            self.ci,
        )
        self._queue: TaskQueue | None = None

    def _ci_watcher(self) -> CiWatcher | None:
        """The CI watches (SPEC 16); None when CI feedback is off, so nothing of it runs."""
        if not self.config.ci.enabled:
            return None
        return CiWatcher(self.config, self.store, self.sources, self.owner, self.redactor, self.budgets)

    def _producer(self) -> Producer:
        """The poll: discovery, follow-up candidates (less those examined as they stand)
        and the CI watches, offered to this process's queue entries."""
        return Producer(
            self.config,
            self.sources,
            self.recovery,
            self.entries,
            self.redactor,
            self.store.tasks.note_task,
            self.ci,
            self.followups.unchanged,
        )

    def _intakes(self) -> tuple[Intake, FollowUpIntake]:
        """The two ways a task is claimed: a labelled issue or PR/MR, and a follow-up
        comment on one the agent worked; both hold the same lease and budgets."""
        config, lease = self.config, self.config.scheduling.lease_seconds
        intake = Intake(
            self.store,
            self.owner,
            lease,
            self.redactor,
            config.language,
            config.security.allow_untrusted_triggers,
            self.budgets,
        )
        followups = FollowUpIntake(
            self.store,
            self.owner,
            lease,
            self.redactor,
            config.language,
            config.comment_handling.completion_keywords,
            config.security.allow_untrusted_triggers,
            self.budgets,
            self.ci,
        )
        return intake, followups

    def _memories(self) -> MemoryKeeper | None:
        """The worker's memory keeper over the state store's database; None when memories are off."""
        if not self.config.memory.enabled:
            return None
        return MemoryKeeper(MemoryStore(self.store.engine), self.config.memory, self.redactor, time.time)

    def _queue_entries(self) -> QueueEntries:
        """The queued keys of this process's queue: a shared queue's are shared by every
        process that names it, a memory queue's are this process's alone."""
        backend, lease = self.config.queue.backend, self.config.scheduling.lease_seconds
        scope = f"{backend}:{self.config.queue.name}" if backend != "memory" else f"memory:{self.owner}"
        # A queued key not picked up in this time is offered again (a lost message).
        return QueueEntries(self.store.engine, scope, stale_seconds=max(3600.0, 2 * lease))

    async def queue(self) -> TaskQueue:
        """The configured queue, opened on first use (RabbitMQ down: its connection error)."""
        if self._queue is None:
            self._queue = await open_queue(self.config)
        return self._queue

    def request_shutdown(self, grace: float | None = None, finish: float = 0.0) -> None:
        """Graceful shutdown (SIGTERM): running runs pause at their next checkpoint, none
        start. `grace`: a model request or tool call in flight after it is cut (the caller
        calls `shutdown.cut()` then), and the pauses' writes end `finish` later
        (`runtime.shutdown`); None: no bound."""
        if grace is None:
            self.shutdown.set()
        else:
            self.shutdown.begin(grace, finish)

    async def run_cycle(self) -> CycleReport:
        """`run --once`: one producer cycle, and the queue worked until it is empty."""
        queue = await self.queue()
        produced, outcomes = await self._produce_and_drain(queue, self.producer.cycle(queue))
        return _report(produced.discovered, produced.errors, outcomes)

    async def continue_runs(self, only: set[str] | None = None) -> CycleReport:
        """Only the runs to continue (paused and released, or orphaned), e.g. for `resume`."""
        queue = MemoryQueue()  # these runs only, whatever else the shared queue holds
        produced, outcomes = await self._produce_and_drain(queue, self.producer.cycle(queue, only, discover=False))
        return _report(len(produced.enqueued), produced.errors, outcomes)

    async def _produce_and_drain(
        self, queue: TaskQueue, cycle: Coroutine[Any, Any, ProducerReport]
    ) -> tuple[ProducerReport, list[Outcome]]:
        """The producer's `cycle` and the workers at once: a task offered early starts in
        a free slot while the cycle goes on (its follow-up searches, say), and the workers
        stop once the cycle has ended and the queue is empty. A cycle that fails raises
        after the work it queued before failing is done."""
        produced = asyncio.Event()

        async def produce() -> ProducerReport:
            try:
                return await cycle
            finally:
                produced.set()

        producing = asyncio.create_task(produce())
        try:
            outcomes = await self.workers.run(queue, produced=produced)
        except BaseException:
            producing.cancel()
            await asyncio.gather(producing, return_exceptions=True)
            raise
        return await producing, outcomes

    async def produce(self, stop: asyncio.Event) -> None:
        """The producer role: a cycle every `scheduling.interval_seconds` until `stop`."""
        queue = await self.queue()
        interval = self.config.scheduling.interval_seconds
        while not stop.is_set() and not self.shutdown.is_set():
            try:
                await asyncio.to_thread(self.cleanup.maybe_run)  # retention (SPEC 9.3), once a day
            except OperationalError as error:  # the store is away: the next cycle tries again
                log.error("cleanup: %s; tried again at the next cycle", store_unreachable(error, self.redactor))
            try:
                await self.producer.cycle(queue)
            except Exception:  # unforeseen (a bug, a race lost twice): that poll is lost, not serve
                log.exception("poll: failed; the next cycle tries again")
            try:
                await asyncio.wait_for(stop.wait(), timeout=interval)
            except TimeoutError:
                pass

    @property
    def restart_due(self) -> bool:
        """Whether `serve`/`worker` stopped taking work to start afresh
        (`scheduling.restart_after_runs`), rather than for a signal."""
        return self.workers.restart_due.is_set() and not self.shutdown.is_set()

    async def work(self, stop: asyncio.Event) -> None:
        """The worker role: take queued tasks as slots free up, until `stop` or a restart is due."""
        queue = await self.queue()
        await self._until_stop_or_restart(stop, lambda halt: self.workers.run(queue, halt))

    async def serve(self, stop: asyncio.Event) -> None:
        """Producer and workers in one process, until `stop` (or a graceful shutdown, or a
        restart due)."""
        queue = await self.queue()
        await self._until_stop_or_restart(
            stop, lambda halt: asyncio.gather(self.produce(halt), self.workers.run(queue, halt))
        )

    async def _until_stop_or_restart(self, stop: asyncio.Event, work: Callable[[asyncio.Event], Awaitable[Any]]) -> None:
        """`work(halt)`, with `halt` set once `stop` is or a restart is due: the poll ends
        its cycle, each slot its run, and neither starts another."""
        halt = asyncio.Event()

        async def until_halted() -> None:
            waits = [asyncio.ensure_future(event.wait()) for event in (stop, self.workers.restart_due)]
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for wait in waits:
                    wait.cancel()
            halt.set()

        watcher = asyncio.create_task(until_halted())
        try:
            await work(halt)
        finally:
            watcher.cancel()

    async def aclose(self) -> None:
        """The forge clients are closed before the queue: a broker that does not answer
        during a shutdown (whose close is then given up) leaves no connection unclosed."""
        if isinstance(self._queue, MemoryQueue):
            for item in self._queue.drain():  # lost with this process: let them be offered again
                self.entries.release(item.key)
        for source in self.sources:
            await source.aclose()
        if self._queue is not None:
            await self._queue.aclose()
        self.store.close()
