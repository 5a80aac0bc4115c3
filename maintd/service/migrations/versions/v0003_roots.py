"""The last search of every warehouse root, so that a root that cannot be searched is visible.

A root whose bucket is missing, whose credentials are refused or whose endpoint cannot be reached
yields no tables; without a record of it the daemon would look healthy with nothing to maintain. Every
replica writes its searches here, and ``/metrics`` (``maintd_root_healthy``) and ``maintd status`` read them.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from maintd.service.schema import URI, UTCDateTime

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "maintd_roots",
        sa.Column("uri", URI, primary_key=True),
        sa.Column("checked_at", UTCDateTime(), nullable=False),
        sa.Column("holder", sa.String(256), nullable=True),
        sa.Column("tables", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("error_type", sa.String(128), nullable=True),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("succeeded_at", UTCDateTime(), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("maintd_roots")
