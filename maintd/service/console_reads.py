"""The store's reads for the web console (:mod:`maintd.service.console`): one page of the fleet, filtered,
sorted and counted by the database, so that a page costs about the same for 100 or 10,000 tables.

These functions run inside a transaction the caller (:class:`~maintd.service.store.StateStore`) opened.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from maintd.service import leases as _leases
from maintd.service.records import TableRecord
from maintd.service.schema import leases, replicas, tables, tuning
from maintd.target_names import TARGET_NAMES

#: The orders of the fleet page; ``health`` (the unhealthiest first) is the default.
FleetSort = Literal["health", "name", "last_run", "failures", "checked", "backlog", "files", "read_amplification",
                    "l0_age", "history"]
FLEET_SORTS: tuple[str, ...] = ("health", "name", "last_run", "failures", "checked", "backlog", "files",
                                "read_amplification", "l0_age", "history")
#: Orders by a measure of the stored layout: the key in the layout, and whether its largest value comes first.
_LAYOUT_SORTS = {"backlog": ("backlog_bytes", True), "files": ("files", True),
                 "read_amplification": ("read_amplification", True), "l0_age": ("oldest_l0_ms", False),
                 "history": ("history_bytes", True)}
#: The states a fleet page can be filtered by (those of ``maintd_tables``).
FLEET_STATES: tuple[str, ...] = ("healthy", "failing", "disabled")


@dataclass(frozen=True, slots=True)
class FleetQuery:
    """What one fleet page shows: a filter, an order and a page (``page`` counts from 1)."""

    text: str = ""
    """Only tables whose name or URI holds this text (case-insensitive); empty: every table."""
    state: str | None = None
    """Only tables in this state (``healthy``, ``failing``, ``disabled``); None: every state."""
    sort: FleetSort = "health"
    descending: bool = False
    """Reverse the order (for ``health``: the healthiest first)."""
    page: int = 1
    per_page: int = 50


@dataclass(frozen=True, slots=True)
class FleetPage:
    """One page of the fleet: its tables, how many match the query, and who holds each table's lease."""

    tables: list[TableRecord]
    matching: int
    holders: dict[str, str]
    """Table URI to the replica holding its lease (unexpired leases only)."""
    now: datetime
    """The database clock when the page was read."""
    missed: dict[str, list[str]] = field(default_factory=dict)
    """Table URI to the targets it misses (gap above zero, largest first), for the page's tables that declare
    targets; a table that declares none is absent."""


@dataclass(frozen=True, slots=True)
class ReplicaRecord:
    """A daemon sharing the tables, and when it was last seen (database clock)."""

    holder: str
    started_at: datetime
    seen_at: datetime


def fleet_page(conn: Connection, query: FleetQuery) -> FleetPage:
    """The tables of ``query``'s page, the count of tables matching it, and their lease holders."""
    now = _leases.db_now(conn)
    where = _fleet_filter(query)
    matching = int(conn.execute(sa.select(sa.func.count()).select_from(tables).where(*where)).scalar_one())
    stmt = (sa.select(tables).where(*where).order_by(*_fleet_order(query))
            .limit(query.per_page).offset((max(1, query.page) - 1) * query.per_page))
    found = [TableRecord(**row) for row in conn.execute(stmt).mappings()]
    holders: dict[str, str] = {}
    if found:
        held = sa.select(leases.c.table_uri, leases.c.holder).where(
            leases.c.table_uri.in_([t.uri for t in found]), leases.c.holder.is_not(None), leases.c.expires_at > now)
        holders = {uri: holder for uri, holder in conn.execute(held)}
    return FleetPage(found, matching, holders, now, _missed(conn, [t.uri for t in found]))


def _missed(conn: Connection, uris: list[str]) -> dict[str, list[str]]:
    """The targets each of ``uris`` misses, from their tuning rows: one query for the page, its rows only."""
    if not uris:
        return {}
    gaps = [tuning.c[f"gap_{n}"] for n in TARGET_NAMES]
    out: dict[str, list[str]] = {}
    for uri, *values in conn.execute(sa.select(tuning.c.uri, *gaps).where(tuning.c.uri.in_(uris))):
        missed = [(g, n) for n, g in zip(TARGET_NAMES, values, strict=True) if g is not None and g > 1e-9]
        out[uri] = [str(n) for _, n in sorted(missed, key=lambda gn: -gn[0])]
    return out


def list_replicas(conn: Connection) -> list[ReplicaRecord]:
    """Every replica row (the live and those gone less than ten lease periods ago), by holder."""
    rows = conn.execute(sa.select(replicas).order_by(replicas.c.holder)).mappings()
    return [ReplicaRecord(**row) for row in rows]


def _failures() -> sa.ColumnElement[int]:
    return tables.c.maintenance_failures + tables.c.reclaim_failures


def _fleet_filter(query: FleetQuery) -> list[sa.ColumnElement[bool]]:
    where: list[sa.ColumnElement[bool]] = []
    text = query.text.strip().lower()
    if text:
        pattern = "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        where.append(sa.or_(sa.func.lower(tables.c.name).like(pattern, escape="\\"),
                            sa.func.lower(tables.c.uri).like(pattern, escape="\\")))
    if query.state == "disabled":
        where.append(tables.c.enabled.is_(False))
    elif query.state == "failing":
        where.extend([tables.c.enabled.is_(True), _failures() > 0])
    elif query.state == "healthy":
        where.extend([tables.c.enabled.is_(True), _failures() == 0])
    return where


def _fleet_order(query: FleetQuery) -> list[sa.ColumnElement[Any]]:
    def way(column: sa.ColumnElement[Any], *, reverse: bool = False) -> sa.ColumnElement[Any]:
        return column.desc() if query.descending != reverse else column.asc()

    if query.sort in _LAYOUT_SORTS:  # extracted from the layout by the database; tables without one last
        key, largest_first = _LAYOUT_SORTS[query.sort]
        value = tables.c.layout[key].as_float()
        keys = [sa.case((value.is_(None), 1), else_=0), way(value, reverse=largest_first)]
    elif query.sort == "name":
        keys = [way(tables.c.name)]
    elif query.sort == "last_run":  # the newest first; never-run tables last
        keys = [sa.case((tables.c.last_run_at.is_(None), 1), else_=0), way(tables.c.last_run_at, reverse=True)]
    elif query.sort == "failures":
        keys = [way(_failures(), reverse=True)]
    elif query.sort == "checked":  # the longest unchecked first
        keys = [sa.case((tables.c.checked_at.is_(None), 0), else_=1), way(tables.c.checked_at)]
    else:  # failing first (most failures in a row), then the longest without a success, disabled last
        disabled = sa.case((tables.c.enabled.is_(False), 1), else_=0)
        never = sa.case((tables.c.maintenance_succeeded_at.is_(None), 0), else_=1)
        keys = [way(disabled), way(_failures(), reverse=True), way(never), way(tables.c.maintenance_succeeded_at)]
    return [*keys, tables.c.uri.asc()]


__all__ = ["FLEET_SORTS", "FLEET_STATES", "FleetPage", "FleetQuery", "FleetSort", "ReplicaRecord", "fleet_page",
           "list_replicas"]
