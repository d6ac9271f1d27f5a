"""Daily budgets (SPEC 11.5): which task was told, on which UTC day, that a budget holds
it, so that it is told once a day; and indexes for the day's usage."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"


def upgrade() -> None:
    op.create_table(
        "budget_notices",
        sa.Column("task_key", sa.String(300), primary_key=True),
        sa.Column("day", sa.String(10), nullable=False),
    )
    op.create_index("ix_token_usage_recorded_at", "token_usage", ["recorded_at"])
    op.create_index("ix_runs_started_at", "runs", ["started_at"])
