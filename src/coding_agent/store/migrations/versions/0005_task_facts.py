"""What a task is, for the dashboard and `status` (SPEC 11.3): its title and link as the
forge gave them when it was queued or run, and the PR/MR the agent opened for it. One row
per task key; the forge text is kept as written (the pages escape it)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"


def upgrade() -> None:
    op.create_table(
        "task_facts",
        sa.Column("task_key", sa.String(300), primary_key=True),
        sa.Column("title", sa.Text, nullable=True),
        sa.Column("url", sa.String(1000), nullable=True),
        sa.Column("change_url", sa.String(1000), nullable=True),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
