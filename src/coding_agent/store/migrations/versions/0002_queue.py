"""The queue's bookkeeping: task keys queued or running (dedup, SPEC 11.1) and the
webhook deliveries already seen (SPEC 11.2)."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"


def upgrade() -> None:
    op.create_table(
        "queue_entries",
        sa.Column("task_key", sa.String(300), primary_key=True),
        sa.Column("state", sa.String(10), nullable=False),
        sa.Column("scope", sa.String(250), nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_table(
        "webhook_deliveries",
        sa.Column("delivery_id", sa.String(200), primary_key=True),
        sa.Column("received_at", sa.Float, nullable=False, index=True),
    )
