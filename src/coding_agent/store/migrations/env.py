"""Alembic's entry point, run by `coding_agent.store.schema.migrate` on its connection.

Only the programmatic path is supported (no alembic.ini): the agent migrates its own
database at start, so a deployment never runs a separate migration step.
"""

from __future__ import annotations

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, render_as_batch=connection.dialect.name == "sqlite")
with context.begin_transaction():
    context.run_migrations()
