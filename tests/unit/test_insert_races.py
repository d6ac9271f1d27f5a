"""Two processes inserting the same row at once, on SQLite and PostgreSQL: the queue's
bookkeeping (two producers offering one key), a repository's memory (two runs of it
ending together, the first time) and an operator request (two operators at once). And
one process deleting a row another has just read and is about to update (a queue entry
released by the worker whose run ended, as the producer offers the key again).

Both read "no row" and both insert: the second insert breaks the primary key. Found by
two `run --once` processes started together (test_concurrency.py): one of them ended
with the IntegrityError, exit code 1, its tasks left to the other. A row another process
inserted meanwhile must be read as if it had been there all along.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

from coding_agent.domain.memories import channel_of
from coding_agent.domain.tasks import TaskKey
from coding_agent.store.memories import MemoryStore
from coding_agent.store.queue_entries import QueueEntries
from coding_agent.store.state import StateStore

from ..postgres import fresh_postgres_or_skip

KEY = "github:acme/widgets#1"


@contextmanager
def _database(kind: str, tmp_path: Path) -> Iterator[str]:
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'state.db'}"
        return
    with fresh_postgres_or_skip() as url:
        yield url


@contextmanager
def _two_processes(kind: str, tmp_path: Path, scopes: tuple[str, str]) -> Iterator[tuple[QueueEntries, QueueEntries, Engine]]:
    """Two processes' bookkeeping on one database, each through its own engine."""
    with _database(kind, tmp_path) as url:
        stores = [StateStore(url), StateStore(url)]
        try:
            mine, theirs = (QueueEntries(store.engine, scope, 3600) for store, scope in zip(stores, scopes))
            yield mine, theirs, stores[0].engine
        finally:
            for store in stores:
                store.close()


def _just_before_my_insert(
    engine: Engine, competitor: Callable[[], Any], table: str = "queue_entries", write: str = "INSERT INTO"
) -> list[Any]:
    """Run `competitor` (the other process) after my read found nothing, before my insert
    (or, with `write="UPDATE"`, after my read found a row, before my update of it); the
    list it returns is not empty once it did (the race was staged)."""
    fired = []

    def before(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if not fired and statement.lstrip().upper().startswith(f"{write} {table.upper()}"):
            fired.append(competitor())

    event.listen(engine, "before_cursor_execute", before)
    return fired


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_key_enqueued_by_a_shared_queue_meanwhile_counts_as_queued(kind: str, tmp_path: Path) -> None:
    with _two_processes(kind, tmp_path, ("rabbitmq:tasks", "rabbitmq:tasks")) as (mine, theirs, engine):
        staged = _just_before_my_insert(engine, lambda: theirs.try_enqueue(KEY))
        assert mine.try_enqueue(KEY) is False, "queued by the other producer: once is enough"
        assert staged, "the other process's insert came first"
        assert theirs.states() == {KEY: "queued"}


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_key_another_process_queued_in_its_own_memory_is_queued_here_too(kind: str, tmp_path: Path) -> None:
    """An in-process queue is one this process cannot see: its entry does not hold the key back."""
    with _two_processes(kind, tmp_path, ("memory:a", "memory:b")) as (mine, theirs, engine):
        staged = _just_before_my_insert(engine, lambda: theirs.try_enqueue(KEY))
        assert mine.try_enqueue(KEY) is True
        assert staged, "the other process's insert came first"
        assert not mine.try_enqueue(KEY), "and once queued here, it is not queued here again"


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_marking_a_key_running_that_another_process_just_queued(kind: str, tmp_path: Path) -> None:
    """A redelivered message's key, marked running here while another producer queues it."""
    with _two_processes(kind, tmp_path, ("rabbitmq:tasks", "rabbitmq:tasks")) as (mine, theirs, engine):
        staged = _just_before_my_insert(engine, lambda: theirs.try_enqueue(KEY))
        mine.mark_running(KEY)
        assert staged, "the other process's insert came first"
        assert mine.states() == {KEY: "running"}


def test_a_key_offered_while_its_ended_run_releases_it_is_queued(tmp_path: Path) -> None:
    """The producer reads the key's `running` entry (its run has just handed its lease
    back, so the entry no longer counts) and updates it to `queued`; between the two the
    worker deletes the entry. The update then matched no row, the ORM raised, and `serve`
    ended. (SQLite only: PostgreSQL's `FOR UPDATE` makes the delete wait for the update.)"""
    with _two_processes("sqlite", tmp_path, ("memory:a", "memory:a")) as (mine, theirs, engine):
        theirs.mark_running(KEY)
        staged = _just_before_my_insert(engine, lambda: theirs.release(KEY), write="UPDATE")
        assert mine.try_enqueue(KEY) is True
        assert staged, "the other process's delete came first"
        assert mine.states() == {KEY: "queued"}


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_marking_a_key_running_while_another_process_releases_it(kind: str, tmp_path: Path) -> None:
    with _two_processes(kind, tmp_path, ("rabbitmq:tasks", "rabbitmq:tasks")) as (mine, theirs, engine):
        theirs.try_enqueue(KEY)
        staged = _just_before_my_insert(engine, lambda: theirs.release(KEY), write="UPDATE")
        mine.mark_running(KEY)
        assert staged, "the other process's delete came first"
        assert mine.states() == {KEY: "running"}


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_two_runs_of_a_repository_ending_together_both_leave_their_memory(kind: str, tmp_path: Path) -> None:
    with _database(kind, tmp_path) as url:
        stores = [StateStore(url), StateStore(url)]
        try:
            mine, theirs = (MemoryStore(store.engine) for store in stores)
            one, two = TaskKey.parse("github:acme/widgets#1"), TaskKey.parse("github:acme/widgets#2")
            staged = _just_before_my_insert(stores[0].engine, lambda: theirs.touch_channel(two), "channel_memories")
            mine.write_channel(one, "LONG-TERM", "SHORT-TERM")
            assert staged, "the other process's insert came first"
            channel = mine.channel(channel_of(one)[0])
        finally:
            for store in stores:
                store.close()
    assert channel is not None and (channel.long_term, channel.short_term) == ("LONG-TERM", "SHORT-TERM")


@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_a_stop_asked_while_another_operator_asks_a_pause_stays_a_stop(kind: str, tmp_path: Path) -> None:
    with _database(kind, tmp_path) as url:
        mine, theirs = StateStore(url), StateStore(url)
        try:
            staged = _just_before_my_insert(mine.engine, lambda: theirs.steering.request_control(KEY, "pause"), "run_requests")
            mine.steering.request_control(KEY, "stop")
            assert staged, "the other process's insert came first"
            assert theirs.steering.control_request(KEY) == "stop"
        finally:
            mine.close()
            theirs.close()
