"""The state store as maintd 0.1.0 created it (before migrations): tables, runs, decisions, leases.

A store created by maintd 0.1.0 has exactly these tables and no version table; maintd recognises it and
records this revision for it, then upgrades it from here.

Revision ID: 0001
Revises:
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from maintd.service.schema import URI, UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "maintd_tables",
        sa.Column("uri", URI, primary_key=True),
        sa.Column("name", sa.String(512), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("registered_at", UTCDateTime(), nullable=False),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("last_status", sa.String(16), nullable=True),
        sa.Column("last_run_at", UTCDateTime(), nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("maintenance_failures", sa.Integer, nullable=False),
        sa.Column("maintenance_retry_after", UTCDateTime(), nullable=True),
        sa.Column("reclaim_failures", sa.Integer, nullable=False),
        sa.Column("reclaim_retry_after", UTCDateTime(), nullable=True),
    )
    op.create_table(
        "maintd_runs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("table_uri", URI, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("holder", sa.String(256), nullable=True),
        sa.Column("started_at", UTCDateTime(), nullable=False),
        sa.Column("ended_at", UTCDateTime(), nullable=True),
        sa.Column("plan", sa.JSON, nullable=True),
        sa.Column("metrics", sa.JSON, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
    )
    op.create_index("ix_maintd_runs_table_started", "maintd_runs", ["table_uri", "started_at"])
    op.create_index("ix_maintd_runs_status", "maintd_runs", ["status"])
    op.create_table(
        "maintd_decisions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.Integer, sa.ForeignKey("maintd_runs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("partition", sa.String(1024), nullable=False),
        sa.Column("bucket", sa.Integer, nullable=True),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("rule", sa.String(128), nullable=False),
        sa.Column("message", sa.Text, nullable=False),
    )
    op.create_index("ix_maintd_decisions_run_id", "maintd_decisions", ["run_id"])
    op.create_table(
        "maintd_leases",
        sa.Column("table_uri", URI, primary_key=True),
        sa.Column("holder", sa.String(256), nullable=True),
        sa.Column("acquired_at", UTCDateTime(), nullable=True),
        sa.Column("expires_at", UTCDateTime(), nullable=False),
    )


def downgrade() -> None:
    for table in ("maintd_leases", "maintd_decisions", "maintd_runs", "maintd_tables"):
        op.drop_table(table)
