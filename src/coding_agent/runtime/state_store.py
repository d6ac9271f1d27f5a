"""The state store: runs, leases and token usage, in SQLite by default or PostgreSQL.

Leases are what keep two workers (threads, processes or machines) off one task: a worker
must hold the task's lease to claim it, renews it while it works, and a crashed worker's
lease simply expires. Acquisition is a single conditional INSERT-or-UPDATE, so it is
atomic on every backend SQLAlchemy supports.
"""

from __future__ import annotations

import time
import uuid as uuid_module
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import (
    Float,
    Integer,
    String,
    Text,
    create_engine,
    event,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

__all__ = ["StateStore", "RunRecord", "new_owner_id"]


class _Base(DeclarativeBase):
    pass


class _Run(_Base):
    __tablename__ = "runs"
    uuid: Mapped[str] = mapped_column(String(36), primary_key=True)
    task_key: Mapped[str] = mapped_column(String(300), index=True)
    status: Mapped[str] = mapped_column(String(20))
    owner: Mapped[str] = mapped_column(String(100))
    started_at: Mapped[float] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    steps: Mapped[int] = mapped_column(Integer, default=0)
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    requester: Mapped[str | None] = mapped_column(String(200), nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)


class _Lease(_Base):
    __tablename__ = "leases"
    task_key: Mapped[str] = mapped_column(String(300), primary_key=True)
    owner: Mapped[str] = mapped_column(String(100))
    expires_at: Mapped[float] = mapped_column(Float)


class _TokenUsage(_Base):
    __tablename__ = "token_usage"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_uuid: Mapped[str] = mapped_column(String(36), index=True)
    task_key: Mapped[str] = mapped_column(String(300), index=True)
    prompt_tokens: Mapped[int] = mapped_column(Integer)
    completion_tokens: Mapped[int] = mapped_column(Integer)
    recorded_at: Mapped[float] = mapped_column(Float)


class _TriggerRejection(_Base):
    """A task whose trigger was refused, at the `updated_at` seen then (so we comment once)."""

    __tablename__ = "trigger_rejections"
    task_key: Mapped[str] = mapped_column(String(300), primary_key=True)
    updated_at: Mapped[str] = mapped_column(String(40))


@dataclass(frozen=True)
class RunRecord:
    uuid: str
    task_key: str
    status: str
    owner: str
    started_at: float
    finished_at: float | None
    steps: int
    prompt_tokens: int
    completion_tokens: int
    requester: str | None
    error: str | None


def new_owner_id() -> str:
    """A lease owner id unique to this worker: host-process-random."""
    import os
    import socket

    return f"{socket.gethostname()}-{os.getpid()}-{uuid_module.uuid4().hex[:8]}"


def _sqlite_pragmas(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
    # WAL lets readers and one writer work at once; busy_timeout makes concurrent
    # processes wait for the write lock instead of failing with "database is locked".
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.close()


class StateStore:
    """Runs, leases, token usage. Methods are short blocking transactions."""

    def __init__(self, url: str, clock: Callable[[], float] = time.time) -> None:
        self.url = url
        self._clock = clock
        if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        self._engine: Engine = create_engine(url, future=True, pool_pre_ping=True)
        if url.startswith("sqlite"):
            event.listen(self._engine, "connect", _sqlite_pragmas)
        self._create_tables()

    def _create_tables(self) -> None:
        """Create missing tables; tolerate another process creating them at the same moment."""
        # Each lost race means the other process created one more table, so this ends.
        attempts = len(_Base.metadata.tables) + 2
        for attempt in range(attempts):
            try:
                _Base.metadata.create_all(self._engine)
                return
            except (OperationalError, IntegrityError, ProgrammingError):
                # CREATE TABLE raced with another process's (SQLite: "already exists";
                # PostgreSQL: a duplicate in pg_type). The next checkfirst pass sees them.
                if attempt == attempts - 1:
                    raise

    @contextmanager
    def _session(self) -> Iterator[Session]:
        with Session(self._engine) as session, session.begin():
            yield session

    def close(self) -> None:
        self._engine.dispose()

    # -- leases -------------------------------------------------------------------------

    def acquire_lease(self, task_key: str, owner: str, ttl_seconds: float) -> bool:
        """Take the task's lease if it is free, expired, or already ours. True when held."""
        now = self._clock()
        try:
            with self._session() as session:
                session.execute(insert(_Lease).values(task_key=task_key, owner=owner, expires_at=now + ttl_seconds))
            return True
        except IntegrityError:
            pass
        with self._session() as session:
            result = session.execute(
                update(_Lease)
                .where(_Lease.task_key == task_key)
                .where((_Lease.expires_at < now) | (_Lease.owner == owner))
                .values(owner=owner, expires_at=now + ttl_seconds)
            )
            return result.rowcount == 1

    def renew_lease(self, task_key: str, owner: str, ttl_seconds: float) -> bool:
        """Extend our lease; False when it is no longer ours (another worker took over)."""
        with self._session() as session:
            result = session.execute(
                update(_Lease)
                .where(_Lease.task_key == task_key, _Lease.owner == owner)
                .values(expires_at=self._clock() + ttl_seconds)
            )
            return result.rowcount == 1

    def release_lease(self, task_key: str, owner: str) -> None:
        with self._session() as session:
            lease = session.get(_Lease, task_key)
            if lease is not None and lease.owner == owner:
                session.delete(lease)

    def lease_owner(self, task_key: str) -> str | None:
        with self._session() as session:
            lease = session.get(_Lease, task_key)
            return lease.owner if lease is not None and lease.expires_at >= self._clock() else None

    # -- runs ---------------------------------------------------------------------------

    def start_run(self, run_uuid: str, task_key: str, owner: str, requester: str | None) -> None:
        with self._session() as session:
            session.add(
                _Run(
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

    def update_run(self, run_uuid: str, *, steps: int | None = None) -> None:
        with self._session() as session:
            run = session.get(_Run, run_uuid)
            if run is not None and steps is not None:
                run.steps = steps

    def finish_run(self, run_uuid: str, status: str, steps: int, error: str | None = None) -> None:
        with self._session() as session:
            run = session.get(_Run, run_uuid)
            if run is None:
                return
            run.status = status
            run.steps = steps
            run.error = error
            run.finished_at = self._clock()

    def record_usage(self, run_uuid: str, task_key: str, prompt_tokens: int, completion_tokens: int) -> None:
        with self._session() as session:
            session.add(
                _TokenUsage(
                    run_uuid=run_uuid,
                    task_key=task_key,
                    prompt_tokens=prompt_tokens,
                    completion_tokens=completion_tokens,
                    recorded_at=self._clock(),
                )
            )
            session.execute(
                update(_Run)
                .where(_Run.uuid == run_uuid)
                .values(
                    prompt_tokens=_Run.prompt_tokens + prompt_tokens,
                    completion_tokens=_Run.completion_tokens + completion_tokens,
                )
            )

    def runs(self, task_key: str | None = None) -> list[RunRecord]:
        with self._session() as session:
            query = select(_Run).order_by(_Run.started_at)
            if task_key is not None:
                query = query.where(_Run.task_key == task_key)
            return [
                RunRecord(
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
                for run in session.scalars(query)
            ]

    def token_totals(self) -> dict[str, tuple[int, int]]:
        """Per task key: (prompt tokens, completion tokens) over all runs."""
        with self._session() as session:
            rows = session.execute(
                select(_TokenUsage.task_key, func.sum(_TokenUsage.prompt_tokens), func.sum(_TokenUsage.completion_tokens))
                .group_by(_TokenUsage.task_key)
            )
            return {key: (int(prompt or 0), int(completion or 0)) for key, prompt, completion in rows}

    # -- trigger rejections ---------------------------------------------------------------

    def trigger_rejected(self, task_key: str, updated_at: str) -> bool:
        """True when this task was already refused at this same `updated_at`."""
        with self._session() as session:
            row = session.get(_TriggerRejection, task_key)
            return row is not None and row.updated_at == updated_at

    def reject_trigger(self, task_key: str, updated_at: str) -> None:
        with self._session() as session:
            row = session.get(_TriggerRejection, task_key)
            if row is None:
                session.add(_TriggerRejection(task_key=task_key, updated_at=updated_at))
            else:
                row.updated_at = updated_at
