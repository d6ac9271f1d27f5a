"""Daily budgets (SPEC 11.5): may this task start, or go on, now?

`budget.per_requester: {tokens_per_day, runs_per_day}` and `budget.per_repository:
{tokens_per_day}` cap what one person or one repository spends per UTC day. One question
answers every case: `Budgets.overrun(task_key, requester, starting)` is None when the
task may start (`starting`: one more run would begin) or go on, else the `Overrun` that
holds it (which budget, whose, the use, the limit, the reset). The claim asks it before
it labels a task processing, the producer before it offers a paused run to resume, and a
running run at each step's start (the runner's checkpoint), so a task held by a budget
starts by itself once the day turns or an operator raises the limit in the config.

A claim's `runs_per_day` check is also its record, in one store transaction
(`BudgetSpend.claim_run_start`): the run itself is recorded only once its workspace is
ready, and N workers claiming N tasks at once would otherwise all see the day's runs
before any of theirs (SPEC 15, "Spend past a budget").

Spend is read from the state store (token usage rows and runs since UTC midnight) and
credited to the requester who started the task, its first run's requester: follow-ups
and resumes count toward that person, whoever asked for them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol

from coding_agent.config import AgentConfig
from coding_agent.domain.tasks import Task, TaskKey
from coding_agent.prompts.notices import Language, notice
from coding_agent.redaction import Redactor
from coding_agent.sources.base import Source
from coding_agent.store.budget_spend import TaskSpend

__all__ = ["Budgets", "Overrun", "repository_of"]

log = logging.getLogger(__name__)

Unit = Literal["tokens", "runs"]


class SpendStore(Protocol):
    def spend_since(self, since: float) -> list[TaskSpend]: ...

    def starter_of(self, task_key: str) -> str | None: ...

    def note_budget_notice(self, task_key: str, day: str) -> bool: ...

    def claim_run_start(self, task_key: str, owner: str, starter: str, limit: int, since: float) -> int | None: ...


@dataclass(frozen=True)
class Overrun:
    """A daily budget that holds a task: `budget` is its config key, `kind` and `name`
    say whose (a requester's login, a repository as `forge:owner/repo`)."""

    budget: str
    kind: Literal["requester", "repository"]
    name: str
    unit: Unit
    used: int
    limit: int
    resets_at: datetime

    @property
    def day(self) -> str:
        """The UTC day this overrun belongs to (a task is told once per day)."""
        return (self.resets_at - timedelta(days=1)).date().isoformat()

    def comment(self, language: Language) -> str:
        """The comment on a held or paused task: which budget, the use, the reset."""
        return notice(
            "budget_held",
            language,
            budget=self.budget,
            who=notice(f"budget_who_{self.kind}", language, login=self.name),
            used=self.used,
            limit=self.limit,
            unit=notice(f"budget_unit_{self.unit}", language),
            resets=self.resets_at.strftime("%Y-%m-%d %H:%M UTC"),
        )


def repository_of(task_key: str) -> str:
    """The repository a task key belongs to, as the budgets name it: `forge:owner/repo`."""
    key = TaskKey.parse(task_key)
    return f"{key.forge}:{key.project}"


@dataclass(frozen=True)
class _Day:
    """The spend of the current UTC day, summed per requester and per repository."""

    resets_at: datetime
    requester_tokens: dict[str, int]
    requester_runs: dict[str, int]
    repository_tokens: dict[str, int]


def _over(
    budget: str, who: str | None, unit: Unit, used: dict[str, int], limit: int | None, day: _Day
) -> Overrun | None:
    """The overrun of budget `budget.<budget>` by `who` (None: not asked), or None."""
    if who is None or limit is None or used.get(who, 0) < limit:
        return None
    kind: Literal["requester", "repository"] = "requester" if budget.startswith("per_requester") else "repository"
    return Overrun(f"budget.{budget}", kind, who, unit, used.get(who, 0), limit, day.resets_at)


class Budgets:
    """The daily budgets over the state store's spend; the limits are read from `config`
    at each question, so a raised limit counts from the next one."""

    def __init__(
        self,
        config: AgentConfig,
        store: SpendStore,
        redactor: Redactor,
        clock: Callable[[], float] = time.time,
        owner: str | None = None,
    ) -> None:
        """`owner`: the lease owner of this process's claims, which `held` records against
        `runs_per_day` (None: a reader of the budgets, which claims nothing)."""
        self._config = config
        self._store = store
        self._redactor = redactor
        self._clock = clock
        self._owner = owner

    @property
    def enabled(self) -> bool:
        """Whether any daily budget is set (none: no question costs a store read)."""
        budget = self._config.budget
        limits = (
            budget.per_requester.tokens_per_day,
            budget.per_requester.runs_per_day,
            budget.per_repository.tokens_per_day,
        )
        return any(limit is not None for limit in limits)

    def overrun(self, task_key: str, requester: str | None, starting: bool) -> Overrun | None:
        """The budget that holds `task_key` now, or None. `requester`: who asked for this
        run, used when no earlier run of the task names who started it. `starting`: a new
        run would begin (runs count), rather than one going on or resuming."""
        if not self.enabled:
            return None
        day = self._today()
        budget = self._config.budget
        starter = self._store.starter_of(task_key) or requester
        repository = repository_of(task_key)
        person, place = budget.per_requester, budget.per_repository
        overruns = (
            _over("per_requester.tokens_per_day", starter, "tokens", day.requester_tokens, person.tokens_per_day, day),
            _over("per_repository.tokens_per_day", repository, "tokens", day.repository_tokens, place.tokens_per_day, day),
            _over(
                "per_requester.runs_per_day", starter if starting else None, "runs", day.requester_runs, person.runs_per_day, day
            ),
        )  # fmt: skip
        return next((overrun for overrun in overruns if overrun is not None), None)

    def pause_comment(self, task_key: str, requester: str | None) -> str | None:
        """For a running run at the start of a step: the comment to pause with, when a
        daily budget holds its task now (None: it goes on)."""
        overrun = self.overrun(task_key, requester, starting=False)
        return overrun.comment(self._config.language) if overrun is not None else None

    async def held(self, source: Source, task: Task, requester: str | None, starting: bool = True) -> bool:
        """Whether a budget holds `task` now; if so, it carries the paused label and is told
        once per UTC day which budget, the use and the reset (the caller starts nothing).
        It keeps its other labels: the trigger label brings it back at every poll, and a
        held paused run stays a paused run, until the budget lets it go."""
        if not self.enabled:
            return False
        key = str(task.key)
        overrun = await asyncio.to_thread(self._overrun_or_claim, key, requester, starting)
        if overrun is None:
            return False
        log.info(
            "%s: held by %s (%s: %d of %d %s used)",
            key, overrun.budget, overrun.name, overrun.used, overrun.limit, overrun.unit,
        )  # fmt: skip
        if not task.has_label(source.labels.paused_label):
            await source.add_label(task.key, source.labels.paused_label)
        if await asyncio.to_thread(self._store.note_budget_notice, key, overrun.day):
            await source.post_comment(task.key, self._redactor.text(overrun.comment(self._config.language)))
        return True

    def _overrun_or_claim(self, task_key: str, requester: str | None, starting: bool) -> Overrun | None:
        """`overrun`; then, for a run about to start under this process's lease with
        `runs_per_day` set, the check again and the claim's record in one transaction, so
        claims side by side count each other (None: claimed)."""
        overrun = self.overrun(task_key, requester, starting)
        limit = self._config.budget.per_requester.runs_per_day
        if overrun is not None or not starting or limit is None or self._owner is None:
            return overrun
        starter = self._store.starter_of(task_key) or requester
        if starter is None:
            return None  # nobody to count it toward, as `overrun` decided
        midnight = self._today_starts()
        used = self._store.claim_run_start(task_key, self._owner, starter, limit, midnight.timestamp())
        if used is None:
            return None
        resets_at = midnight + timedelta(days=1)
        return Overrun("budget.per_requester.runs_per_day", "requester", starter, "runs", used, limit, resets_at)

    def _today_starts(self) -> datetime:
        """UTC midnight of today, by the budgets' clock."""
        now = datetime.fromtimestamp(self._clock(), UTC)
        return now.replace(hour=0, minute=0, second=0, microsecond=0)

    def usage(self, requesters: Iterable[str] = ()) -> dict[str, Any]:
        """Today's use and what is left, per requester (those who spent today, and
        `requesters`) and per repository, for `status` and `/api/usage`: `{"requesters":
        {name: {budget key: {...}}}, "repositories": ..., "resets_at"}`, each budget as
        `{used, limit, left, resets_at}` (limit and left None: unlimited)."""
        day = self._today()
        budget = self._config.budget
        resets_at = day.resets_at.isoformat()

        def entry(used: int, limit: int | None) -> dict[str, Any]:
            left = None if limit is None else max(limit - used, 0)
            return {"used": used, "limit": limit, "left": left, "resets_at": resets_at}

        requesters = {
            name: {
                "tokens_per_day": entry(day.requester_tokens.get(name, 0), budget.per_requester.tokens_per_day),
                "runs_per_day": entry(day.requester_runs.get(name, 0), budget.per_requester.runs_per_day),
            }
            for name in sorted(set(day.requester_tokens) | set(day.requester_runs) | set(requesters))
        }
        repositories = {
            name: {"tokens_per_day": entry(used, budget.per_repository.tokens_per_day)}
            for name, used in sorted(day.repository_tokens.items())
        }
        return {"resets_at": resets_at, "requesters": requesters, "repositories": repositories}

    def _today(self) -> _Day:
        midnight = self._today_starts()
        requester_tokens: dict[str, int] = {}
        requester_runs: dict[str, int] = {}
        repository_tokens: dict[str, int] = {}
        for spend in self._store.spend_since(midnight.timestamp()):
            repository = repository_of(spend.task_key)
            repository_tokens[repository] = repository_tokens.get(repository, 0) + spend.tokens
            if spend.requester is not None:
                requester_tokens[spend.requester] = requester_tokens.get(spend.requester, 0) + spend.tokens
                requester_runs[spend.requester] = requester_runs.get(spend.requester, 0) + spend.runs
        return _Day(midnight + timedelta(days=1), requester_tokens, requester_runs, repository_tokens)
