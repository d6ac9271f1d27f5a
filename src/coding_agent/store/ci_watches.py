"""CI watches (SPEC 16): per task, the watch of the head commit the agent pushed to its
PR/MR. In the store, so a watch outlives the process that started it, and any worker can
carry it on (under the task's lease, taken by the caller)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sqlalchemy import Boolean, Float, Index, Integer, String, Text, select
from sqlalchemy.orm import Mapped, mapped_column

from coding_agent.domain.ci import CiWatch, WatchState, checks_from_json, checks_to_json
from coding_agent.store.engine import Base, TableStore, again_if_changed_meanwhile

__all__ = ["CiWatches"]

_LIVE = [state.value for state in WatchState if state.live]


class _CiWatch(Base):
    __tablename__ = "ci_watches"
    __table_args__ = (Index("ix_ci_watches_sha", "project", "sha"),)
    task_key: Mapped[str] = mapped_column(String(300), primary_key=True)
    project: Mapped[str] = mapped_column(String(300))
    number: Mapped[int] = mapped_column(Integer)
    head_branch: Mapped[str] = mapped_column(String(300))
    sha: Mapped[str] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(20), index=True)
    started_at: Mapped[float] = mapped_column(Float)
    appeared_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    acted_at: Mapped[float] = mapped_column(Float)
    attempts: Mapped[int] = mapped_column(Integer)
    max_attempts: Mapped[int] = mapped_column(Integer)
    reran: Mapped[bool] = mapped_column(Boolean)
    requester: Mapped[str | None] = mapped_column(String(200), nullable=True)
    reply_to: Mapped[str | None] = mapped_column(String(400), nullable=True)
    bot_assigned: Mapped[bool] = mapped_column(Boolean)
    failing: Mapped[str | None] = mapped_column(Text, nullable=True)


def _watch(row: _CiWatch) -> CiWatch:
    return CiWatch(
        task_key=row.task_key,
        project=row.project,
        number=row.number,
        head_branch=row.head_branch,
        sha=row.sha,
        state=WatchState(row.state),
        started_at=row.started_at,
        acted_at=row.acted_at,
        appeared_at=row.appeared_at,
        attempts=row.attempts,
        max_attempts=row.max_attempts,
        reran=row.reran,
        requester=row.requester,
        reply_to=row.reply_to,
        bot_assigned=row.bot_assigned,
        failing=checks_from_json(row.failing),
    )


def _columns(watch: CiWatch) -> dict[str, Any]:
    return {
        "project": watch.project,
        "number": watch.number,
        "head_branch": watch.head_branch,
        "sha": watch.sha,
        "state": watch.state.value,
        "started_at": watch.started_at,
        "appeared_at": watch.appeared_at,
        "acted_at": watch.acted_at,
        "attempts": watch.attempts,
        "max_attempts": watch.max_attempts,
        "reran": watch.reran,
        "requester": watch.requester,
        "reply_to": watch.reply_to,
        "bot_assigned": watch.bot_assigned,
        "failing": checks_to_json(watch.failing) if watch.failing else None,
    }


class CiWatches(TableStore):
    """One row per task: its newest watch (a new push replaces the one before)."""

    def watch(self, task_key: str) -> CiWatch | None:
        with self._session() as session:
            row = session.get(_CiWatch, task_key)
            return _watch(row) if row is not None else None

    def save_watch(self, watch: CiWatch) -> None:
        """Write `watch` as the task's watch, whatever was there."""

        def write() -> None:
            with self._session() as session:
                row = session.get(_CiWatch, watch.task_key)
                if row is None:
                    session.add(_CiWatch(task_key=watch.task_key, **_columns(watch)))
                else:
                    for name, value in _columns(watch).items():
                        setattr(row, name, value)

        again_if_changed_meanwhile(write)

    def update_watch(self, watch: CiWatch, **changes: Any) -> CiWatch:
        """`watch` with `changes`, written only if the stored row is still that watch (the
        same head): a newer push's watch is never overwritten by an older one's decision."""
        changed = replace(watch, **changes)
        with self._session() as session:
            row = session.get(_CiWatch, watch.task_key)
            if row is not None and row.sha == watch.sha and row.started_at == watch.started_at:
                for name, value in _columns(changed).items():
                    setattr(row, name, value)
        return changed

    def every_watch(self) -> dict[str, CiWatch]:
        """Each task's watch, live or ended, by task key (`status`, the dashboard)."""
        with self._session() as session:
            return {row.task_key: _watch(row) for row in session.scalars(select(_CiWatch))}

    def live_watches(self) -> list[CiWatch]:
        """Every watch still going (watching, re-running, a fix to start or running)."""
        with self._session() as session:
            rows = session.scalars(select(_CiWatch).where(_CiWatch.state.in_(_LIVE)).order_by(_CiWatch.acted_at))
            return [_watch(row) for row in rows]

    def watches_of(self, project: str, sha: str) -> list[CiWatch]:
        """The live watches of commit `sha` of `project` (what a CI webhook is about)."""
        with self._session() as session:
            rows = session.scalars(
                select(_CiWatch).where(_CiWatch.project == project, _CiWatch.sha == sha, _CiWatch.state.in_(_LIVE))
            )
            return [_watch(row) for row in rows]
