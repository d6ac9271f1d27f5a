"""The state store: runs, leases and token usage, in SQLite by default or PostgreSQL.

Leases are what keep two workers (threads, processes or machines) off one task: a worker
must hold the task's lease to claim it, renews it while it works, and a crashed worker's
lease simply expires. Acquisition is a single conditional INSERT-or-UPDATE, so it is
atomic on every backend SQLAlchemy supports.
"""

from __future__ import annotations

import time
import uuid as uuid_module
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import (
    Boolean,
    Float,
    Integer,
    MetaData,
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
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from coding_agent.domain.runs import RunMarks, RunRecord
from coding_agent.runtime.schema import migrate

__all__ = ["StateStore", "RunRecord", "RunMarks", "new_owner_id", "TableStore", "LEASES"]


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


# The leases table, for the stores beside this one that must know whether a lease is live.
LEASES = _Lease.__table__


class _TokenUsage(_Base):
    __tablename__ = "token_usage"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_uuid: Mapped[str] = mapped_column(String(36), index=True)
    task_key: Mapped[str] = mapped_column(String(300), index=True)
    prompt_tokens: Mapped[int] = mapped_column(Integer)
    completion_tokens: Mapped[int] = mapped_column(Integer)
    recorded_at: Mapped[float] = mapped_column(Float)


class _RunRequest(_Base):
    """An operator's request to the run working a task (`coding-agent pause|stop TASK`).

    The worker sees it at its next steering checkpoint, whatever machine it runs on, and
    removes it once it has paused or stopped.
    """

    __tablename__ = "run_requests"
    task_key: Mapped[str] = mapped_column(String(300), primary_key=True)
    kind: Mapped[str] = mapped_column(String(10))
    requested_at: Mapped[float] = mapped_column(Float)


class _RunMark(_Base):
    """What a run must never do twice, kept where a worker taking over can read it.

    The progress comment to keep editing, whether a pause waits for an explicit
    `resume`, and the outcome being published with whether its final comment is out.
    """

    __tablename__ = "run_marks"
    run_uuid: Mapped[str] = mapped_column(String(36), primary_key=True)
    progress_comment_id: Mapped[str | None] = mapped_column(String(100), nullable=True)
    resume_hold: Mapped[bool] = mapped_column(Boolean, default=False)
    final_status: Mapped[str | None] = mapped_column(String(20), nullable=True)
    final_body: Mapped[str | None] = mapped_column(Text, nullable=True)
    final_posted: Mapped[bool] = mapped_column(Boolean, default=False)


class _TriggerRejection(_Base):
    """A task whose trigger was refused, at the `updated_at` seen then (so we comment once)."""

    __tablename__ = "trigger_rejections"
    task_key: Mapped[str] = mapped_column(String(300), primary_key=True)
    updated_at: Mapped[str] = mapped_column(String(40))


def _to_record(run: _Run) -> RunRecord:
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
    # Under WAL, NORMAL still never corrupts the database; it only skips an fsync per
    # commit, which would otherwise dominate the per-step cost of heartbeats and usage rows.
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


class TableStore:
    """Base of the stores other modules keep beside the state store's tables, on its engine
    (memories, follow-ups): one database and one backend choice, separate metadata.

    Their tables are created by the schema's migrations (`schema.py`) like every other;
    `metadata` only describes them to the ORM.
    """

    def __init__(self, engine: Engine, metadata: MetaData, clock: Callable[[], float] = time.time) -> None:
        self._engine = engine
        self._clock = clock
        migrate(engine)

    @contextmanager
    def _session(self) -> Iterator[Session]:
        with Session(self._engine) as session, session.begin():
            yield session


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
        migrate(self._engine)

    @property
    def engine(self) -> Engine:
        """The database, for stores of other modules that keep their tables beside these."""
        return self._engine

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
            renewed = session.execute(
                update(_Lease)
                .where(_Lease.task_key == task_key, _Lease.owner == owner)
                .values(expires_at=self._clock() + ttl_seconds)
            )
            session.execute(update(_Run).where(_Run.uuid == run_uuid).values(steps=steps))
            return renewed.rowcount == 1

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
            update(_Run)
            .where(_Run.uuid == run_uuid)
            .values(
                prompt_tokens=_Run.prompt_tokens + sum(prompt for prompt, _ in usages),
                completion_tokens=_Run.completion_tokens + sum(completion for _, completion in usages),
            )
        )

    def runs(self, task_key: str | None = None) -> list[RunRecord]:
        with self._session() as session:
            query = select(_Run).order_by(_Run.started_at)
            if task_key is not None:
                query = query.where(_Run.task_key == task_key)
            return [_to_record(run) for run in session.scalars(query)]

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

    def trigger_ever_rejected(self, task_key: str) -> bool:
        """True once a refusal was explained on this task (it is explained only once)."""
        with self._session() as session:
            return session.get(_TriggerRejection, task_key) is not None

    def reject_trigger(self, task_key: str, updated_at: str) -> None:
        with self._session() as session:
            row = session.get(_TriggerRejection, task_key)
            if row is None:
                session.add(_TriggerRejection(task_key=task_key, updated_at=updated_at))
            else:
                row.updated_at = updated_at

    # -- steering: operator requests, pause/resume, takeover (SPEC 8) ---------------------

    def request_control(self, task_key: str, kind: str) -> None:
        """Ask the worker of `task_key` to `pause` or `stop` at its next checkpoint."""
        with self._session() as session:
            row = session.get(_RunRequest, task_key)
            if row is None:
                session.add(_RunRequest(task_key=task_key, kind=kind, requested_at=self._clock()))
            elif row.kind != "stop":  # a stop is never downgraded to a pause
                row.kind, row.requested_at = kind, self._clock()

    def control_request(self, task_key: str) -> str | None:
        """The pending request for `task_key` (`pause` or `stop`), if any."""
        with self._session() as session:
            row = session.get(_RunRequest, task_key)
            return row.kind if row is not None else None

    def clear_control_request(self, task_key: str) -> None:
        with self._session() as session:
            row = session.get(_RunRequest, task_key)
            if row is not None:
                session.delete(row)

    def _mark(self, session: Session, run_uuid: str) -> _RunMark:
        mark = session.get(_RunMark, run_uuid)
        if mark is None:
            mark = _RunMark(run_uuid=run_uuid, resume_hold=False, final_posted=False)
            session.add(mark)
        return mark

    def run_marks(self, run_uuid: str) -> RunMarks:
        with self._session() as session:
            mark = session.get(_RunMark, run_uuid)
            if mark is None:
                return RunMarks()
            return RunMarks(
                progress_comment_id=mark.progress_comment_id,
                resume_hold=bool(mark.resume_hold),
                final_status=mark.final_status,
                final_body=mark.final_body,
                final_posted=bool(mark.final_posted),
            )

    def set_progress_comment(self, run_uuid: str, comment_id: str) -> None:
        with self._session() as session:
            self._mark(session, run_uuid).progress_comment_id = comment_id

    def record_final(self, run_uuid: str, status: str, body: str) -> None:
        """Remember the outcome being published, before its final comment goes out."""
        with self._session() as session:
            mark = self._mark(session, run_uuid)
            if mark.final_status is None:
                mark.final_status, mark.final_body = status, body

    def mark_final_posted(self, run_uuid: str) -> None:
        with self._session() as session:
            self._mark(session, run_uuid).final_posted = True

    def get_run(self, run_uuid: str) -> RunRecord | None:
        with self._session() as session:
            run = session.get(_Run, run_uuid)
            return _to_record(run) if run is not None else None

    def latest_run(self, task_key: str) -> RunRecord | None:
        with self._session() as session:
            run = session.scalars(
                select(_Run).where(_Run.task_key == task_key).order_by(_Run.started_at.desc()).limit(1)
            ).first()
            return _to_record(run) if run is not None else None

    def runs_with_status(self, status: str, task_key: str | None = None) -> list[RunRecord]:
        with self._session() as session:
            query = select(_Run).where(_Run.status == status).order_by(_Run.started_at)
            if task_key is not None:
                query = query.where(_Run.task_key == task_key)
            return [_to_record(run) for run in session.scalars(query)]

    def pause_run(self, run_uuid: str, steps: int, hold: bool) -> None:
        """The run is paused; with `hold` it waits for `coding-agent resume`, else for no signal."""
        with self._session() as session:
            run = session.get(_Run, run_uuid)
            if run is not None:
                run.status, run.steps = "paused", steps
            self._mark(session, run_uuid).resume_hold = hold

    def release_holds(self, task_key: str | None = None) -> int:
        """Let paused runs (of `task_key`, or all) resume; returns how many were held."""
        with self._session() as session:
            query = select(_Run.uuid).where(_Run.status == "paused")
            if task_key is not None:
                query = query.where(_Run.task_key == task_key)
            uuids = list(session.scalars(query))
            result = session.execute(
                update(_RunMark).where(_RunMark.run_uuid.in_(uuids), _RunMark.resume_hold.is_(True)).values(resume_hold=False)
            )
            return result.rowcount or 0

    def resumable_runs(self) -> list[RunRecord]:
        """Paused runs that wait for nothing but a worker (no `resume_hold`)."""
        with self._session() as session:
            query = (
                select(_Run)
                .outerjoin(_RunMark, _RunMark.run_uuid == _Run.uuid)
                .where(_Run.status == "paused")
                .where((_RunMark.resume_hold.is_(None)) | (_RunMark.resume_hold.is_(False)))
                .order_by(_Run.started_at)
            )
            return [_to_record(run) for run in session.scalars(query)]

    def claim_run(self, run_uuid: str, owner: str, from_status: str) -> bool:
        """Atomically move a run from `from_status` to `running` under `owner`.

        One conditional UPDATE: of several workers trying, exactly one sees rowcount 1,
        which is what makes a paused run resumed once, never twice.
        """
        with self._session() as session:
            result = session.execute(
                update(_Run)
                .where(_Run.uuid == run_uuid, _Run.status == from_status)
                .values(status="running", owner=owner, finished_at=None)
            )
            return result.rowcount == 1

    def orphaned_tasks(self) -> list[str]:
        """Task keys a dead worker held: a lease that ran out without being released, or a
        run still `running` whose task has no live lease (another worker's intake may have
        taken the expired lease and released it when the task was no longer its to claim)."""
        now = self._clock()
        with self._session() as session:
            expired = list(session.scalars(select(_Lease.task_key).where(_Lease.expires_at < now)))
            live = select(_Lease.task_key).where(_Lease.expires_at >= now)
            running = session.scalars(select(_Run.task_key).where(_Run.status == "running", _Run.task_key.not_in(live)))
            return list(dict.fromkeys([*expired, *running]))
