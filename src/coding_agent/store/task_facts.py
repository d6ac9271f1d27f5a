"""What a task is (SPEC 11.3): its title and link on the forge, and the PR/MR the agent
opened for it, so that the dashboard and `status` can say what each key is without a
forge request per view. Written when the task is queued with its snapshot, when a run
starts or continues, and when a delivery opens or updates the PR/MR.

Titles are forge text (anyone who can open an issue writes them): kept as written up to
`TITLE_CHARS`, and escaped by whoever shows them. Links are kept only when they are
http(s) URLs, so a stored link can never be a `javascript:` one.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Float, String, Text, select
from sqlalchemy.orm import Mapped, mapped_column

from coding_agent.store.engine import Base, TableStore, again_if_changed_meanwhile
from coding_agent.store.queue_entries import QUEUE_ENTRIES

__all__ = ["TaskFact", "TaskFacts", "TITLE_CHARS", "QUEUED_STALE_SECONDS"]

TITLE_CHARS = 500
_URL_CHARS = 1000
# As the producer's bookkeeping (`queue_entries.py`): a key queued longer than this is
# offered again, so it no longer counts as waiting.
QUEUED_STALE_SECONDS = 3600.0


@dataclass(frozen=True)
class TaskFact:
    title: str | None = None
    url: str | None = None
    change_url: str | None = None


class _FactRow(Base):
    __tablename__ = "task_facts"
    task_key: Mapped[str] = mapped_column(String(300), primary_key=True)
    title: Mapped[str | None] = mapped_column(Text, nullable=True)
    url: Mapped[str | None] = mapped_column(String(_URL_CHARS), nullable=True)
    change_url: Mapped[str | None] = mapped_column(String(_URL_CHARS), nullable=True)
    updated_at: Mapped[float] = mapped_column(Float)


def _web_url(url: str | None) -> str | None:
    """`url` when it is an http(s) URL that fits its column; else None (never stored)."""
    if not url or len(url) > _URL_CHARS or not url.lower().startswith(("https://", "http://")):
        return None
    return url


class TaskFacts(TableStore):
    """Titles, links and PR/MR links of tasks, by task key."""

    def note_task(self, task_key: str, title: str, url: str | None) -> None:
        """Record the task's title and link as the forge gives them now (a renamed issue
        shows its new title from its next run on)."""
        values = {"title": title[:TITLE_CHARS], "url": _web_url(url)}
        again_if_changed_meanwhile(lambda: self._upsert(task_key, values))

    def note_change(self, task_key: str, change_url: str) -> None:
        """Record the PR/MR the agent opened (or updated) for the task."""
        url = _web_url(change_url)
        if url is not None:
            again_if_changed_meanwhile(lambda: self._upsert(task_key, {"change_url": url}))

    def _upsert(self, task_key: str, values: dict[str, str | None]) -> None:
        with self._session() as session:
            row = session.get(_FactRow, task_key, with_for_update=True)
            if row is None:
                session.add(_FactRow(task_key=task_key, updated_at=self._clock(), **values))
                return
            for name, value in values.items():
                setattr(row, name, value)
            row.updated_at = self._clock()

    def task_fact(self, task_key: str) -> TaskFact | None:
        """What one task is (a task page reads only its own: the whole table grows with
        every task ever worked)."""
        with self._session() as session:
            row = session.get(_FactRow, task_key)
            return TaskFact(row.title, row.url, row.change_url) if row is not None else None

    def task_facts(self) -> dict[str, TaskFact]:
        query = select(_FactRow.task_key, _FactRow.title, _FactRow.url, _FactRow.change_url)
        with self._engine.connect() as connection:
            rows = connection.execute(query).all()
        return {key: TaskFact(title, url, change_url) for key, title, url, change_url in rows}

    def queued_tasks(self, stale_seconds: float = QUEUED_STALE_SECONDS) -> list[tuple[str, float]]:
        """Task keys waiting in the queue (not yet taken by a worker), first queued first,
        with when each was queued."""
        since = self._clock() - stale_seconds
        query = (
            select(QUEUE_ENTRIES.c.task_key, QUEUE_ENTRIES.c.updated_at)
            .where(QUEUE_ENTRIES.c.state == "queued", QUEUE_ENTRIES.c.updated_at >= since)
            .order_by(QUEUE_ENTRIES.c.updated_at, QUEUE_ENTRIES.c.task_key)
        )
        with self._session() as session:
            return [(str(key), float(at)) for key, at in session.execute(query)]
