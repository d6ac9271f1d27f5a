"""The one database every store uses: opening its engine, `Base`, the ORM base every
table is declared on, and `TableStore`, the base of every store that keeps tables in it
(the state store's families, memories, the queue's entries, webhook deliveries,
follow-ups): one database and one backend choice, SQLite by default or PostgreSQL.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar, cast

from sqlalchemy import create_engine, event
from sqlalchemy.engine import CursorResult, Engine, Result
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Session
from sqlalchemy.orm.exc import StaleDataError

from coding_agent.store.schema import migrate

__all__ = ["IN_CHUNK", "Base", "TableStore", "again_if_changed_meanwhile", "in_chunks", "open_engine"]

T = TypeVar("T")

# The most values one `IN (...)` list is given: within every backend's parameter limit
# (SQLite's was 999 before 3.32), and a power of two (see `in_chunks`).
IN_CHUNK = 512


def _sqlite_pragmas(dbapi_connection: DBAPIConnection, _record: object) -> None:
    # WAL lets readers and one writer work at once; busy_timeout makes concurrent
    # processes wait for the write lock instead of failing with "database is locked".
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA journal_mode=WAL")
    # Under WAL, NORMAL still never corrupts the database; it only skips an fsync per
    # commit, which would otherwise dominate the per-step cost of heartbeats and usage rows.
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def open_engine(url: str) -> Engine:
    """The engine for `database.url` (a SQLite file's directory is created); the first
    `TableStore` on it migrates the schema."""
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, future=True, pool_pre_ping=True)
    if url.startswith("sqlite"):
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def rowcount(result: Result[*tuple[Any, ...]]) -> int:
    """The rows an UPDATE or DELETE matched. `Session.execute` is typed as returning a
    `Result`; for those statements it is a `CursorResult`, the type that has `rowcount`."""
    return cast("CursorResult[*tuple[Any, ...]]", result).rowcount


def in_chunks(values: Iterable[T]) -> Iterator[list[T]]:
    """`values` as the lists for one `IN (...)` each: at most `IN_CHUNK` values a list,
    every list padded to a power of two by repeating its last value (a value twice in an
    IN list matches the same rows). Nothing for no values.

    The database driver keeps the statements it prepared, by their text, per connection
    (Python's sqlite3: the last 128 of each pooled connection), and an IN list of n values
    is a text of its own for each n: a poll's look at its follow-up candidates, whose
    number changed with every open PR, left one more prepared statement in the pool per
    poll, about 70 kB each for 400 keys (SQLite's memory grew with the open PRs, up to
    128 statements a connection). Padded, one query has at most ten texts.
    """
    chunk: list[T] = []
    for value in values:
        chunk.append(value)
        if len(chunk) == IN_CHUNK:
            yield chunk
            chunk = []
    if chunk:
        size = 1 << (len(chunk) - 1).bit_length()
        yield chunk + [chunk[-1]] * (size - len(chunk))


class Base(DeclarativeBase):
    """The ORM base of every table (one metadata, so any store's query may join any table)."""


class TableStore:
    """Base of the stores that keep tables in the one database, on its engine.

    Their tables are created by the schema's migrations (`schema.py`); `Base.metadata`
    only describes them to the ORM.
    """

    def __init__(self, engine: Engine, clock: Callable[[], float] = time.time) -> None:
        self._engine = engine
        self._clock = clock
        migrate(engine)

    @contextmanager
    def _session(self) -> Iterator[Session]:
        with Session(self._engine) as session, session.begin():
            yield session


def again_if_changed_meanwhile(write: Callable[[], T]) -> T:
    """Run `write` (one transaction that reads a row, then inserts it when missing or
    updates it) once more when another process changed that row between the read and the
    write: inserted it first (the primary key refused ours) or deleted it (our update
    matched no row). The second time it reads the row as it is now.

    Two producers offering one key, two runs of one repository ending together: a read
    under `with_for_update` locks no row that is not there yet, on SQLite or PostgreSQL.
    A worker releasing a key's entry as a producer offers the key again: SQLite locks no
    row it read, and a read without `with_for_update` does not lock it on PostgreSQL.
    """
    try:
        return write()
    except (IntegrityError, StaleDataError):
        return write()
