"""Webhook nudges (SPEC 11.2): a comment or an (un)assignment reported by webhook for a
task whose run is in another process, kept where that run's checkpoint reads it."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    op.create_table(
        "run_nudges",
        sa.Column("task_key", sa.String(300), primary_key=True),
        sa.Column("serial", sa.Integer, nullable=False),
        sa.Column("nudged_at", sa.Float, nullable=False, index=True),
    )
