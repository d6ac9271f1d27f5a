"""What the daily budgets read (SPEC 11.5): each task's spend since the start of the UTC
day, credited to the requester who started the task, and which task was already told
that a budget holds it (once a day)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import String, func, select
from sqlalchemy.orm import Mapped, mapped_column

from coding_agent.store.engine import Base, TableStore, again_if_changed_meanwhile, in_chunks
from coding_agent.store.runs import RunRow, _TokenUsage

__all__ = ["BudgetSpend", "TaskSpend"]


@dataclass(frozen=True)
class TaskSpend:
    """One task's spend since a moment: LLM tokens and runs started. `requester`: who
    started the task (its first run's requester), whom follow-ups and resumes count toward."""

    task_key: str
    requester: str | None
    tokens: int
    runs: int


class _BudgetNotice(Base):
    """The UTC day on which a task was last told that a budget holds it."""

    __tablename__ = "budget_notices"
    task_key: Mapped[str] = mapped_column(String(300), primary_key=True)
    day: Mapped[str] = mapped_column(String(10))


class BudgetSpend(TableStore):
    """The day's spend per task, and the once-a-day budget notices."""

    def spend_since(self, since: float) -> list[TaskSpend]:
        """Every task that used tokens or started a run at or after `since` (epoch seconds)."""
        with self._session() as session:
            tokens = dict(
                session.execute(
                    select(_TokenUsage.task_key, func.sum(_TokenUsage.prompt_tokens + _TokenUsage.completion_tokens))
                    .where(_TokenUsage.recorded_at >= since)
                    .group_by(_TokenUsage.task_key)
                ).all()
            )
            runs = dict(
                session.execute(
                    select(RunRow.task_key, func.count()).where(RunRow.started_at >= since).group_by(RunRow.task_key)
                ).all()
            )
            keys = set(tokens) | set(runs)
            starters: dict[str, str] = {}
            for chunk in in_chunks(sorted(keys)):
                rows = session.execute(
                    select(RunRow.task_key, RunRow.requester)
                    .where(RunRow.task_key.in_(chunk), RunRow.requester.is_not(None))
                    .order_by(RunRow.started_at)
                )
                for key, requester in rows:
                    starters.setdefault(key, requester)
        return [
            TaskSpend(key, starters.get(key), int(tokens.get(key) or 0), int(runs.get(key) or 0))
            for key in sorted(keys)
        ]

    def starter_of(self, task_key: str) -> str | None:
        """Who started `task_key`: its first run's requester (None: no run names one)."""
        with self._session() as session:
            return session.scalars(
                select(RunRow.requester)
                .where(RunRow.task_key == task_key, RunRow.requester.is_not(None))
                .order_by(RunRow.started_at)
                .limit(1)
            ).first()

    def note_budget_notice(self, task_key: str, day: str) -> bool:
        """Remember that `task_key` is told on `day` that a budget holds it; False when it
        was told that day already (recorded before the comment: a crash costs the comment,
        never a second one)."""

        def write() -> bool:
            with self._session() as session:
                row = session.get(_BudgetNotice, task_key)
                if row is None:
                    session.add(_BudgetNotice(task_key=task_key, day=day))
                    return True
                if row.day == day:
                    return False
                row.day = day
                return True

        return again_if_changed_meanwhile(write)
