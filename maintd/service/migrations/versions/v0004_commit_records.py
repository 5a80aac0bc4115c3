"""Commit records of tables whose store has no conditional put (storage option ``commit_lock: state_store``).

A commit's bytes are inserted under a unique key before its file is written, so the database, not a lock with a
lease, decides which writer has a version (maintd.service.commit_lock).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from maintd.service.schema import UTCDateTime

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "maintd_commit_records",
        sa.Column("key", sa.String(64), primary_key=True),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=True),
        sa.Column("complete", sa.Boolean(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("maintd_commit_records")
