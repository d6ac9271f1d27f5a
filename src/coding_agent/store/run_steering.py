"""The steering rows of a run (SPEC 8), where a worker on any machine can read them:
operator requests (`coding-agent pause|stop TASK`) waiting for the next checkpoint,
webhook nudges (a comment or an unassign reported for a task whose run may be in
another process, SPEC 11.2), and run marks, what a run must never do twice (the progress comment to keep editing,
whether a pause waits for an explicit `resume`, the outcome being published and
whether its final comment is out). Pausing, holding and resuming join the runs."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Boolean, CompoundSelect, Float, Integer, String, Text, delete, literal_column, select, union_all, update
from sqlalchemy.orm import Mapped, Session, mapped_column

from coding_agent.domain.runs import RunMarks, RunRecord
from coding_agent.store.engine import Base, TableStore, again_if_changed_meanwhile, in_chunks, rowcount
from coding_agent.store.runs import RunRow, record_of

__all__ = ["RunSteering", "KEEP_NUDGES_SECONDS"]

# A nudge matters only to a run working the task now; a day covers any run's reading of it.
KEEP_NUDGES_SECONDS = 86400.0


class _RunRequest(Base):
    """An operator's request to the run working a task (`coding-agent pause|stop TASK`).

    The worker sees it at its next steering checkpoint, whatever machine it runs on, and
    removes it once it has paused or stopped.
    """

    __tablename__ = "run_requests"
    task_key: Mapped[str] = mapped_column(String(300), primary_key=True)
    kind: Mapped[str] = mapped_column(String(10))
    requested_at: Mapped[float] = mapped_column(Float)


class _RunNudge(Base):
    """A webhook said that a task's comments or assignees changed (SPEC 11.2).

    Written by the process that received the webhook, read by the run that holds the
    task, in whatever process it is, together with its operator request (one read): a
    new nudge makes that run ask the forge at its next checkpoint instead of waiting for
    `min_check_interval_seconds`. `serial` counts the nudges of the task, so the run
    tells a new one from one it has acted on; nobody deletes a row but the pruning of
    old ones, so two runs never race to consume it.
    """

    __tablename__ = "run_nudges"
    task_key: Mapped[str] = mapped_column(String(300), primary_key=True)
    serial: Mapped[int] = mapped_column(Integer)
    nudged_at: Mapped[float] = mapped_column(Float, index=True)


class _RunMark(Base):
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


class RunSteering(TableStore):
    """Operator requests, run marks, pause/hold/resume of runs."""

    def request_control(self, task_key: str, kind: str) -> None:
        """Ask the worker of `task_key` to `pause` or `stop` at its next checkpoint."""

        def request() -> None:
            with self._session() as session:
                row = session.get(_RunRequest, task_key)
                if row is None:
                    session.add(_RunRequest(task_key=task_key, kind=kind, requested_at=self._clock()))
                elif row.kind != "stop":  # a stop is never downgraded to a pause
                    row.kind, row.requested_at = kind, self._clock()

        again_if_changed_meanwhile(request)  # two operators (dashboard, CLI) at once

    def control_request(self, task_key: str) -> str | None:
        """The pending request for `task_key` (`pause` or `stop`), if any."""
        with self._session() as session:
            row = session.get(_RunRequest, task_key)
            return row.kind if row is not None else None

    def steering_requests(self, task_key: str) -> tuple[str | None, str | None]:
        """(the pending operator request, the latest webhook nudge) of `task_key`, in one
        read: what a run's checkpoint asks the store. The nudge is an opaque token that
        changes with every `nudge_run` (None: never nudged)."""
        query: CompoundSelect[*tuple[Any, ...]] = union_all(
            select(_RunRequest.kind, literal_column("0"), _RunRequest.requested_at).where(_RunRequest.task_key == task_key),
            select(literal_column("'nudge'"), _RunNudge.serial, _RunNudge.nudged_at).where(_RunNudge.task_key == task_key),
        )
        request = nudge = None
        with self._engine.connect() as connection:
            for kind, serial, at in connection.execute(query):
                if kind == "nudge":
                    nudge = f"{serial}@{at!r}"
                else:
                    request = kind
        return request, nudge

    def nudge_run(self, task_key: str) -> None:
        """A webhook reported a comment or an (un)assignment on `task_key`: its run, in
        any process, asks the forge at its next checkpoint. Old nudges are pruned here."""
        now = self._clock()

        def bump() -> None:
            with self._session() as session:
                bumped = rowcount(
                    session.execute(
                        update(_RunNudge).where(_RunNudge.task_key == task_key).values(serial=_RunNudge.serial + 1, nudged_at=now)
                    )
                )
                if not bumped:
                    session.add(_RunNudge(task_key=task_key, serial=1, nudged_at=now))
                session.execute(delete(_RunNudge).where(_RunNudge.nudged_at < now - KEEP_NUDGES_SECONDS))

        again_if_changed_meanwhile(bump)  # another process added the task's row first: bump that one

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

    def pause_run(self, run_uuid: str, steps: int, hold: bool) -> None:
        """The run is paused; with `hold` it waits for `coding-agent resume`, else for no signal."""
        with self._session() as session:
            run = session.get(RunRow, run_uuid)
            if run is not None:
                run.status, run.steps = "paused", steps
            self._mark(session, run_uuid).resume_hold = hold

    def release_holds(self, task_key: str | None = None) -> int:
        """Let paused runs (of `task_key`, or all) resume; returns how many were held."""
        with self._session() as session:
            query = select(RunRow.uuid).where(RunRow.status == "paused")
            if task_key is not None:
                query = query.where(RunRow.task_key == task_key)
            paused = list(session.scalars(query))  # read whole before the writes
            held = 0
            for uuids in in_chunks(paused):
                result = session.execute(
                    update(_RunMark).where(_RunMark.run_uuid.in_(uuids), _RunMark.resume_hold.is_(True)).values(resume_hold=False)
                )
                held += rowcount(result) or 0
            return held

    def resumable_runs(self) -> list[RunRecord]:
        """Paused runs that wait for nothing but a worker (no `resume_hold`)."""
        with self._session() as session:
            query = (
                select(RunRow)
                .outerjoin(_RunMark, _RunMark.run_uuid == RunRow.uuid)
                .where(RunRow.status == "paused")
                .where((_RunMark.resume_hold.is_(None)) | (_RunMark.resume_hold.is_(False)))
                .order_by(RunRow.started_at)
            )
            return [record_of(run) for run in session.scalars(query)]

    def final_bodies(self, run_uuids: list[str]) -> dict[str, str]:
        """The final comment each of `run_uuids` recorded to publish (those that have one)."""
        found: dict[str, str] = {}
        with self._session() as session:
            for uuids in in_chunks(run_uuids):
                query = select(_RunMark.run_uuid, _RunMark.final_body).where(
                    _RunMark.run_uuid.in_(uuids), _RunMark.final_body.is_not(None)
                )
                found.update({str(uuid): str(body) for uuid, body in session.execute(query)})
        return found
