"""The agent as a process: discover, claim and work tasks, once (`run --once`) or forever
(`serve`), with up to `workers` tasks at once in one event loop.

Claims happen inside a worker slot, so a busy process never holds tasks it cannot start
yet: another process polling the same forge can take them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from coding_agent.agent.runner import RunResult, TaskRunner
from coding_agent.config import AgentConfig
from coding_agent.domain.tasks import Task
from coding_agent.errors import AgentError
from coding_agent.llm.base import LLMClient
from coding_agent.redaction import Redactor
from coding_agent.runtime.intake import Intake
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
        self.runner = TaskRunner(config, self.store, self.redactor, self.owner, llm_factory)
        self._slots = asyncio.Semaphore(config.workers)

    async def run_cycle(self) -> CycleReport:
        """Discover every source's pending tasks and work them, `workers` at a time."""
        found: list[tuple[Source, Task]] = []
        errors: list[str] = []
        for source in self.sources:
            try:
                tasks = await source.discover()
            except AgentError as error:
                message = f"{source.forge}: discovery failed: {self.redactor.text(str(error))}"
                log.error(message)
                errors.append(message)
                continue
            found.extend((source, task) for task in tasks)
        log.info("poll: %d pending task(s)", len(found))
        outcomes = await asyncio.gather(*(self._work(source, task) for source, task in found))
        results = tuple(result for result in outcomes if isinstance(result, RunResult))
        errors.extend(result for result in outcomes if isinstance(result, str))
        return CycleReport(len(found), results, tuple(errors))

    async def _work(self, source: Source, task: Task) -> RunResult | str | None:
        async with self._slots:
            try:
                claim = await self.intake.try_claim(source, task)
            except AgentError as error:
                message = f"{task.key}: claim failed: {self.redactor.text(str(error))}"
                log.error(message)
                return message
            if claim is None:
                return None
            return await self.runner.run(source, claim.task, claim.requester)

    async def serve(self, stop: asyncio.Event) -> None:
        """Poll every `scheduling.interval_seconds` until `stop` is set."""
        interval = self.config.scheduling.interval_seconds
        while not stop.is_set():
            await self.run_cycle()
            try:
                await asyncio.wait_for(stop.wait(), timeout=interval)
            except asyncio.TimeoutError:
                pass

    async def aclose(self) -> None:
        for source in self.sources:
            await source.aclose()
        self.store.close()
