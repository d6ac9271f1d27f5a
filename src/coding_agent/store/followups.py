"""The follow-up tables (SPEC 3): which comments already led to a decision (and, for a
"run", which run it asked for), and at which `updated_at` each done task was last
examined. The decisions themselves are `runtime/followups.py`'s."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Float, String, select
from sqlalchemy.orm import Mapped, mapped_column

from coding_agent.domain.tasks import ThreadRef
from coding_agent.store.engine import Base, TableStore, in_chunks

__all__ = ["FollowUpRecords", "SETTLE_SECONDS"]

# How old an `updated_at` must be before "examined at it" is recorded (see `mark_seen`).
SETTLE_SECONDS = 2.0


class _Handled(Base):
    """A comment that already led to a follow-up decision (run, acknowledged or ignored)."""

    __tablename__ = "followup_comments"
    task_key: Mapped[str] = mapped_column(String(300), primary_key=True)  # where the comment is
    comment_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    action: Mapped[str] = mapped_column(String(20))
    at: Mapped[float] = mapped_column(Float)
    # A "run" decision's run: the task it runs (a review thread's: the PR/MR's issue), who
    # asked, and the thread to answer in (`ThreadRef` as text; None: the task itself).
    run_key: Mapped[str | None] = mapped_column(String(300), index=True, default=None)
    requester: Mapped[str | None] = mapped_column(String(200), default=None)
    reply_to: Mapped[str | None] = mapped_column(String(400), default=None)


class _Seen(Base):
    """The `updated_at` at which a done task was last examined: unchanged means nothing new."""

    __tablename__ = "followup_seen"
    task_key: Mapped[str] = mapped_column(String(300), primary_key=True)
    updated_at: Mapped[str] = mapped_column(String(40))


class FollowUpRecords(TableStore):
    """The follow-up tables, beside the state store's, in the same database."""

    def seen(self, task_key: str, updated_at: datetime) -> bool:
        with self._session() as session:
            row = session.get(_Seen, task_key)
            return row is not None and row.updated_at == updated_at.isoformat()

    def examined(self, items: Sequence[tuple[str, datetime]]) -> set[str]:
        """The keys of `items` (key, `updated_at`) examined already as they stand: `seen`
        for many at once, in one read per `IN_CHUNK` keys."""
        wanted = {key: updated_at.isoformat() for key, updated_at in items}
        found: set[str] = set()
        with self._session() as session:
            for keys in in_chunks(wanted):
                query = select(_Seen.task_key, _Seen.updated_at).where(_Seen.task_key.in_(keys))
                found.update(key for key, stamp in session.execute(query) if wanted[key] == stamp)
        return found

    def mark_seen(self, task_key: str, updated_at: datetime) -> None:
        """Record that the item was examined as it stood at `updated_at` - unless that is
        under `SETTLE_SECONDS` old: forges stamp whole seconds (GitHub), so a comment posted
        later in the same second carries the same `updated_at` and would never be read."""
        if self._clock() - updated_at.timestamp() < SETTLE_SECONDS:
            return
        with self._session() as session:
            row = session.get(_Seen, task_key)
            if row is None:
                session.add(_Seen(task_key=task_key, updated_at=updated_at.isoformat()))
            else:
                row.updated_at = updated_at.isoformat()

    def handled(self, task_key: str, comment_id: str) -> tuple[str, float] | None:
        """The action taken on this comment and when it was recorded, or None when it is new."""
        with self._session() as session:
            row = session.get(_Handled, (task_key, comment_id))
            return (row.action, row.at) if row is not None else None

    def handle(
        self,
        task_key: str,
        comment_id: str,
        action: str,
        run: tuple[str, str, ThreadRef | None] | None = None,
    ) -> None:
        """Record the decision on a comment; `run`: for "run", (the task to run, who asked,
        the thread to answer in)."""
        run_key, requester, reply_to = run or (None, None, None)
        with self._session() as session:
            if session.get(_Handled, (task_key, comment_id)) is None:
                session.add(
                    _Handled(
                        task_key=task_key,
                        comment_id=comment_id,
                        action=action,
                        at=self._clock(),
                        run_key=run_key,
                        requester=requester,
                        reply_to=str(reply_to) if reply_to is not None else None,
                    )
                )

    def run_decided_after(self, run_key: str, after: float) -> tuple[str | None, ThreadRef | None] | None:
        """The newest "run" decision for `run_key` recorded after `after`: (who asked, the
        thread to answer in), or None when there is none."""
        with self._session() as session:
            row = session.scalars(
                select(_Handled)
                .where(_Handled.run_key == run_key, _Handled.action == "run", _Handled.at > after)
                .order_by(_Handled.at.desc())
                .limit(1)
            ).first()
            if row is None:
                return None
            return row.requester, ThreadRef.parse(row.reply_to) if row.reply_to else None
