"""Which store errors are an outage (`retry.store_unavailable`), how a run's store call
waits one out (`retry.through_store_outage`), and whose the lease is afterwards
(`RunLedger.stored`): real SQLite and PostgreSQL errors, a SQLite file whose directory
is gone for a while (a lost mount)."""

from __future__ import annotations

import asyncio
import logging
import socket
import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import create_engine, event, text
from sqlalchemy.exc import DBAPIError

from coding_agent.agent.ledger import RunLedger
from coding_agent.agent.steering import LeaseLost
from coding_agent.retry import store_unavailable, through_store_outage
from coding_agent.store.state import StateStore
from tests.support.waiting import wait_until

from .test_state_store import FakeClock

KEY = "github:acme/widgets#1"


def _error_of(url: str, statement: str, **connect_args: object) -> DBAPIError:
    engine = create_engine(url, connect_args=connect_args)
    try:
        with engine.begin() as connection:
            connection.execute(text(statement))
    except DBAPIError as error:
        return error
    finally:
        engine.dispose()
    raise AssertionError(f"{statement!r} on {url} did not fail")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_sqlite_file_locked_by_another_writer_is_an_outage(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x INTEGER)")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        error = _error_of(f"sqlite:///{path}", "INSERT INTO t VALUES (1)", timeout=0)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert "database is locked" in str(error)
    assert store_unavailable(error)


def test_a_sqlite_file_that_cannot_be_opened_is_an_outage(tmp_path: Path) -> None:
    error = _error_of(f"sqlite:///{tmp_path / 'gone' / 'state.db'}", "SELECT 1")
    assert store_unavailable(error)


def test_a_wrong_statement_is_not_an_outage(tmp_path: Path) -> None:
    error = _error_of(f"sqlite:///{tmp_path / 'state.db'}", "SELECT * FROM no_such_table")
    assert not store_unavailable(error), "a missing table is a bug, not a store that is away"
    assert not store_unavailable(ValueError("database is locked"))


def test_a_postgresql_server_that_refuses_connections_is_an_outage() -> None:
    pytest.importorskip("psycopg")
    error = _error_of(f"postgresql+psycopg://postgres@127.0.0.1:{_free_port()}/postgres", "SELECT 1")
    assert store_unavailable(error)


def test_a_run_s_store_call_waits_while_the_store_is_away_then_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The store's directory is missing (SQLite cannot open its file) until the third
    wait: the call is made again after each wait, the outage is logged once as it begins
    and once as it ends, and the run's check after an outage runs once."""
    directory = tmp_path / "store"
    directory.mkdir()
    store = StateStore(f"sqlite:///{directory / 'state.db'}")
    store.close()
    hidden = tmp_path / "hidden"
    directory.rename(hidden)
    waits: list[float] = []
    confirmed: list[bool] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 3:
            hidden.rename(directory)

    async def confirm() -> None:
        confirmed.append(True)

    caplog.set_level(logging.INFO, logger="coding_agent.retry")
    runs = asyncio.run(through_store_outage(lambda: store.runs.all(), "github:o/r#1: run r-1", confirm, sleep))

    assert runs == []
    assert len(waits) == 3 and waits == sorted(waits), "backing off"
    assert confirmed == [True]
    # The retry module's own lines: an earlier test in the same worker may have left
    # other loggers (the schema's migration, Alembic) at INFO as well.
    messages = [record.getMessage() for record in caplog.records if record.name == "coding_agent.retry"]
    assert messages == [
        "github:o/r#1: run r-1: the state store cannot be reached (OperationalError); waiting for it",
        "github:o/r#1: run r-1: the state store is back",
    ]
    assert not any(record.exc_info for record in caplog.records), "no traceback"


def test_any_other_error_passes_through_at_once(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'state.db'}")

    def wrong() -> None:
        with engine.begin() as connection:
            connection.execute(text("SELECT * FROM no_such_table"))

    async def no_wait(seconds: float) -> None:
        raise AssertionError("a wrong statement must not be waited on")

    with pytest.raises(DBAPIError):
        asyncio.run(through_store_outage(wrong, "x", None, no_wait))
    engine.dispose()


class _Outage:
    """A run's store on a SQLite file whose directory goes away (its connections cannot
    be made again) and comes back; `other` is another worker's store on the same file."""

    def __init__(self, tmp_path: Path, clock: FakeClock) -> None:
        self.directory, self.hidden = tmp_path / "store", tmp_path / "hidden"
        self.store = StateStore(f"sqlite:///{self.directory / 'state.db'}", clock=clock)
        self.clock = clock

    def begin(self) -> StateStore:
        self.directory.rename(self.hidden)
        self.store.engine.dispose()
        return StateStore(f"sqlite:///{self.hidden / 'state.db'}", clock=self.clock)

    def end(self, other: StateStore) -> None:
        other.close()
        self.hidden.rename(self.directory)


def _run_holding_its_lease(outage: _Outage) -> RunLedger:
    assert outage.store.leases.acquire_lease(KEY, "worker-a", 30)
    outage.store.runs.start_run("run-1", KEY, "worker-a", None)
    return RunLedger(outage.store, "worker-a", KEY, "run-1", None, 30)


@pytest.mark.parametrize("taken_over", [True, False])
def test_after_an_outage_longer_than_the_lease_the_run_goes_on_only_if_no_one_took_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, taken_over: bool
) -> None:
    """The run's checkpoint read meets the store away, and the outage outlasts the lease.
    Taken over meanwhile by another worker: the run stops (`LeaseLost`) and the lease
    stays the other's. Not taken: the lease is renewed, and the read answers."""
    outage = _Outage(tmp_path, FakeClock())
    ledger = _run_holding_its_lease(outage)
    caplog.set_level(logging.INFO, logger="coding_agent.retry")

    async def checkpoint_through_the_outage() -> object:
        other = outage.begin()
        reading = asyncio.create_task(ledger.stored(outage.store.steering.steering_requests, KEY))
        await wait_until(lambda: "waiting for it" in caplog.text, 30, "the run to meet the store away")
        outage.clock.now += 31
        if taken_over:
            assert other.leases.acquire_lease(KEY, "worker-b", 30)
        outage.end(other)
        return await reading

    try:
        if taken_over:
            with pytest.raises(LeaseLost):
                asyncio.run(checkpoint_through_the_outage())
        else:
            assert asyncio.run(checkpoint_through_the_outage()) == (None, None)
        lease = outage.store.leases.live_lease(KEY)
    finally:
        outage.store.close()
    assert lease is not None and lease.owner == ("worker-b" if taken_over else "worker-a")
    assert lease.seconds_left == 30


def test_the_lease_heartbeat_rides_out_an_outage_and_renews_the_lease_once_it_is_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The heartbeat meets the store away beat after beat: it says so once, the run's
    lease is not given up, and the first beat after the outage renews it."""
    from coding_agent.runtime.lease import LeaseHeartbeat

    outage = _Outage(tmp_path, FakeClock())
    assert outage.store.leases.acquire_lease(KEY, "worker-a", 1.5)
    caplog.set_level(logging.INFO, logger="coding_agent.runtime.lease")

    def failures() -> int:
        return sum("heartbeat failed" in record.getMessage() for record in caplog.records)

    connects: list[object] = []
    event.listen(outage.store.engine, "do_connect", lambda *_: connects.append(1))

    async def beating_through_the_outage() -> LeaseHeartbeat:
        async with LeaseHeartbeat(outage.store.leases, KEY, "worker-a", 1.5) as lease:
            other = outage.begin()
            outage.clock.now += 10  # the lease ran out meanwhile; no one took it
            await wait_until(lambda: failures() >= 1, 30, "a beat to meet the store away")
            beats, tried = lease.beats, len(connects)
            await wait_until(lambda: len(connects) >= tried + 3, 30, "three more beats to meet the store away")
            outage.end(other)
            await wait_until(lambda: lease.beats > beats, 30, "a beat after the outage")
            return lease

    try:
        lease = asyncio.run(beating_through_the_outage())
        held = outage.store.leases.live_lease(KEY)
    finally:
        outage.store.close()
    assert not lease.lost
    assert failures() == 1, "the outage is logged once, not at every beat"
    assert held is not None and held.owner == "worker-a"
