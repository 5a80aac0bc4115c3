"""The layout measures the fleet-wide histograms read, in columns of their own beside the layout.

Every ``/metrics`` scrape reads four numbers of every enabled table (read amplification, the commit time of
the oldest level-0 file, history bytes, bytes held by pins). Extracting them from the JSON layouts put a
scrape on PostgreSQL over its time goal at 10,000 tables (docs/benchmarks.md, "The web console at 10,000
tables"). They are written with the layout and backfilled here from the layouts already stored.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from maintd.service.schema import LAYOUT_MEASURES

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for name in LAYOUT_MEASURES:
        op.add_column("maintd_tables", sa.Column(f"layout_{name}", sa.Float(), nullable=True))
    table = sa.table("maintd_tables", sa.column("layout", sa.JSON()),
                     *(sa.column(f"layout_{name}", sa.Float()) for name in LAYOUT_MEASURES))
    op.execute(table.update().where(table.c.layout.is_not(None)).values(
        {f"layout_{name}": table.c.layout[name].as_float() for name in LAYOUT_MEASURES}))


def downgrade() -> None:
    with op.batch_alter_table("maintd_tables") as batch:  # SQLite drops columns by copying the table
        for name in reversed(LAYOUT_MEASURES):
            batch.drop_column(f"layout_{name}")
