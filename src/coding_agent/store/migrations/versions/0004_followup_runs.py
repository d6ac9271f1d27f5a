"""Follow-up decisions say which run they ask for: the task to run (`run_key`, the issue
of a review thread's PR/MR), who asked and the thread to answer in. A worker that dies
between such a claim and its run leaves only a `processing` label behind; the takeover
reads the decision to carry on as that follow-up (SPEC 3). Earlier rows keep NULLs."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    with op.batch_alter_table("followup_comments") as table:
        table.add_column(sa.Column("run_key", sa.String(300), nullable=True))
        table.add_column(sa.Column("requester", sa.String(200), nullable=True))
        table.add_column(sa.Column("reply_to", sa.String(400), nullable=True))
        table.create_index("ix_followup_comments_run_key", ["run_key"])
