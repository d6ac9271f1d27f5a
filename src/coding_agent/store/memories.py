"""Where memories live (SPEC 9.2): tables beside the state store's, in the same database.

Channel (repository/project) memories hold the model's long- and short-term notes and
when the channel was last active; thread memories hold one summary per run, keyed by the
task. On the state store's engine: SQLite by default and PostgreSQL for several machines
come for free.
"""

from __future__ import annotations

from sqlalchemy import Float, Integer, String, Text, delete, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from coding_agent.domain.memories import ChannelRecord, ThreadRecord, channel_of, workspace_of
from coding_agent.domain.tasks import TaskKey
from coding_agent.store.engine import Base, TableStore, again_if_changed_meanwhile, rowcount

__all__ = ["MemoryStore", "ChannelRecord", "ThreadRecord", "channel_of", "workspace_of"]


class _ChannelMemory(Base):
    __tablename__ = "channel_memories"
    channel_id: Mapped[str] = mapped_column(String(300), primary_key=True)
    workspace_id: Mapped[str] = mapped_column(String(300), index=True)
    channel_name: Mapped[str] = mapped_column(String(300))
    long_term: Mapped[str | None] = mapped_column(Text, nullable=True)
    short_term: Mapped[str | None] = mapped_column(Text, nullable=True)
    updated_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    last_active_at: Mapped[float] = mapped_column(Float)


class _ThreadMemory(Base):
    __tablename__ = "thread_memories"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    channel_id: Mapped[str] = mapped_column(String(300), index=True)
    thread_id: Mapped[str] = mapped_column(String(300), index=True)
    run_uuid: Mapped[str] = mapped_column(String(36))
    summary: Mapped[str] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float, index=True)


def _channel(row: _ChannelMemory) -> ChannelRecord:
    return ChannelRecord(
        row.channel_id, row.workspace_id, row.channel_name, row.long_term, row.short_term, row.updated_at, row.last_active_at
    )


def _thread(row: _ThreadMemory) -> ThreadRecord:
    return ThreadRecord(row.channel_id, row.thread_id, row.run_uuid, row.summary, row.created_at)


class MemoryStore(TableStore):
    """Channel and thread memories. Methods are short blocking transactions."""

    def _row(self, session: Session, key: TaskKey) -> _ChannelMemory:
        channel_id, name = channel_of(key)
        row = session.get(_ChannelMemory, channel_id)
        if row is None:
            row = _ChannelMemory(
                channel_id=channel_id, workspace_id=workspace_of(key), channel_name=name, last_active_at=self._clock()
            )
            session.add(row)
        return row

    # -- writing --------------------------------------------------------------------------

    def touch_channel(self, key: TaskKey) -> None:
        """The task's repository was active now (a run worked in it)."""

        def touch() -> None:
            with self._session() as session:
                self._row(session, key).last_active_at = self._clock()

        again_if_changed_meanwhile(touch)  # a run of another task of the repository, ending now

    def write_channel(self, key: TaskKey, long_term: str | None, short_term: str | None) -> None:
        """Replace the repository's memories; None keeps what is there."""

        def write() -> None:
            with self._session() as session:
                row = self._row(session, key)
                if long_term is not None:
                    row.long_term = long_term
                if short_term is not None:
                    row.short_term = short_term
                row.updated_at = row.last_active_at = self._clock()

        again_if_changed_meanwhile(write)  # a run of another task of the repository, ending now

    def add_thread_memory(self, key: TaskKey, run_uuid: str, summary: str) -> None:
        with self._session() as session:
            session.add(
                _ThreadMemory(
                    channel_id=channel_of(key)[0],
                    thread_id=str(key),
                    run_uuid=run_uuid,
                    summary=summary,
                    created_at=self._clock(),
                )
            )

    # -- reading --------------------------------------------------------------------------

    def channel(self, channel_id: str) -> ChannelRecord | None:
        with self._session() as session:
            row = session.get(_ChannelMemory, channel_id)
            return _channel(row) if row is not None else None

    def channels(self, workspace_id: str | None = None, active_since: float | None = None) -> list[ChannelRecord]:
        """Channels (of one workspace), most recently active first."""
        with self._session() as session:
            query = select(_ChannelMemory).order_by(_ChannelMemory.last_active_at.desc())
            if workspace_id is not None:
                query = query.where(_ChannelMemory.workspace_id == workspace_id)
            if active_since is not None:
                query = query.where(_ChannelMemory.last_active_at >= active_since)
            return [_channel(row) for row in session.scalars(query)]

    def thread_memories(self, channel_id: str | None = None, since: float | None = None) -> list[ThreadRecord]:
        """Thread memories (of one channel, newer than `since`), newest first."""
        with self._session() as session:
            query = select(_ThreadMemory).order_by(_ThreadMemory.created_at.desc(), _ThreadMemory.id.desc())
            if channel_id is not None:
                query = query.where(_ThreadMemory.channel_id == channel_id)
            if since is not None:
                query = query.where(_ThreadMemory.created_at >= since)
            return [_thread(row) for row in session.scalars(query)]

    # -- forgetting -----------------------------------------------------------------------

    def clear(self, channel_id: str | None = None) -> int:
        """Forget one channel's memories and thread memories (or everything); returns rows removed."""
        with self._session() as session:
            channels = delete(_ChannelMemory)
            threads = delete(_ThreadMemory)
            if channel_id is not None:
                channels = channels.where(_ChannelMemory.channel_id == channel_id)
                threads = threads.where(_ThreadMemory.channel_id == channel_id)
            removed = rowcount(session.execute(channels)) or 0
            return removed + (rowcount(session.execute(threads)) or 0)

    def forget_threads_before(self, cutoff: float) -> int:
        """Drop thread memories older than `cutoff` (retention, SPEC 9.3)."""
        with self._session() as session:
            return rowcount(session.execute(delete(_ThreadMemory).where(_ThreadMemory.created_at < cutoff))) or 0
