"""What the daily budgets read (SPEC 11.5): each task's spend since the start of the UTC
day, credited to the requester who started the task, and which task was already told
that a budget holds it (once a day); and the claims that passed a `runs_per_day` check,
made in the same transaction as the check (`claim_run_start`, SPEC 15)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import cast

from sqlalchemy import Float, String, Table, and_, delete, exists, func, insert, or_, select, update
from sqlalchemy.orm import Mapped, Session, mapped_column

from coding_agent.store.engine import Base, TableStore, again_if_changed_meanwhile, in_chunks, rowcount
from coding_agent.store.leases import LEASES
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


class _RunClaim(Base):
    """A claim that passed the `runs_per_day` check of `starter`: it counts as one of their
    runs while `owner` holds the task's lease and no run of the task started since."""

    __tablename__ = "run_claims"
    task_key: Mapped[str] = mapped_column(String(300), primary_key=True)
    owner: Mapped[str] = mapped_column(String(100))
    starter: Mapped[str] = mapped_column(String(200), index=True)
    claimed_at: Mapped[float] = mapped_column(Float)


class _BudgetLock(Base):
    """One row per requester, written first by a check-and-claim: the row lock (PostgreSQL)
    or the write lock (SQLite) it takes holds every other check-and-claim for that
    requester until this one commits."""

    __tablename__ = "budget_locks"
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    touched_at: Mapped[float] = mapped_column(Float)


# `__table__` is typed as any `FromClause`; these are tables (what insert/update/delete take).
_CLAIMS = cast(Table, _RunClaim.__table__)
_LOCKS = cast(Table, _BudgetLock.__table__)


class BudgetSpend(TableStore):
    """The day's spend per task, the once-a-day budget notices, and the runs budget's
    claims."""

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
            starters = _starters(session, keys)
        return [
            TaskSpend(key, starters.get(key), int(tokens.get(key) or 0), int(runs.get(key) or 0))
            for key in sorted(keys)
        ]

    def claim_run_start(self, task_key: str, owner: str, starter: str, limit: int, since: float) -> int | None:
        """Check `starter`'s `runs_per_day` and claim one run of `task_key` for `owner` (who
        holds its lease), as one transaction: None when claimed, else the runs `starter`
        used since `since` (the start of the UTC day), `limit` or more.

        Used counts the runs started since `since` of the tasks `starter` started, and the
        claims of theirs not run yet (their lease live, no run of their task since). The
        transaction first writes `starter`'s lock row, so a second check-and-claim for them
        waits for this one's commit and then counts its claim: N workers claiming N tasks
        at once cannot all pass a limit of one (SPEC 15), on SQLite or PostgreSQL."""

        def claim() -> int | None:
            now = self._clock()
            with self._session() as session:
                locked = session.execute(update(_LOCKS).where(_LOCKS.c.name == starter).values(touched_at=now))
                if rowcount(locked) == 0:  # a first claim for them: another may insert it too (then again)
                    session.execute(insert(_LOCKS).values(name=starter, touched_at=now))
                used = _runs_started_by(session, starter, since) + _claims_pending(session, starter, since, now, task_key)
                if used >= limit:
                    return used
                # This task's earlier claim, and the starter's claims of past days: rows no
                # other check-and-claim touches meanwhile (the lease, the lock row), so two
                # of them never wait on each other's deletes.
                stale = and_(_CLAIMS.c.starter == starter, _CLAIMS.c.claimed_at < since)
                session.execute(delete(_CLAIMS).where(or_(_CLAIMS.c.task_key == task_key, stale)))
                session.execute(insert(_CLAIMS).values(task_key=task_key, owner=owner, starter=starter, claimed_at=now))
                return None

        return again_if_changed_meanwhile(claim)

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


def _starters(session: Session, keys: Iterable[str]) -> dict[str, str]:
    """Who started each of `keys`: its first run's requester (keys no run names: absent)."""
    starters: dict[str, str] = {}
    for chunk in in_chunks(sorted(keys)):
        rows = session.execute(
            select(RunRow.task_key, RunRow.requester)
            .where(RunRow.task_key.in_(chunk), RunRow.requester.is_not(None))
            .order_by(RunRow.started_at)
        )
        for key, requester in rows:  # requester is not None: the query keeps those rows only
            starters.setdefault(key, cast(str, requester))
    return starters


def _runs_started_by(session: Session, starter: str, since: float) -> int:
    """The runs started since `since` of the tasks `starter` started (as `spend_since` counts)."""
    runs = dict(
        session.execute(
            select(RunRow.task_key, func.count()).where(RunRow.started_at >= since).group_by(RunRow.task_key)
        ).all()
    )
    starters = _starters(session, runs)
    return sum(int(count) for key, count in runs.items() if starters.get(key) == starter)


def _claims_pending(session: Session, starter: str, since: float, now: float, task_key: str) -> int:
    """`starter`'s claims since `since`, other than `task_key`'s, that still stand for a run
    to come: their owner holds the task's lease, and no run of the task started since."""
    run_since = exists().where(RunRow.task_key == _CLAIMS.c.task_key, RunRow.started_at >= _CLAIMS.c.claimed_at)
    held = and_(LEASES.c.task_key == _CLAIMS.c.task_key, LEASES.c.owner == _CLAIMS.c.owner)
    query = (
        select(func.count())
        .select_from(_CLAIMS.join(LEASES, held))
        .where(
            _CLAIMS.c.starter == starter,
            _CLAIMS.c.claimed_at >= since,
            _CLAIMS.c.task_key != task_key,
            LEASES.c.expires_at >= now,
            ~run_since,
        )
    )
    return int(session.scalar(query) or 0)
