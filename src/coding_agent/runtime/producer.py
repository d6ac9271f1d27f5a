"""The producer (SPEC 11.1): finds work and puts task keys on the queue, once each.

Work is: runs to continue (paused runs whose pause is lifted, dead workers' runs; from
the state store), tasks carrying the trigger label, and done tasks with a possible new
@mention (from the forge). The producer claims nothing and runs nothing: a worker does,
in a free slot, so a long task never holds up polling (no cycle barrier). Each key is
enqueued at most once while it is queued or running (`QueueEntries`).

The snapshots of discovered tasks are kept for workers of the same process, which then
claim from them as before (the claim re-reads the task anyway) instead of fetching each
task once more.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy.exc import OperationalError

from coding_agent.config import AgentConfig
from coding_agent.domain.tasks import Task
from coding_agent.errors import AgentError, QueueUnavailable
from coding_agent.redaction import Redactor
from coding_agent.runtime.ci_watch import CiWatcher
from coding_agent.runtime.queue import QueuedTask, Reason, TaskQueue
from coding_agent.runtime.recovery import Recovery
from coding_agent.sources.base import Source
from coding_agent.store.queue_entries import QueueEntries
from coding_agent.store.state import store_unreachable

__all__ = ["Producer", "ProducerReport", "source_for"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProducerReport:
    discovered: int
    enqueued: tuple[QueuedTask, ...]
    errors: tuple[str, ...]


def source_for(sources: list[Source], key: str) -> Source | None:
    return next((source for source in sources if key.startswith(f"{source.forge}:")), None)


class Producer:
    def __init__(
        self,
        config: AgentConfig,
        sources: list[Source],
        recovery: Recovery,
        entries: QueueEntries,
        redactor: Redactor,
        note_task: Callable[[str, str, str | None], None] = lambda key, title, url: None,
        ci: CiWatcher | None = None,
        unchanged: Callable[[list[Task]], set[str]] = lambda tasks: set(),
    ) -> None:
        """`note_task(key, title, url)`: records what a queued task is (the state store's
        `note_task`), so the dashboard names a waiting task before any run starts. `ci`:
        the CI watches (SPEC 16) each poll looks at (None: CI feedback off).
        `unchanged(tasks)`: the follow-up candidates examined already as they stand
        (`FollowUpIntake.unchanged`), not offered again."""
        self._config = config
        self._ci = ci
        self._note_task = note_task
        self._unchanged = unchanged
        self._sources = sources
        self._recovery = recovery
        self._entries = entries
        self._redactor = redactor
        self.snapshots: dict[str, Task] = {}
        # Keys between their queue entry and their message (an offer that has recorded
        # `queued` and not yet put its message): what the queue does not hold yet.
        self._offering: Counter[str] = Counter()
        self.cycles = 0  # finished looks for work (observed by tests and the dashboard)
        # Set by a webhook that changed the scope (a GitHub App's installation): the
        # producer's loop looks for work now instead of at the end of its interval.
        self.look_now = asyncio.Event()

    async def cycle(self, queue: TaskQueue, only: set[str] | None = None, discover: bool = True) -> ProducerReport:
        """One look for work. While the pause signal file exists, nothing is enqueued."""
        if self._recovery.paused_by_signal():
            log.info("poll: the pause signal is present; no task is started")
            return ProducerReport(0, (), ())
        enqueued: list[QueuedTask] = []
        errors: list[str] = []
        found: list[Task] = []
        try:
            if discover:  # a full poll, on the service's own queue
                await self._release_lost(queue)
            for key in await asyncio.to_thread(self._recovery.candidates, only):
                await self._offer(queue, key, "continue", enqueued)
            if not discover:
                self.cycles += 1
                return ProducerReport(0, tuple(enqueued), ())
            found = await self._discover("discovery", lambda source: source.discover(), errors)
            log.info("poll: %d pending task(s), %d run(s) to continue", len(found), len(enqueued))
            # Offered before the follow-up searches: a free worker starts on them while
            # this poll goes on (with a real forge, each search takes a while).
            for task in found:
                await self._offer(queue, str(task.key), "new", enqueued, task)
            # The watched PRs/MRs' CI, one request each; looked at before the follow-up
            # candidates are offered, whose examination holds the same task's lease (a
            # watch finding its lease busy waits for the next poll). A PR/MR whose fix is
            # offered or running is not a candidate of this poll: the look at its review
            # threads would take the lease from under the fix's claim.
            fixing: set[str] = set()
            if self._ci is not None:
                fixing = await self._ci.poll(lambda key: self._offer(queue, key, "followup", enqueued))
            since = datetime.now(UTC) - timedelta(days=self._config.comment_handling.followup_days)
            pending = {str(task.key) for task in found} | fixing
            await self._offer_followups(
                "follow-up discovery", lambda source: source.discover_followups(since), pending, queue, enqueued, errors
            )
            # The agent's own PRs/MRs: review threads there ask for more on their issue (SPEC 3).
            await self._offer_followups(
                "review follow-up discovery",
                lambda source: source.discover_review_followups(since),
                pending,
                queue,
                enqueued,
                errors,
            )
        except (QueueUnavailable, OperationalError) as error:
            # The broker or the state store is away (a restart, a network blip, a failover):
            # what is not enqueued is offered again by the next cycle, once it is back (the
            # store's pool connects again at its next use: `pool_pre_ping`).
            cause = store_unreachable(error, self._redactor) if isinstance(error, OperationalError) else str(error)
            message = f"poll: {cause}; the rest waits for the next cycle"
            log.error(message)
            errors.append(message)
        self.cycles += 1
        return ProducerReport(len(found), tuple(enqueued), tuple(errors))

    async def _release_lost(self, queue: TaskQueue) -> None:
        """Agree with the queue before looking for work: a task whose `queued` entry lost
        its message (an outage, a purged queue) is offered again by this very poll."""
        held = await queue.held()
        if held is None:
            return
        # An offer whose entry was recorded before the queue's answer and whose message
        # goes out after it (a webhook's, say) has lost nothing.
        keys = held.keys | frozenset(self._offering)
        lost = await asyncio.to_thread(self._entries.release_lost, keys, held.as_of)
        if lost:
            log.warning("poll: %d queued task(s) had no message left in queue %s; offered again", len(lost), queue.name)

    def scope_changed(self) -> None:
        """A GitHub App's installations changed (a webhook): every source forgets what it
        knew of them, and the next look for work starts now."""
        for source in self._sources:
            forget = getattr(source, "scope_changed", None)
            if forget is not None:
                forget()
        self.look_now.set()

    async def offer(self, queue: TaskQueue, key: str, reason: Reason) -> bool:
        """Enqueue one key (a webhook's hint), unless it is queued or running already."""
        return await self._offer(queue, key, reason, [])

    async def _offer(
        self, queue: TaskQueue, key: str, reason: Reason, enqueued: list[QueuedTask], task: Task | None = None
    ) -> bool:
        self._offering[key] += 1
        try:
            return await self._enqueue(queue, key, reason, enqueued, task)
        finally:
            self._offering[key] -= 1
            if self._offering[key] <= 0:
                del self._offering[key]

    async def _enqueue(
        self, queue: TaskQueue, key: str, reason: Reason, enqueued: list[QueuedTask], task: Task | None
    ) -> bool:
        if not await asyncio.to_thread(self._entries.try_enqueue, key):
            log.debug("%s: already queued or running", key)
            return False
        if task is not None:
            self.snapshots[key] = task
            await asyncio.to_thread(self._note_task, key, task.title, task.url)
        item = QueuedTask(key, reason)
        try:
            await queue.put(item)
        except BaseException:
            await asyncio.to_thread(self._entries.release, key)
            raise
        enqueued.append(item)
        return True

    async def _offer_followups(
        self,
        what: str,
        pages: Callable[[Source], AsyncGenerator[list[Task], None]],
        pending: set[str],
        queue: TaskQueue,
        enqueued: list[QueuedTask],
        errors: list[str],
    ) -> None:
        """Offer the follow-up candidates of every source, one page of them at a time: with
        many open PRs of the agent, a poll held them all at once (a thousand snapshots),
        and that peak, each poll, grew the process's memory (docs/performance.md).

        A candidate offered or running already (`pending`) is not offered, nor one examined
        already at its `updated_at`: each poll would queue (and keep a snapshot of) every
        one of them, only for its worker to find it unchanged. A source that fails is an
        error of this cycle, not its end; what its earlier pages offered stays offered."""
        for source in self._sources:
            try:
                async with aclosing(pages(source)) as listed:
                    async for page in listed:
                        candidates = [task for task in page if str(task.key) not in pending]
                        unchanged = await asyncio.to_thread(self._unchanged, candidates) if candidates else set()
                        for task in candidates:
                            if str(task.key) not in unchanged:
                                await self._offer(queue, str(task.key), "followup", enqueued, task)
            except AgentError as error:
                errors.append(self._source_failed(source, what, error))

    async def _discover(self, what: str, find: Callable[[Source], Awaitable[list[Task]]], errors: list[str]) -> list[Task]:
        """`find` on every source; a source that fails is an error of this cycle, not its end."""
        found: list[Task] = []
        for source in self._sources:
            try:
                found.extend(await find(source))
            except AgentError as error:
                errors.append(self._source_failed(source, what, error))
        return found

    def _source_failed(self, source: Source, what: str, error: AgentError) -> str:
        """The cycle's error for `what` failing on `source`, logged (redacted)."""
        message = f"{source.forge}: {what} failed: {self._redactor.text(str(error))}"
        log.error(message)
        return message
