"""CI feedback (SPEC 16): one watch per task over the CI of the head the agent pushed,
kept in the store so it survives restarts and is acted on under the task's lease."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"


def upgrade() -> None:
    op.create_table(
        "ci_watches",
        sa.Column("task_key", sa.String(300), primary_key=True),
        sa.Column("project", sa.String(300), nullable=False),
        sa.Column("number", sa.Integer, nullable=False),
        sa.Column("head_branch", sa.String(300), nullable=False),
        sa.Column("sha", sa.String(64), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("appeared_at", sa.Float, nullable=True),
        sa.Column("acted_at", sa.Float, nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("max_attempts", sa.Integer, nullable=False),
        sa.Column("reran", sa.Boolean, nullable=False),
        sa.Column("requester", sa.String(200), nullable=True),
        sa.Column("reply_to", sa.String(400), nullable=True),
        sa.Column("bot_assigned", sa.Boolean, nullable=False),
        sa.Column("failing", sa.Text, nullable=True),
    )
    op.create_index("ix_ci_watches_sha", "ci_watches", ["project", "sha"])
    op.create_index("ix_ci_watches_state", "ci_watches", ["state"])
