"""Trigger rejections: a task whose trigger was refused (the labeller lacks write
access), at the `updated_at` seen then, so the refusal is explained once."""

from __future__ import annotations

from sqlalchemy import String
from sqlalchemy.orm import Mapped, mapped_column

from coding_agent.store.engine import Base, TableStore

__all__ = ["TriggerRejections"]


class _TriggerRejection(Base):
    """A task whose trigger was refused, at the `updated_at` seen then (so we comment once)."""

    __tablename__ = "trigger_rejections"
    task_key: Mapped[str] = mapped_column(String(300), primary_key=True)
    updated_at: Mapped[str] = mapped_column(String(40))


class TriggerRejections(TableStore):
    """Which tasks' triggers were refused, and at which `updated_at`."""

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
