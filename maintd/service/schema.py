"""The tables of the state store, shared by SQLite and PostgreSQL.

Changing a table here needs a migration in :mod:`maintd.service.migrations` (``versions/``); a test
compares the schema the migrations build with this one on both backends.

Times are stored in UTC. SQLite has no time zones, so :class:`UTCDateTime` stores naive UTC there and
turns every value read back into an aware UTC ``datetime``; comparisons in SQL then work alike on both
backends (SQLite compares the fixed-width ISO strings SQLAlchemy writes).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
)

from maintd.target_names import TARGET_NAMES

metadata = MetaData()

#: The layout measures kept in columns of their own beside the layout (``layout_<name>``): the fleet-wide
#: histograms read them for every table at each scrape, and extracting them from the JSON layout of 10,000
#: tables cost tens of milliseconds a scrape on PostgreSQL.
LAYOUT_MEASURES = ("read_amplification", "oldest_l0_ms", "history_bytes", "pinned_bytes")


def layout_measure_values(layout: Any) -> dict[str, float | None]:
    """The ``layout_<name>`` column values of a layout (None where it has no number for a measure)."""
    values: dict[str, float | None] = {}
    for name in LAYOUT_MEASURES:
        raw = layout.get(name) if isinstance(layout, dict) else None
        values[f"layout_{name}"] = float(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) else None
    return values



class UTCDateTime(TypeDecorator[datetime]):
    """An aware UTC ``datetime`` on every backend."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r} given to the state store; pass an aware UTC datetime")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if isinstance(value, str):  # a value computed by SQLite itself, e.g. strftime('now')
            value = datetime.fromisoformat(value)
        assert isinstance(value, datetime)
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


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
    # The one source of the table gauges of every replica (see maintd.service.store_metrics): the layout
    # the last maintenance run read, and when each kind of run last succeeded (kept when runs are pruned).
    Column("layout", JSON, nullable=True),
    Column("layout_at", UTCDateTime(), nullable=True),
    *(Column(f"layout_{name}", Float, nullable=True) for name in LAYOUT_MEASURES),
    Column("maintenance_succeeded_at", UTCDateTime(), nullable=True),
    Column("reclaim_succeeded_at", UTCDateTime(), nullable=True),
    # Checks, counted in memory by the replica that owns the table and written here once per pass: a check
    # that finds the table unchanged writes no run (see maintd.service.checks).
    Column("checked_at", UTCDateTime(), nullable=True),
    Column("checked_by", String(256), nullable=True),
    Column("checks", BigInteger, nullable=False, default=0, server_default="0"),
    Column("checks_planned", BigInteger, nullable=False, default=0, server_default="0"),
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

roots = Table(
    "maintd_roots",
    metadata,
    # The last search of each warehouse root for tables: a root that cannot be searched (a missing bucket,
    # refused credentials, an unreachable endpoint) is shown as failing by every replica and `maintd status`.
    Column("uri", URI, primary_key=True),
    Column("checked_at", UTCDateTime(), nullable=False),
    Column("holder", String(256), nullable=True),
    Column("tables", Integer, nullable=False, default=0),
    Column("error", Text, nullable=True),
    Column("error_type", String(128), nullable=True),
    Column("failures", Integer, nullable=False, default=0),
    Column("succeeded_at", UTCDateTime(), nullable=True),
)

commit_records = Table(
    "maintd_commit_records",
    metadata,
    # Commits of tables whose store has no conditional put (storage option commit_lock: state_store): the unique
    # key decides which writer has a version; the file follows (maintd.service.commit_lock).
    Column("key", String(64), primary_key=True),  # SHA-256 of the commit file's URI
    Column("name", Text, nullable=False),
    Column("data", LargeBinary, nullable=True),  # the commit's bytes until its file holds them
    Column("complete", Boolean, nullable=False, default=False),
    Column("created_at", UTCDateTime(), nullable=False),
)

replicas = Table(
    "maintd_replicas",
    metadata,
    # One row per daemon, its seen_at renewed with its leases: the live replicas split the tables between
    # them (maintd.service.replicas); a row not renewed for most of a lease period is a replica gone.
    Column("holder", String(256), primary_key=True),
    Column("started_at", UTCDateTime(), nullable=False),
    Column("seen_at", UTCDateTime(), nullable=False),
)

layout_samples = Table(
    "maintd_layout_samples",
    metadata,
    # The layout measures of each table that declares targets, sampled at regular times (one row per table and
    # sample time, whichever replica took it): the measured p95 figures are taken over them
    # (maintd.service.measures). Only tables with targets are sampled, and samples older than the window go.
    Column("table_uri", URI, primary_key=True),
    Column("sampled_at", UTCDateTime(), primary_key=True),
    Column("read_amplification", Float, nullable=True),
    Column("oldest_l0_age_minutes", Float, nullable=True),
    Index("ix_maintd_layout_samples_at", "sampled_at"),
)

tuning = Table(
    "maintd_tuning",
    metadata,
    # One row per table that declares targets: its targets, the figures measured against them and the gaps (in
    # columns, so /metrics counts the tables missing each target in SQL), and the knobs the daemon applied at
    # its last re-tune, with when and why (maintd.service.tuning).
    Column("uri", URI, primary_key=True),
    *(Column(f"target_{name}", Float, nullable=True) for name in TARGET_NAMES),
    *(Column(f"measured_{name}", Float, nullable=True) for name in TARGET_NAMES),
    *(Column(f"gap_{name}", Float, nullable=True) for name in TARGET_NAMES),
    Column("measured_at", UTCDateTime(), nullable=True),
    Column("overrides", JSON, nullable=True),
    Column("interval_seconds", Float, nullable=True),
    Column("tuned_at", UTCDateTime(), nullable=True),
    Column("reason", Text, nullable=True),
    Column("predicted", JSON, nullable=True),
    Column("tuned_measured", JSON, nullable=True),
    Column("error", Text, nullable=True),
    Column("error_at", UTCDateTime(), nullable=True),
)
