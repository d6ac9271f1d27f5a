"""The schema the migrations make is the one the code knows: `store/schema.py`'s `HEAD`,
the newest revision known without loading Alembic, and the tables the ORM declares."""

from __future__ import annotations

import importlib
import pkgutil

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine

import coding_agent.store
from coding_agent.store.engine import Base
from coding_agent.store.schema import migrate


def test_the_schema_head_known_without_alembic_is_alembic_s_head() -> None:
    """A store at `HEAD` opens without migrating; a new migration that does not move it
    would leave databases unmigrated."""
    from coding_agent.store.schema import HEAD, head_version

    assert HEAD == head_version()


def test_the_migrated_schema_is_every_table_the_stores_declare() -> None:
    """One ORM base over every table: a column or index declared without a migration (or
    migrated without being declared) shows as a difference."""
    for module in pkgutil.iter_modules(coding_agent.store.__path__, "coding_agent.store."):
        importlib.import_module(module.name)
    engine = create_engine("sqlite:///:memory:")
    try:
        migrate(engine)
        with engine.connect() as connection:
            differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    finally:
        engine.dispose()
    assert differences == []
    assert "webhook_deliveries" in Base.metadata.tables and "followup_seen" in Base.metadata.tables
