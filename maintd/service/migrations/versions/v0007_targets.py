"""Keeping targets: layout samples of the tables that declare targets, and each such table's tuning row.

``maintd_layout_samples`` holds the two layout measures the targets are measured on, sampled at regular
times, so that targets are checked against the 95th percentile over a window, not the last value seen.
``maintd_tuning`` holds, per table with targets, the targets, the measured figures and gaps (columns, so
that ``/metrics`` counts the tables missing each target in SQL) and the knobs the last re-tune applied, with
when and why. Both start empty: the daemon fills them.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from maintd.service.schema import URI, UTCDateTime
from maintd.target_names import TARGET_NAMES

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "maintd_layout_samples",
        sa.Column("table_uri", URI, primary_key=True),
        sa.Column("sampled_at", UTCDateTime(), primary_key=True),
        sa.Column("read_amplification", sa.Float(), nullable=True),
        sa.Column("oldest_l0_age_minutes", sa.Float(), nullable=True),
    )
    op.create_index("ix_maintd_layout_samples_at", "maintd_layout_samples", ["sampled_at"])
    op.create_table(
        "maintd_tuning",
        sa.Column("uri", URI, primary_key=True),
        *(sa.Column(f"target_{name}", sa.Float(), nullable=True) for name in TARGET_NAMES),
        *(sa.Column(f"measured_{name}", sa.Float(), nullable=True) for name in TARGET_NAMES),
        *(sa.Column(f"gap_{name}", sa.Float(), nullable=True) for name in TARGET_NAMES),
        sa.Column("measured_at", UTCDateTime(), nullable=True),
        sa.Column("overrides", sa.JSON(), nullable=True),
        sa.Column("interval_seconds", sa.Float(), nullable=True),
        sa.Column("tuned_at", UTCDateTime(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("predicted", sa.JSON(), nullable=True),
        sa.Column("tuned_measured", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("error_at", UTCDateTime(), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("maintd_tuning")
    op.drop_index("ix_maintd_layout_samples_at", table_name="maintd_layout_samples")
    op.drop_table("maintd_layout_samples")
