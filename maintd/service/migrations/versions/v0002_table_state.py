"""Per-table state kept on the table's row: its layout and when each kind of run last succeeded.

The table gauges of ``/metrics`` (files, bytes, backlog, last success) are read from these columns by
every replica, so that all replicas report the same value whoever maintained the table last; and the
last success survives the pruning of old runs.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from maintd.service.schema import UTCDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

COLUMNS = (
    ("layout", sa.JSON),
    ("layout_at", UTCDateTime),
    ("maintenance_succeeded_at", UTCDateTime),
    ("reclaim_succeeded_at", UTCDateTime),
)


def upgrade() -> None:
    for name, kind in COLUMNS:
        op.add_column("maintd_tables", sa.Column(name, kind(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("maintd_tables") as batch:  # SQLite drops columns by copying the table
        for name, _ in reversed(COLUMNS):
            batch.drop_column(name)
