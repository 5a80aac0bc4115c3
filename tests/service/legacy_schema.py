"""The state store schema exactly as maintd 0.1.0 created it (``metadata.create_all``, no migrations).

A copy of that release's ``maintd/service/schema.py`` tables (its ``UTCDateTime`` is the package's), kept
to test the upgrade from it.
"""

from __future__ import annotations

from sqlalchemy import JSON, Boolean, Column, ForeignKey, Index, Integer, MetaData, String, Table, Text

from maintd.service.schema import UTCDateTime

metadata = MetaData()


URI = String(2048)

tables = Table(
    "maintd_tables",
    metadata,
    Column("uri", URI, primary_key=True),
    Column("name", String(512), nullable=False),
    Column("source", String(16), nullable=False, default="explicit"),  # explicit | discovered
    Column("registered_at", UTCDateTime(), nullable=False),
    Column("enabled", Boolean, nullable=False, default=True),
    Column("last_status", String(16), nullable=True),
    Column("last_run_at", UTCDateTime(), nullable=True),
    Column("last_error", Text, nullable=True),
    # Failures and backoff per run kind: a broken policy must not hold reclamation back, and a reclamation
    # that succeeds must not clear the backoff of a failing maintenance.
    Column("maintenance_failures", Integer, nullable=False, default=0),
    Column("maintenance_retry_after", UTCDateTime(), nullable=True),
    Column("reclaim_failures", Integer, nullable=False, default=0),
    Column("reclaim_retry_after", UTCDateTime(), nullable=True),
)

runs = Table(
    "maintd_runs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("table_uri", URI, nullable=False),
    Column("kind", String(16), nullable=False),  # maintenance | reclaim
    Column("status", String(16), nullable=False),
    Column("holder", String(256), nullable=True),
    Column("started_at", UTCDateTime(), nullable=False),
    Column("ended_at", UTCDateTime(), nullable=True),
    Column("plan", JSON, nullable=True),
    Column("metrics", JSON, nullable=True),
    Column("error", Text, nullable=True),
    Index("ix_maintd_runs_table_started", "table_uri", "started_at"),
    Index("ix_maintd_runs_status", "status"),
)

decisions = Table(
    "maintd_decisions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", Integer, ForeignKey("maintd_runs.id", ondelete="CASCADE"), nullable=False, index=True),
    Column("partition", String(1024), nullable=False),
    Column("bucket", Integer, nullable=True),
    Column("action", String(64), nullable=False),
    Column("rule", String(128), nullable=False),
    Column("message", Text, nullable=False),
)

leases = Table(
    "maintd_leases",
    metadata,
    Column("table_uri", URI, primary_key=True),
    Column("holder", String(256), nullable=True),
    Column("acquired_at", UTCDateTime(), nullable=True),
    Column("expires_at", UTCDateTime(), nullable=False),
)
