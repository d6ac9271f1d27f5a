"""The state store's schema: a version number and ordered migrations, applied at start.

Why Alembic (over plain versioned SQL): it is the maintained tool for SQLAlchemy
schemas, keeps the version in its own `alembic_version` table, runs the same migration
scripts on SQLite (batch mode, for the ALTERs SQLite lacks) and PostgreSQL, and lets a
later issue add a table by dropping one file into `migrations/versions/`. The agent
runs the migrations itself when its store opens (no separate deployment step), so
`serve`, `worker` and `run --once` all find the schema they expect.

Several processes may start against one fresh database at once: on PostgreSQL they
queue on an advisory lock; on SQLite a process that lost the race (the other created
a table or the version row first) simply tries again and finds nothing left to do.
"""

from __future__ import annotations

import logging
import threading
import weakref
from importlib import resources
from typing import TYPE_CHECKING

from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = ["HEAD", "migrate", "schema_version", "head_version"]



def _newest_revision() -> str:
    """The newest revision in migrations/versions/, from the file names alone.

    Each migration is `NNNN_<what>.py` with revision "NNNN" (tests/unit/test_schema_head.py
    checks that the newest is Alembic's head). Read from the directory, not written down
    here: a constant forgotten at a new migration would leave every database one step
    behind, since a store "at HEAD" is not migrated.
    """
    versions = resources.files("coding_agent.store") / "migrations" / "versions"
    revisions = [entry.name[:4] for entry in versions.iterdir() if entry.name[:4].isdigit() and entry.name.endswith(".py")]
    return max(revisions)


# Known without loading Alembic: a store already at it opens with one SELECT, and Alembic
# (with Mako and Pygments, about a tenth of every process start: each `run --once`,
# `status`, `memory`) is imported only to migrate.
HEAD = _newest_revision()

log = logging.getLogger(__name__)

# Any constant: the key of the PostgreSQL advisory lock the migrating processes share.
_ADVISORY_LOCK = 0x636F6461  # "coda"
_ATTEMPTS = 5
_migrated: weakref.WeakSet[Engine] = weakref.WeakSet()
# Alembic's `context` is process-global: one migration at a time per process.
_lock = threading.Lock()


def _config() -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(resources.files("coding_agent.store") / "migrations"))
    return config


def head_version() -> str:
    """The newest revision this code knows."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head


def schema_version(engine: Engine) -> str | None:
    """The revision the database is at (None: never migrated, e.g. an unversioned one)."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def migrate(engine: Engine) -> None:
    """Bring the database to the newest revision; cheap when it is there already."""
    with _lock:
        if engine not in _migrated:
            if not _at_head(engine):
                _migrate(engine)
            _migrated.add(engine)


def _at_head(engine: Engine) -> bool:
    """The database is at `HEAD` already (read-only; False when unversioned or unsure)."""
    try:
        with engine.connect() as connection:
            versions = connection.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    except (OperationalError, ProgrammingError):
        return False  # no version table yet: a fresh (or a previous version's) database
    return list(versions) == [HEAD]


def _migrate(engine: Engine) -> None:
    from alembic import command
    from alembic.runtime.migration import MigrationContext

    config = _config()
    head = head_version()
    for attempt in range(_ATTEMPTS):
        try:
            with engine.begin() as connection:
                if connection.dialect.name == "postgresql":
                    connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _ADVISORY_LOCK})
                current = MigrationContext.configure(connection).get_current_revision()
                if current != head:
                    log.info("state store: migrating the schema from %s to %s", current or "unversioned", head)
                    config.attributes["connection"] = connection
                    command.upgrade(config, "head")
            break
        except (OperationalError, IntegrityError, ProgrammingError):
            # Another process migrated the same tables at the same moment (SQLite).
            if attempt == _ATTEMPTS - 1:
                raise
