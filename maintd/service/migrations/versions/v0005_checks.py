"""Checks of tables kept in place on the table's row, and the live replicas that share the tables.

A check that finds a table unchanged writes no run: the daemon counts its checks in memory and writes
them onto the table's row once per pass (``checked_at``, ``checked_by``, ``checks``, ``checks_planned``), so
the store grows with the work done, not with the number of checks. ``maintd_replicas`` holds one row per
daemon, renewed while it lives: the live replicas split the tables between them by rendezvous hashing, so
each table is checked by one replica per interval, and a replica that dies hands its tables on.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from maintd.service.schema import UTCDateTime

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("maintd_tables", sa.Column("checked_at", UTCDateTime(), nullable=True))
    op.add_column("maintd_tables", sa.Column("checked_by", sa.String(256), nullable=True))
    op.add_column("maintd_tables", sa.Column("checks", sa.BigInteger(), nullable=False, server_default="0"))
    op.add_column("maintd_tables", sa.Column("checks_planned", sa.BigInteger(), nullable=False, server_default="0"))
    op.create_table(
        "maintd_replicas",
        sa.Column("holder", sa.String(256), primary_key=True),
        sa.Column("started_at", UTCDateTime(), nullable=False),
        sa.Column("seen_at", UTCDateTime(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("maintd_replicas")
    with op.batch_alter_table("maintd_tables") as batch:  # SQLite drops columns by copying the table
        for name in ("checks_planned", "checks", "checked_by", "checked_at"):
            batch.drop_column(name)
