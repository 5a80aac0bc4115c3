"""The store's reads and writes for keeping targets: the tuning rows and the layout samples.

These functions run inside a transaction the caller (:class:`~maintd.service.store.StateStore`) opened.
Sampling is one ``INSERT ... SELECT`` over the tables that declare targets, keyed by table and sample time,
so replicas sampling the same moment write each row once and a pass costs one statement at any fleet size.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from maintd.service.leases import insert_missing
from maintd.service.records import TuningRecord
from maintd.service.schema import layout_samples, tables, tuning
from maintd.target_names import TARGET_NAMES

_CHUNK = 500


def _record(row: Any) -> TuningRecord:
    def named(prefix: str) -> dict[str, float]:
        return {n: float(v) for n in TARGET_NAMES if (v := row[f"{prefix}_{n}"]) is not None}

    return TuningRecord(
        uri=row["uri"], targets=named("target"), measured=named("measured"), gaps=named("gap"),
        measured_at=row["measured_at"], overrides=row["overrides"], interval_seconds=row["interval_seconds"],
        tuned_at=row["tuned_at"], reason=row["reason"], predicted=row["predicted"],
        tuned_measured=row["tuned_measured"], error=row["error"], error_at=row["error_at"],
    )


def set_targets(conn: Connection, declared: Mapping[str, Mapping[str, float]], undeclared: Iterable[str]) -> None:
    """Record the targets of tables that declare them; forget the rows (and samples) of those that no longer do."""
    if declared:
        insert_missing(conn, tuning, [{"uri": uri} for uri in declared], "uri")
        rows = [{"u": uri, **{f"t_{n}": targets.get(n) for n in TARGET_NAMES}} for uri, targets in declared.items()]
        values: dict[str, Any] = {f"target_{n}": sa.bindparam(f"t_{n}") for n in TARGET_NAMES}
        conn.execute(sa.update(tuning).where(tuning.c.uri == sa.bindparam("u")).values(**values), rows)
    gone = sorted(set(undeclared))
    for start in range(0, len(gone), _CHUNK):
        chunk = gone[start : start + _CHUNK]
        conn.execute(sa.delete(tuning).where(tuning.c.uri.in_(chunk)))
        conn.execute(sa.delete(layout_samples).where(layout_samples.c.table_uri.in_(chunk)))


def tuning_records(conn: Connection, uris: Iterable[str] | None = None) -> dict[str, TuningRecord]:
    """The tuning rows (of ``uris``, or all), by URI."""
    stmt = sa.select(tuning).order_by(tuning.c.uri)
    if uris is not None:
        stmt = stmt.where(tuning.c.uri.in_(sorted(set(uris))))
    return {row["uri"]: _record(row) for row in conn.execute(stmt).mappings()}


def tuned_intervals(conn: Connection) -> dict[str, float]:
    """The check intervals the daemon tuned, by URI: only the rows that have one, two columns each."""
    stmt = sa.select(tuning.c.uri, tuning.c.interval_seconds).where(tuning.c.interval_seconds.is_not(None))
    return {uri: float(seconds) for uri, seconds in conn.execute(stmt)}


def record_tuning(conn: Connection, uri: str, values: Mapping[str, Any]) -> None:
    """Update one table's tuning row (created if missing) with ``values`` (column names)."""
    insert_missing(conn, tuning, [{"uri": uri}], "uri")
    conn.execute(sa.update(tuning).where(tuning.c.uri == uri).values(**values))


def record_measured(conn: Connection, measured: Mapping[str, tuple[Mapping[str, float], Mapping[str, float]]],
                    now: datetime) -> None:
    """Store each table's measured figures and gaps (``uri -> (measured, gaps)``)."""
    rows = [{"u": uri, "at": now, **{f"m_{n}": m.get(n) for n in TARGET_NAMES},
             **{f"g_{n}": g.get(n) for n in TARGET_NAMES}} for uri, (m, g) in measured.items()]
    if not rows:
        return
    values: dict[str, Any] = {"measured_at": sa.bindparam("at")}
    values.update({f"measured_{n}": sa.bindparam(f"m_{n}") for n in TARGET_NAMES})
    values.update({f"gap_{n}": sa.bindparam(f"g_{n}") for n in TARGET_NAMES})
    conn.execute(sa.update(tuning).where(tuning.c.uri == sa.bindparam("u")).values(**values), rows)


def sample_layouts(conn: Connection, at: datetime) -> int:
    """Sample the layout measures of every enabled table with targets at time ``at``; returns rows written.

    The level-0 age is ``at`` minus the commit time of the oldest level-0 file, 0 when the layout has none.
    """
    at_ms = at.astimezone(UTC).timestamp() * 1000.0
    oldest = tables.c.layout_oldest_l0_ms
    age = sa.case((oldest.is_(None), 0.0), else_=(sa.literal(at_ms) - oldest) / 60000.0)
    source = (sa.select(tables.c.uri, sa.literal(at, type_=layout_samples.c.sampled_at.type),
                        tables.c.layout_read_amplification, age)
              .where(tables.c.enabled.is_(True), tables.c.layout.is_not(None),
                     tables.c.uri.in_(sa.select(tuning.c.uri).scalar_subquery())))
    columns = ["table_uri", "sampled_at", "read_amplification", "oldest_l0_age_minutes"]
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects import postgresql

        stmt: Any = postgresql.insert(layout_samples).from_select(columns, source).on_conflict_do_nothing()
    else:
        from sqlalchemy.dialects import sqlite

        stmt = sqlite.insert(layout_samples).from_select(columns, source).on_conflict_do_nothing()
    return len(conn.execute(stmt.returning(layout_samples.c.table_uri)).all())


def samples(conn: Connection, uris: Iterable[str], since: datetime
            ) -> dict[str, list[tuple[datetime, float | None, float | None]]]:
    """The samples of ``uris`` taken at or after ``since``, oldest first: (time, read amplification, age min)."""
    out: dict[str, list[tuple[datetime, float | None, float | None]]] = {}
    wanted = sorted(set(uris))
    for start in range(0, len(wanted), _CHUNK):
        stmt = (sa.select(layout_samples)
                .where(layout_samples.c.table_uri.in_(wanted[start : start + _CHUNK]),
                       layout_samples.c.sampled_at >= since)
                .order_by(layout_samples.c.table_uri, layout_samples.c.sampled_at))
        for row in conn.execute(stmt).mappings():
            out.setdefault(row["table_uri"], []).append(
                (row["sampled_at"], row["read_amplification"], row["oldest_l0_age_minutes"]))
    return out


def prune_samples(conn: Connection, older_than: datetime) -> int:
    """Delete samples taken before ``older_than``; returns how many."""
    return int(conn.execute(sa.delete(layout_samples).where(layout_samples.c.sampled_at < older_than)).rowcount)


def missing_counts(conn: Connection) -> dict[str, int]:
    """Tables missing each target (gap above zero), counted by the database, every target named."""
    counts = [sa.func.count(tuning.c[f"gap_{n}"]).filter(tuning.c[f"gap_{n}"] > 1e-9) for n in TARGET_NAMES]
    row = conn.execute(sa.select(*counts)).one()
    return {n: int(c or 0) for n, c in zip(TARGET_NAMES, row, strict=True)}


__all__ = ["missing_counts", "prune_samples", "record_measured", "record_tuning", "sample_layouts", "samples",
           "set_targets", "tuned_intervals", "tuning_records"]
