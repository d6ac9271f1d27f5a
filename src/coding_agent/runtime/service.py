"""The agent as a process: discover, claim and work tasks, once (`run --once`) or forever
(`serve`), with up to `workers` tasks at once in one event loop.

Claims happen inside a worker slot, so a busy process never holds tasks it cannot start
yet: another process polling the same forge can take them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from coding_agent.agent.runner import RunResult, TaskRunner
from coding_agent.agent.steering import RunControls, ShutdownSignal
from coding_agent.config import AgentConfig
from coding_agent.context.storage import ContextStorage
from coding_agent.domain.tasks import Task
from coding_agent.errors import AgentError
from coding_agent.llm.base import LLMClient
from coding_agent.redaction import Redactor
from coding_agent.runtime.cleanup import Cleanup
from coding_agent.runtime.followups import FollowUpIntake
from coding_agent.runtime.intake import Claim, Intake
from coding_agent.runtime.lease import LeaseHeartbeat
from coding_agent.runtime.recovery import Recovery, Takeover
from coding_agent.runtime.state_store import StateStore, new_owner_id
from coding_agent.sources.base import Source
from coding_agent.sources.factory import create_sources

__all__ = ["AgentService", "CycleReport"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CycleReport:
    """What one poll cycle found and did."""

    discovered: int
    results: tuple[RunResult, ...]
    errors: tuple[str, ...]


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
        self.intake = Intake(
            self.store,
            self.owner,
            config.scheduling.lease_seconds,
            self.redactor,
            config.language,
            config.security.allow_untrusted_triggers,
        )
        self.shutdown = ShutdownSignal()
        self.controls = RunControls(config, self.store, self.redactor, self.owner, self.shutdown)
        self.runner = TaskRunner(config, self.store, self.redactor, self.owner, llm_factory, self.controls)
        self.recovery = Recovery(config, self.store, ContextStorage(config.context_storage.base_dir, self.redactor), self.controls)
        self._slots = asyncio.Semaphore(config.workers)
        self.followups = FollowUpIntake(
            self.store,
            self.owner,
            config.scheduling.lease_seconds,
            self.redactor,
            config.language,
            config.comment_handling.completion_keywords,
            config.security.allow_untrusted_triggers,
        )
        self.cleanup = Cleanup(config, self.store)

    def request_shutdown(self) -> None:
        """Graceful shutdown (SIGTERM): running runs pause at their next checkpoint, none start."""
        self.shutdown.set()

    async def run_cycle(self) -> CycleReport:
        """Continue paused and orphaned runs, discover every source's pending tasks, and work
        them all, `workers` at a time. While the pause signal file exists, nothing starts."""
        if self.recovery.paused_by_signal():
            log.info("poll: the pause signal %s is present; no task is started", self.controls.signal_file)
            return CycleReport(0, (), ())
        continued = self._continue_jobs()
        errors: list[str] = []
        found = await self._discover("discovery", lambda source: source.discover(), errors)
        # Done tasks with a possible new @mention of the bot (SPEC 3), unless already pending.
        since = datetime.now(timezone.utc) - timedelta(days=self.config.comment_handling.followup_days)
        pending = {str(task.key) for _, task in found}
        candidates = await self._discover("follow-up discovery", lambda source: source.discover_followups(since), errors)
        followups = [(source, task) for source, task in candidates if str(task.key) not in pending]
        log.info("poll: %d pending task(s), %d run(s) to continue", len(found), len(continued))
        jobs = [*continued, *(self._work(source, task) for source, task in found)]
        jobs += [self._work(source, task, self.followups.try_claim) for source, task in followups]
        outcomes = await asyncio.gather(*jobs)
        results = tuple(result for result in outcomes if isinstance(result, RunResult))
        errors.extend(result for result in outcomes if isinstance(result, str))
        return CycleReport(len(found), results, tuple(errors))

    async def continue_runs(self, only: set[str] | None = None) -> CycleReport:
        """Only the runs to continue (paused and released, or orphaned), e.g. for `resume`."""
        jobs = self._continue_jobs(only)
        outcomes = await asyncio.gather(*jobs)
        results = tuple(result for result in outcomes if isinstance(result, RunResult))
        return CycleReport(len(jobs), results, tuple(result for result in outcomes if isinstance(result, str)))

    def _continue_jobs(self, only: set[str] | None = None) -> list[Coroutine[Any, Any, RunResult | str | None]]:
        jobs = []
        for key in self.recovery.candidates(only):
            source = next((s for s in self.sources if key.startswith(f"{s.forge}:")), None)
            if source is not None:
                jobs.append(self._take_over(source, key))
        return jobs

    async def _take_over(self, source: Source, key: str) -> RunResult | str | None:
        return await self._claim_and_run(source, key, lambda: self.recovery.try_take(source, key))

    async def _discover(
        self, what: str, find: Callable[[Source], Awaitable[list[Task]]], errors: list[str]
    ) -> list[tuple[Source, Task]]:
        """`find` on every source; a source that fails is an error of this cycle, not its end."""
        found: list[tuple[Source, Task]] = []
        for source in self.sources:
            try:
                tasks = await find(source)
            except AgentError as error:
                message = f"{source.forge}: {what} failed: {self.redactor.text(str(error))}"
                log.error(message)
                errors.append(message)
                continue
            found.extend((source, task) for task in tasks)
        return found

    async def _work(
        self, source: Source, task: Task, claim_with: Callable[[Source, Task], Awaitable[Claim | None]] | None = None
    ) -> RunResult | str | None:
        claim = claim_with or self.intake.try_claim
        return await self._claim_and_run(source, str(task.key), lambda: claim(source, task))

    async def _claim_and_run(
        self, source: Source, key: str, claim: Callable[[], Awaitable[Claim | None]]
    ) -> RunResult | str | None:
        """In a worker slot: claim (a new task, or a run to continue), then run it."""
        async with self._slots:
            if self.shutdown.is_set():
                return None
            try:
                claimed = await claim()
            except AgentError as error:
                message = f"{key}: claim failed: {self.redactor.text(str(error))}"
                log.error(message)
                return message
            if claimed is None:
                return None
            continuation = claimed.continuation if isinstance(claimed, Takeover) else None
            async with LeaseHeartbeat(self.store, key, self.owner, self.config.scheduling.lease_seconds) as lease:
                return await self.runner.run(source, claimed.task, claimed.requester, continuation, lease)

    async def serve(self, stop: asyncio.Event) -> None:
        """Poll every `scheduling.interval_seconds` until `stop` is set."""
        interval = self.config.scheduling.interval_seconds
        while not stop.is_set():
            self.cleanup.maybe_run()  # retention (SPEC 9.3), once a day
            await self.run_cycle()
            try:
                await asyncio.wait_for(stop.wait(), timeout=interval)
            except asyncio.TimeoutError:
                pass

    async def aclose(self) -> None:
        for source in self.sources:
            await source.aclose()
        self.store.close()
