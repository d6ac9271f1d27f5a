"""`store/schema.py`'s `HEAD`, the newest revision known without loading Alembic."""

from __future__ import annotations


def test_the_schema_head_known_without_alembic_is_alembic_s_head() -> None:
    """A store at `HEAD` opens without migrating; a new migration that does not move it
    would leave databases unmigrated."""
    from coding_agent.store.schema import HEAD, head_version

    assert HEAD == head_version()
