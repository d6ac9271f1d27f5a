"""Leases: what keeps two workers (threads, processes or machines) off one task.

A worker must hold the task's lease to claim it, renews it while it works, and a crashed
worker's lease simply expires. Acquisition is a single conditional INSERT-or-UPDATE, so
it is atomic on every backend SQLAlchemy supports.
"""

from __future__ import annotations

import os
import socket
import uuid as uuid_module
from typing import NamedTuple

from sqlalchemy import Float, String, insert, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, mapped_column

from coding_agent.store.engine import Base, TableStore

__all__ = ["Leases", "LEASES", "LiveLease", "new_owner_id"]


class _Lease(Base):
    __tablename__ = "leases"
    task_key: Mapped[str] = mapped_column(String(300), primary_key=True)
    owner: Mapped[str] = mapped_column(String(100))
    expires_at: Mapped[float] = mapped_column(Float)


# The leases table, for the stores beside this one that must know whether a lease is live.
LEASES = _Lease.__table__


class LiveLease(NamedTuple):
    """A lease that has not run out: who holds it, and for how much longer (by the store's clock)."""

    owner: str
    seconds_left: float


def new_owner_id() -> str:
    """A lease owner id unique to this worker: host-process-random."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid_module.uuid4().hex[:8]}"


class Leases(TableStore):
    """Taking, renewing and releasing a task's lease."""

    def acquire_lease(self, task_key: str, owner: str, ttl_seconds: float) -> bool:
        """Take the task's lease if it is free or expired. True when taken.

        Not when it is already ours: a lease of ours belongs to a run of this process,
        and every claim path (intake, follow-ups, review threads, recovery, a redelivered
        message) hands the lease back when it finds nothing to do. Taking "already ours"
        as taken handed a running run's lease back, and the run stopped at its next step,
        its lease lost (or a takeover ran it a second time beside itself).
        """
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
                .where(_Lease.task_key == task_key, _Lease.expires_at < now)
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
        lease = self.live_lease(task_key)
        return lease.owner if lease is not None else None

    def live_lease(self, task_key: str) -> LiveLease | None:
        """Who holds the task's lease and until when; None when nobody does any more."""
        with self._session() as session:
            lease = session.get(_Lease, task_key)
            if lease is None:
                return None
            left = lease.expires_at - self._clock()
            return LiveLease(lease.owner, left) if left >= 0 else None
