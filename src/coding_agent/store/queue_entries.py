"""Which task keys are queued or running, so each is enqueued at most once (SPEC 11.1).

Kept in the state store, beside the leases, so that two producers (or a producer and a
webhook) on different machines agree. An entry stops counting when it can no longer be
true: a `running` entry once the task has no live lease (its worker died), a `queued`
entry of an in-process queue once another process looks (that queue died with its
process, or is not one this process can see), and any `queued` entry after
`stale_seconds` (a lost message must not block a task forever).

A `queued` entry whose message is gone sooner than that (taken by a worker while the store
was away, so neither its pick-up nor its release was recorded; a purged broker queue) is
released by the producer's next poll, as soon as its queue vouches it holds no such
message (`release_lost`, `TaskQueue.held`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sqlalchemy import Float, String, delete, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Mapped, Session, mapped_column

from coding_agent.store.engine import Base, TableStore, again_if_changed_meanwhile, in_chunks
from coding_agent.store.leases import LEASES

__all__ = ["QueueEntries", "QUEUE_ENTRIES"]


class _Entry(Base):
    __tablename__ = "queue_entries"
    task_key: Mapped[str] = mapped_column(String(300), primary_key=True)
    state: Mapped[str] = mapped_column(String(10))
    # Who can see the message: `rabbitmq:<queue>` (shared) or `memory:<process owner>`.
    scope: Mapped[str] = mapped_column(String(250))
    updated_at: Mapped[float] = mapped_column(Float)


# The entries, for the dashboard's reading of the queue (`task_facts.py`): all scopes.
QUEUE_ENTRIES = _Entry.__table__


class QueueEntries(TableStore):
    def __init__(self, engine: Engine, scope: str, stale_seconds: float, clock: Callable[[], float] = time.time) -> None:
        super().__init__(engine, clock)
        self._scope = scope
        self._stale_seconds = stale_seconds

    def try_enqueue(self, task_key: str) -> bool:
        """Record `task_key` as queued; False when it is queued or running already."""
        return again_if_changed_meanwhile(lambda: self._try_enqueue(task_key))

    def _try_enqueue(self, task_key: str) -> bool:
        now = self._clock()
        with self._session() as session:
            entry = session.get(_Entry, task_key, with_for_update=True)
            if entry is not None and self._counts(session, entry, now):
                return False
            if entry is None:
                session.add(_Entry(task_key=task_key, state="queued", scope=self._scope, updated_at=now))
            else:
                entry.state, entry.scope, entry.updated_at = "queued", self._scope, now
            return True

    def _counts(self, session: Session, entry: _Entry, now: float) -> bool:
        if entry.state == "running":
            expires = session.scalar(select(LEASES.c.expires_at).where(LEASES.c.task_key == entry.task_key))
            return expires is not None and expires >= now
        if entry.scope != self._scope:
            return False
        return entry.updated_at >= now - self._stale_seconds

    def mark_running(self, task_key: str) -> None:
        again_if_changed_meanwhile(lambda: self._mark_running(task_key))

    def _mark_running(self, task_key: str) -> None:
        with self._session() as session:
            entry = session.get(_Entry, task_key)
            if entry is None:
                session.add(_Entry(task_key=task_key, state="running", scope=self._scope, updated_at=self._clock()))
            else:
                entry.state, entry.updated_at = "running", self._clock()

    def release_lost(self, held: frozenset[str], queued_before: float) -> list[str]:
        """Release this queue's `queued` entries made before `queued_before` whose key is
        not in `held` (what the queue holds): their messages are gone. The keys released."""
        with self._session() as session:
            lost = select(_Entry.task_key).where(
                _Entry.scope == self._scope, _Entry.state == "queued", _Entry.updated_at < queued_before
            )
            keys = [key for key in session.scalars(lost) if key not in held]
            for chunk in in_chunks(keys):
                session.execute(delete(_Entry).where(_Entry.task_key.in_(chunk), _Entry.state == "queued"))
            return keys

    def release(self, task_key: str) -> None:
        """The run ended (or the message was not ours to work): the key may be queued again."""
        with self._session() as session:
            session.execute(delete(_Entry).where(_Entry.task_key == task_key))

    def states(self) -> dict[str, str]:
        with self._session() as session:
            return {row.task_key: row.state for row in session.scalars(select(_Entry))}
