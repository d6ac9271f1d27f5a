"""Leases: what keeps two workers (threads, processes or machines) off one task.

A worker must hold the task's lease to claim it, renews it while it works, and a crashed
worker's lease simply expires. Acquisition is a single conditional INSERT-or-UPDATE, so
it is atomic on every backend SQLAlchemy supports.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid as uuid_module
from collections.abc import Callable
from typing import NamedTuple, cast

from sqlalchemy import Float, String, Table, insert, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, mapped_column

from coding_agent.store.engine import Base, TableStore, rowcount

__all__ = ["Leases", "LEASES", "LiveLease", "new_owner_id"]


class _Lease(Base):
    __tablename__ = "leases"
    task_key: Mapped[str] = mapped_column(String(300), primary_key=True)
    owner: Mapped[str] = mapped_column(String(100))
    expires_at: Mapped[float] = mapped_column(Float)


# The leases table, for the stores beside this one that must know whether a lease is live.
LEASES = cast(Table, _Lease.__table__)  # `__table__` is typed as any `FromClause`


class LiveLease(NamedTuple):
    """A lease that has not run out: who holds it, and for how much longer (by the store's clock)."""

    owner: str
    seconds_left: float


def new_owner_id() -> str:
    """A lease owner id unique to this worker: host-process-random."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid_module.uuid4().hex[:8]}"


class Leases(TableStore):
    """Taking, renewing and releasing a task's lease.

    This object also remembers the leases taken through it and not let go yet: the
    claims and runs of this process. Such a lease is never taken again here, even once
    its time has run out (a claim's forge reads outlasting a short lease on a busy
    machine): another claim path of this process would find nothing to do and hand it
    back, and the run it belongs to would find its lease gone. Another process still
    takes it over once it has run out: that is what a lease is for.
    """

    def __init__(self, engine: Engine, clock: Callable[[], float] = time.time) -> None:
        super().__init__(engine, clock)
        self._taken_here: set[tuple[str, str]] = set()  # (task key, owner)
        self._taken_lock = threading.Lock()

    def acquire_lease(self, task_key: str, owner: str, ttl_seconds: float) -> bool:
        """Take the task's lease if it is free or expired. True when taken.

        Not when it is already ours: a lease of ours belongs to a claim or a run of this
        process, and every claim path (intake, follow-ups, review threads, recovery, a
        redelivered message) hands the lease back when it finds nothing to do. Taking
        "already ours" as taken handed a running run's lease back, and the run stopped at
        its next step, its lease lost (or a takeover ran it a second time beside itself).
        """
        with self._taken_lock:
            if (task_key, owner) in self._taken_here:
                return False
        now = self._clock()
        try:
            with self._session() as session:
                session.execute(insert(_Lease).values(task_key=task_key, owner=owner, expires_at=now + ttl_seconds))
            taken = True
        except IntegrityError:
            with self._session() as session:
                result = session.execute(
                    update(_Lease)
                    .where(_Lease.task_key == task_key, _Lease.expires_at < now)
                    .values(owner=owner, expires_at=now + ttl_seconds)
                )
                taken = rowcount(result) == 1
        if taken:
            with self._taken_lock:
                self._taken_here.add((task_key, owner))
        return taken

    def renew_lease(self, task_key: str, owner: str, ttl_seconds: float) -> bool:
        """Extend our lease; False when it is no longer ours (another worker took over)."""
        with self._session() as session:
            result = session.execute(
                update(_Lease)
                .where(_Lease.task_key == task_key, _Lease.owner == owner)
                .values(expires_at=self._clock() + ttl_seconds)
            )
            renewed = rowcount(result) == 1
        if not renewed:
            self.let_go(task_key, owner)
        return renewed

    def release_lease(self, task_key: str, owner: str) -> None:
        try:
            with self._session() as session:
                lease = session.get(_Lease, task_key)
                if lease is not None and lease.owner == owner:
                    session.delete(lease)
        finally:  # let go here even when the store is away: its row then runs out by itself
            self.let_go(task_key, owner)

    def let_go(self, task_key: str, owner: str) -> None:
        """No claim or run of this process stands for `owner`'s lease of `task_key` any
        more: it was released, another worker took it over, or its run ended without
        releasing it (an internal error). Once run out, it may be taken here again."""
        with self._taken_lock:
            self._taken_here.discard((task_key, owner))

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
