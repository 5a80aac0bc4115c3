"""The store's reads for ``/metrics``, counted and ordered by the database so that a scrape costs the same for
10 or 10,000 tables (:mod:`maintd.service.store_metrics` serves them).

These functions run inside a transaction the caller (:class:`~maintd.service.store.StateStore`) opened.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from maintd.service import leases as _leases
from maintd.service import tuning_store as _tuning
from maintd.service.records import RootRecord, TableRecord, TuningRecord
from maintd.service.schema import LAYOUT_MEASURES, leases, roots, tables


@dataclass(frozen=True, slots=True)
class GaugeReads:
    """What one scrape reads from the store."""

    table_counts: dict[str, int]
    lease_counts: dict[str, int]
    roots: list[RootRecord]
    tables: list[TableRecord]
    """The enabled tables whose per-table gauges are served."""
    measures: list[tuple[float | None, ...]] = field(default_factory=list)
    """Every enabled table's :data:`MEASURES` (None where its layout lacks one): the fleet-wide histograms."""
    tuning: dict[str, TuningRecord] = field(default_factory=dict)
    """The targets, measured figures and gaps of the served tables that declare targets."""
    missing_targets: dict[str, int] = field(default_factory=dict)
    """Tables missing each target, by target name (every table with targets counted)."""


#: The layout measures of every enabled table read at each scrape for the fleet-wide histograms.
MEASURES = LAYOUT_MEASURES


def layout_measures(conn: Connection) -> list[tuple[float | None, ...]]:
    """:data:`MEASURES` of every enabled table, from the columns that keep them beside the layout (four
    numbers a table; no JSON is parsed)."""
    columns = [tables.c[f"layout_{name}"] for name in MEASURES]
    stmt = sa.select(*columns).where(tables.c.enabled.is_(True), tables.c.layout.is_not(None))
    return [tuple(row) for row in conn.execute(stmt)]


def table_counts(conn: Connection) -> dict[str, int]:
    """Registered tables by state: ``healthy``, ``failing`` (failures in a row), ``disabled``."""
    failing = (tables.c.maintenance_failures + tables.c.reclaim_failures) > 0
    state = sa.case((tables.c.enabled.is_(False), "disabled"), (failing, "failing"), else_="healthy")
    stmt = sa.select(state, sa.func.count()).group_by(state)
    return {str(name): int(count) for name, count in conn.execute(stmt)}


def lease_counts(conn: Connection, now: datetime | None) -> dict[str, int]:
    """Unexpired leases by holder."""
    now = now or _leases.db_now(conn)
    stmt = (sa.select(leases.c.holder, sa.func.count())
            .where(leases.c.holder.is_not(None), leases.c.expires_at > now).group_by(leases.c.holder))
    return {str(holder): int(count) for holder, count in conn.execute(stmt)}


def unhealthiest(conn: Connection, limit: int) -> list[TableRecord]:
    """Up to ``limit`` enabled tables: most failures in a row first, then the longest without a successful
    maintenance (never first), then by URI."""
    failures = tables.c.maintenance_failures + tables.c.reclaim_failures
    never = sa.case((tables.c.maintenance_succeeded_at.is_(None), 0), else_=1)
    stmt = (sa.select(tables).where(tables.c.enabled.is_(True))
            .order_by(failures.desc(), never, tables.c.maintenance_succeeded_at, tables.c.uri).limit(limit))
    return [TableRecord(**row) for row in conn.execute(stmt).mappings()]


def gauge_reads(conn: Connection, max_tables: int | None, limit: int) -> GaugeReads:
    """Counts, leases, roots, and the tables whose gauges are served (see ``StateStore.gauge_reads``)."""
    counts = table_counts(conn)
    enabled = counts.get("healthy", 0) + counts.get("failing", 0)
    if max_tables is None or enabled <= max_tables:
        stmt = sa.select(tables).where(tables.c.enabled.is_(True)).order_by(tables.c.uri)
        served = [TableRecord(**row) for row in conn.execute(stmt).mappings()]
    else:
        served = unhealthiest(conn, limit) if limit else []
    found = [RootRecord(**row) for row in conn.execute(sa.select(roots).order_by(roots.c.uri)).mappings()]
    targets = _tuning.tuning_records(conn, [t.uri for t in served]) if served else {}
    return GaugeReads(counts, lease_counts(conn, None), found, served, layout_measures(conn), targets,
                      _tuning.missing_counts(conn))


__all__ = ["MEASURES", "GaugeReads", "gauge_reads", "layout_measures", "lease_counts", "table_counts", "unhealthiest"]
