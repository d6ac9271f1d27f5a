"""Daily budgets at claim (SPEC 15, "Spend past a budget"): the claims that passed a
`runs_per_day` check and whose run is not recorded yet, so a claim beside them counts
them; and one row per requester that such a check and claim lock for their transaction,
so N workers claiming at once pass a limit of one one at a time."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"


def upgrade() -> None:
    op.create_table(
        "run_claims",
        sa.Column("task_key", sa.String(300), primary_key=True),
        sa.Column("owner", sa.String(100), nullable=False),
        sa.Column("starter", sa.String(200), nullable=False),
        sa.Column("claimed_at", sa.Float, nullable=False),
    )
    op.create_index("ix_run_claims_starter", "run_claims", ["starter"])
    op.create_table(
        "budget_locks",
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("touched_at", sa.Float, nullable=False),
    )
