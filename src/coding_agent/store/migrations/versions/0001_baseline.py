"""Baseline: the tables of the unversioned schema (before the schema had a version).

Databases created by those versions already have these tables and no version row: each
table is created only when missing, so they are adopted as revision 0001 unchanged.
The DDL is written out here, frozen, and never follows later edits to the models.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None


def _tables(metadata: sa.MetaData) -> None:
    sa.Table(
        "runs",
        metadata,
        sa.Column("uuid", sa.String(36), primary_key=True),
        sa.Column("task_key", sa.String(300), nullable=False, index=True),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("owner", sa.String(100), nullable=False),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("finished_at", sa.Float),
        sa.Column("steps", sa.Integer, nullable=False),
        sa.Column("prompt_tokens", sa.Integer, nullable=False),
        sa.Column("completion_tokens", sa.Integer, nullable=False),
        sa.Column("requester", sa.String(200)),
        sa.Column("error", sa.Text),
    )
    sa.Table(
        "leases",
        metadata,
        sa.Column("task_key", sa.String(300), primary_key=True),
        sa.Column("owner", sa.String(100), nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
    )
    sa.Table(
        "token_usage",
        metadata,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_uuid", sa.String(36), nullable=False, index=True),
        sa.Column("task_key", sa.String(300), nullable=False, index=True),
        sa.Column("prompt_tokens", sa.Integer, nullable=False),
        sa.Column("completion_tokens", sa.Integer, nullable=False),
        sa.Column("recorded_at", sa.Float, nullable=False),
    )
    sa.Table(
        "run_requests",
        metadata,
        sa.Column("task_key", sa.String(300), primary_key=True),
        sa.Column("kind", sa.String(10), nullable=False),
        sa.Column("requested_at", sa.Float, nullable=False),
    )
    sa.Table(
        "run_marks",
        metadata,
        sa.Column("run_uuid", sa.String(36), primary_key=True),
        sa.Column("progress_comment_id", sa.String(100)),
        sa.Column("resume_hold", sa.Boolean, nullable=False),
        sa.Column("final_status", sa.String(20)),
        sa.Column("final_body", sa.Text),
        sa.Column("final_posted", sa.Boolean, nullable=False),
    )
    sa.Table(
        "trigger_rejections",
        metadata,
        sa.Column("task_key", sa.String(300), primary_key=True),
        sa.Column("updated_at", sa.String(40), nullable=False),
    )
    sa.Table(
        "followup_comments",
        metadata,
        sa.Column("task_key", sa.String(300), primary_key=True),
        sa.Column("comment_id", sa.String(100), primary_key=True),
        sa.Column("action", sa.String(20), nullable=False),
        sa.Column("at", sa.Float, nullable=False),
    )
    sa.Table(
        "followup_seen",
        metadata,
        sa.Column("task_key", sa.String(300), primary_key=True),
        sa.Column("updated_at", sa.String(40), nullable=False),
    )
    sa.Table(
        "channel_memories",
        metadata,
        sa.Column("channel_id", sa.String(300), primary_key=True),
        sa.Column("workspace_id", sa.String(300), nullable=False, index=True),
        sa.Column("channel_name", sa.String(300), nullable=False),
        sa.Column("long_term", sa.Text),
        sa.Column("short_term", sa.Text),
        sa.Column("updated_at", sa.Float),
        sa.Column("last_active_at", sa.Float, nullable=False),
    )
    sa.Table(
        "thread_memories",
        metadata,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("channel_id", sa.String(300), nullable=False, index=True),
        sa.Column("thread_id", sa.String(300), nullable=False, index=True),
        sa.Column("run_uuid", sa.String(36), nullable=False),
        sa.Column("summary", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False, index=True),
    )


def upgrade() -> None:
    metadata = sa.MetaData()
    _tables(metadata)
    metadata.create_all(op.get_bind(), checkfirst=True)
