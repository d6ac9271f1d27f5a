"""Runs and their token usage: one row per run of a task (status, steps, token totals),
and one row per model call's usage; the heartbeat writes a step's share of both, and
renews the lease, in one transaction."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from sqlalchemy import Float, Integer, String, Text, and_, func, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Mapped, Session, mapped_column

from coding_agent.domain.runs import RunRecord
from coding_agent.store.engine import Base, TableStore, rowcount
from coding_agent.store.leases import LEASES

__all__ = ["Runs", "RunRow", "record_of"]


class RunRow(Base):
    """A run as stored (the steering marks join it; everyone else sees a `RunRecord`)."""

    __tablename__ = "runs"
    uuid: Mapped[str] = mapped_column(String(36), primary_key=True)
    task_key: Mapped[str] = mapped_column(String(300), index=True)
    status: Mapped[str] = mapped_column(String(20))
    owner: Mapped[str] = mapped_column(String(100))
    started_at: Mapped[float] = mapped_column(Float, index=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    steps: Mapped[int] = mapped_column(Integer, default=0)
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    requester: Mapped[str | None] = mapped_column(String(200), nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)


class _TokenUsage(Base):
    __tablename__ = "token_usage"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_uuid: Mapped[str] = mapped_column(String(36), index=True)
    task_key: Mapped[str] = mapped_column(String(300), index=True)
    prompt_tokens: Mapped[int] = mapped_column(Integer)
    completion_tokens: Mapped[int] = mapped_column(Integer)
    recorded_at: Mapped[float] = mapped_column(Float, index=True)


def record_of(run: RunRow) -> RunRecord:
    return RunRecord(
        uuid=run.uuid,
        task_key=run.task_key,
        status=run.status,
        owner=run.owner,
        started_at=run.started_at,
        finished_at=run.finished_at,
        steps=run.steps,
        prompt_tokens=run.prompt_tokens,
        completion_tokens=run.completion_tokens,
        requester=run.requester,
        error=run.error,
    )


class Runs(TableStore):
    """Starting, counting, finishing and finding runs; their token usage.

    `lost(task_key, owner)` is told when a renewal here finds the lease another
    worker's (`Leases.let_go`)."""

    def __init__(
        self, engine: Engine, clock: Callable[[], float] = time.time, lost: Callable[[str, str], None] = lambda *_: None
    ) -> None:
        super().__init__(engine, clock)
        self._lost = lost

    def start_run(
        self, run_uuid: str, task_key: str, owner: str, requester: str | None, lease_seconds: float | None = None
    ) -> bool:
        """Record a new run as `running`. With `lease_seconds`, only while `owner` still
        holds the task's lease, which is renewed in the same transaction: a claim that
        outlived its lease (a stalled worker; another worker took the task over) starts
        no run, so no `running` row is left behind that no lease stands for. True when
        recorded."""
        with self._session() as session:
            if lease_seconds is not None and not self._renew_in(session, task_key, owner, lease_seconds):
                return False
            session.add(
                RunRow(
                    uuid=run_uuid,
                    task_key=task_key,
                    status="running",
                    owner=owner,
                    started_at=self._clock(),
                    requester=requester,
                    steps=0,
                    prompt_tokens=0,
                    completion_tokens=0,
                )
            )
        return True

    def _renew_in(self, session: Session, task_key: str, owner: str, ttl_seconds: float) -> bool:
        """Extend `owner`'s lease within `session`'s transaction; False when it is not theirs."""
        renewed = session.execute(
            update(LEASES)
            .where(LEASES.c.task_key == task_key, LEASES.c.owner == owner)
            .values(expires_at=self._clock() + ttl_seconds)
        )
        if rowcount(renewed) != 1:
            self._lost(task_key, owner)
        return rowcount(renewed) == 1

    def heartbeat(
        self,
        task_key: str,
        owner: str,
        ttl_seconds: float,
        run_uuid: str,
        steps: int,
        usages: Sequence[tuple[int, int]] = (),
    ) -> bool:
        """One step's bookkeeping in one transaction: extend our lease, record the step
        count and the token usage of the step's model calls.

        False when the lease is no longer ours (another worker took over).
        """
        with self._session() as session:
            if usages:
                self._add_usages(session, run_uuid, task_key, usages)
            renewed = self._renew_in(session, task_key, owner, ttl_seconds)
            session.execute(update(RunRow).where(RunRow.uuid == run_uuid).values(steps=steps))
            return renewed

    def finish_run(self, run_uuid: str, status: str, steps: int, error: str | None = None) -> None:
        with self._session() as session:
            run = session.get(RunRow, run_uuid)
            if run is None:
                return
            run.status = status
            run.steps = steps
            run.error = error
            run.finished_at = self._clock()

    def abandon_own_run(self, run_uuid: str, owner: str, steps: int, reason: str) -> bool:
        """Close a run whose worker lost the task's lease, as `abandoned`: one conditional
        UPDATE, only while the row is still `running` under `owner`. A worker that took
        the run over claimed the row (`claim_run` sets its owner), so this never touches
        a row that is someone else's now. True when closed here."""
        with self._session() as session:
            result = session.execute(
                update(RunRow)
                .where(RunRow.uuid == run_uuid, RunRow.owner == owner, RunRow.status == "running")
                .values(status="abandoned", steps=steps, error=reason, finished_at=self._clock())
            )
            return rowcount(result) == 1

    def record_usage(self, run_uuid: str, task_key: str, prompt_tokens: int, completion_tokens: int) -> None:
        self.record_usages(run_uuid, task_key, [(prompt_tokens, completion_tokens)])

    def record_usages(self, run_uuid: str, task_key: str, usages: Sequence[tuple[int, int]]) -> None:
        """Record model calls' (prompt, completion) token counts in one transaction."""
        if usages:
            with self._session() as session:
                self._add_usages(session, run_uuid, task_key, usages)

    def _add_usages(self, session: Session, run_uuid: str, task_key: str, usages: Sequence[tuple[int, int]]) -> None:
        now = self._clock()
        for prompt_tokens, completion_tokens in usages:
            session.add(
                _TokenUsage(
                    run_uuid=run_uuid,
                    task_key=task_key,
                    prompt_tokens=prompt_tokens,
                    completion_tokens=completion_tokens,
                    recorded_at=now,
                )
            )
        session.execute(
            update(RunRow)
            .where(RunRow.uuid == run_uuid)
            .values(
                prompt_tokens=RunRow.prompt_tokens + sum(prompt for prompt, _ in usages),
                completion_tokens=RunRow.completion_tokens + sum(completion for _, completion in usages),
            )
        )

    def all(self, task_key: str | None = None) -> list[RunRecord]:
        with self._session() as session:
            query = select(RunRow).order_by(RunRow.started_at)
            if task_key is not None:
                query = query.where(RunRow.task_key == task_key)
            return [record_of(run) for run in session.scalars(query)]

    def latest_runs(self) -> list[RunRecord]:
        """Each task's newest run, in one query without ORM objects: the dashboard's list
        and `status` read it for every task at every refresh."""
        newest = (
            select(RunRow.task_key, func.max(RunRow.started_at).label("newest")).group_by(RunRow.task_key).subquery()
        )
        columns = RunRow.__table__.c
        query = select(*columns).join(
            newest, and_(columns.task_key == newest.c.task_key, columns.started_at == newest.c.newest)
        )
        with self._engine.connect() as connection:
            found = {row.task_key: row for row in connection.execute(query).all()}  # a tie: one of them
        return [
            RunRecord(
                uuid=row.uuid, task_key=row.task_key, status=row.status, owner=row.owner, started_at=row.started_at,
                finished_at=row.finished_at, steps=row.steps, prompt_tokens=row.prompt_tokens,
                completion_tokens=row.completion_tokens, requester=row.requester, error=row.error,
            )  # fmt: skip
            for row in found.values()
        ]

    def token_totals(self) -> dict[str, tuple[int, int]]:
        """Per task key: (prompt tokens, completion tokens) over all runs."""
        with self._session() as session:
            rows = session.execute(
                select(_TokenUsage.task_key, func.sum(_TokenUsage.prompt_tokens), func.sum(_TokenUsage.completion_tokens))
                .group_by(_TokenUsage.task_key)
            )
            return {key: (int(prompt or 0), int(completion or 0)) for key, prompt, completion in rows}

    def get_run(self, run_uuid: str) -> RunRecord | None:
        with self._session() as session:
            run = session.get(RunRow, run_uuid)
            return record_of(run) if run is not None else None

    def latest_run(self, task_key: str) -> RunRecord | None:
        with self._session() as session:
            run = session.scalars(
                select(RunRow).where(RunRow.task_key == task_key).order_by(RunRow.started_at.desc()).limit(1)
            ).first()
            return record_of(run) if run is not None else None

    def runs_with_status(self, status: str, task_key: str | None = None) -> list[RunRecord]:
        with self._session() as session:
            query = select(RunRow).where(RunRow.status == status).order_by(RunRow.started_at)
            if task_key is not None:
                query = query.where(RunRow.task_key == task_key)
            return [record_of(run) for run in session.scalars(query)]

    def claim_run(self, run_uuid: str, owner: str, from_status: str) -> bool:
        """Atomically move a run from `from_status` to `running` under `owner`.

        One conditional UPDATE: of several workers trying, exactly one sees rowcount 1,
        which is what makes a paused run resumed once, never twice.
        """
        with self._session() as session:
            result = session.execute(
                update(RunRow)
                .where(RunRow.uuid == run_uuid, RunRow.status == from_status)
                .values(status="running", owner=owner, finished_at=None)
            )
            return rowcount(result) == 1

    def orphaned_tasks(self) -> list[str]:
        """Task keys a dead worker held: a lease that ran out without being released, or a
        run still `running` whose task has no live lease (another worker's intake may have
        taken the expired lease and released it when the task was no longer its to claim)."""
        now = self._clock()
        with self._session() as session:
            expired = list(session.scalars(select(LEASES.c.task_key).where(LEASES.c.expires_at < now)))
            live = select(LEASES.c.task_key).where(LEASES.c.expires_at >= now)
            running = session.scalars(
                select(RunRow.task_key).where(RunRow.status == "running", RunRow.task_key.not_in(live))
            )
            return list(dict.fromkeys([*expired, *running]))
