"""Table leases: a table is maintained by one daemon at a time.

A lease row per table says who holds it and until when. A daemon takes the leases of due tables,
renews them while it works, and releases them when done; if it dies, its leases expire and another
replica takes the tables over. This is APScheduler 4's ``acquire_schedules`` pattern: on PostgreSQL
the candidate rows are selected ``FOR UPDATE SKIP LOCKED``, so concurrent replicas never wait on each
other and never both see a row as free; on SQLite the transaction holds the database write lock.

Clock skew: expiry is written and compared with the *database* clock (``now()`` in PostgreSQL), never
with a replica's clock, so replicas whose clocks disagree still agree on expiry. A holder must stop
committing for a table once its own lease may have expired. It decides that with its monotonic clock::

    started = time.monotonic()          # read *before* the call
    held = store.acquire_leases(me, due, duration, limit)
    deadline = started + duration       # never later than the expiry the database wrote

Because the database read its clock after ``started``, ``deadline`` is at or before the real expiry,
whatever the wall clocks say.

These functions run inside a transaction the caller (:class:`~maintd.service.store.StateStore`) opened.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from maintd.service.records import LeaseRecord, RunStatus
from maintd.service.schema import leases, runs

#: An expiry long past: a lease row that nobody holds.
_NEVER = datetime(1970, 1, 1, tzinfo=UTC)
#: Rows per statement, far below SQLite's bound-parameter limit.
_CHUNK = 500


def db_now(conn: Connection) -> datetime:
    """The database clock (aware UTC). In PostgreSQL this is the transaction start time."""
    if conn.dialect.name == "sqlite":
        text = conn.execute(sa.text("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')")).scalar_one()
        return datetime.fromisoformat(text).replace(tzinfo=UTC)
    value = conn.execute(sa.select(sa.func.now())).scalar_one()
    assert isinstance(value, datetime)
    return value.astimezone(UTC)


def insert_missing(conn: Connection, table: sa.Table, rows: Sequence[dict[str, Any]], key: str) -> int:
    """Insert the rows whose ``key`` is not present yet (concurrently safe); returns how many were new."""
    inserted = 0
    for start in range(0, len(rows), _CHUNK):
        chunk = rows[start : start + _CHUNK]
        # Each dialect's module is imported by the stores that use it, when they insert: SQLAlchemy's
        # PostgreSQL dialect is a tenth of the start-up time of `maintd status` on an SQLite store.
        if conn.dialect.name == "postgresql":
            from sqlalchemy.dialects import postgresql

            stmt: Any = postgresql.insert(table).on_conflict_do_nothing(index_elements=[key])
        else:
            from sqlalchemy.dialects import sqlite

            stmt = sqlite.insert(table).on_conflict_do_nothing(index_elements=[key])
        result = conn.execute(stmt.returning(table.c[key]), list(chunk))
        inserted += len(result.all())
    return inserted


def ensure_rows(conn: Connection, table_uris: Sequence[str]) -> None:
    """Create a free lease row for every table that has none, so it can be locked."""
    insert_missing(
        conn, leases, [{"table_uri": uri, "holder": None, "expires_at": _NEVER} for uri in table_uris], "table_uri"
    )


def acquire(
    conn: Connection, holder: str, candidates: Sequence[str], duration: timedelta, limit: int, now: datetime | None
) -> list[str]:
    """Take up to ``limit`` leases among ``candidates`` (whose rows exist) for ``holder``.

    Leases ``holder`` already holds come first and are extended; then free or expired ones, longest
    expired first (so that tables are shared fairly between replicas). Rows another transaction has
    locked are skipped, not waited for. Runs left ``running`` by a previous holder of a table taken
    over are marked abandoned. Returns the URIs held after the call, sorted.
    """
    now = now or db_now(conn)
    mine: list[str] = []
    taken: list[str] = []
    for start in range(0, len(candidates), _CHUNK):
        remaining = limit - len(mine) - len(taken)
        if remaining <= 0:
            break
        chunk = candidates[start : start + _CHUNK]
        stmt = (
            sa.select(leases.c.table_uri, leases.c.holder)
            .where(
                leases.c.table_uri.in_(chunk),
                sa.or_(leases.c.holder == holder, leases.c.holder.is_(None), leases.c.expires_at <= now),
            )
            .order_by(sa.case((leases.c.holder == holder, 0), else_=1), leases.c.expires_at, leases.c.table_uri)
            .limit(remaining)
            .with_for_update(skip_locked=True)
        )
        for row in conn.execute(stmt):
            (mine if row.holder == holder else taken).append(row.table_uri)
    expires = now + duration
    if mine:
        conn.execute(sa.update(leases).where(leases.c.table_uri.in_(mine)).values(expires_at=expires))
    if taken:
        conn.execute(
            sa.update(leases)
            .where(leases.c.table_uri.in_(taken))
            .values(holder=holder, acquired_at=now, expires_at=expires)
        )
        conn.execute(
            sa.update(runs)
            .where(
                runs.c.table_uri.in_(taken),
                runs.c.status == RunStatus.RUNNING.value,
                sa.or_(runs.c.holder.is_(None), runs.c.holder != holder),
            )
            .values(
                status=RunStatus.ABANDONED.value,
                ended_at=now,
                error=f"lease expired; the table was taken over by {holder}",
            )
        )
    return sorted(mine + taken)


def renew(
    conn: Connection, holder: str, duration: timedelta, table_uris: Iterable[str] | None, now: datetime | None
) -> list[str]:
    """Extend the unexpired leases of ``holder``; an expired lease is not revived (another may hold it)."""
    now = now or db_now(conn)
    stmt = sa.update(leases).where(leases.c.holder == holder, leases.c.expires_at > now)
    if table_uris is not None:
        stmt = stmt.where(leases.c.table_uri.in_(list(table_uris)))
    result = conn.execute(stmt.values(expires_at=now + duration).returning(leases.c.table_uri))
    return sorted(result.scalars())


def release(conn: Connection, holder: str, table_uris: Iterable[str] | None) -> int:
    """Free the leases of ``holder`` (all, or those given) at once.

    The expiry becomes the release time, not the distant past: :func:`acquire` prefers the longest
    free tables, so a table just maintained goes to the back of the queue and every table gets its turn.
    """
    stmt = sa.update(leases).where(leases.c.holder == holder)
    if table_uris is not None:
        stmt = stmt.where(leases.c.table_uri.in_(list(table_uris)))
    return int(conn.execute(stmt.values(holder=None, acquired_at=None, expires_at=db_now(conn))).rowcount)


def list_leases(conn: Connection, live_only: bool, now: datetime | None) -> list[LeaseRecord]:
    """Every lease row, or only the held, unexpired ones."""
    stmt = sa.select(leases).order_by(leases.c.table_uri)
    if live_only:
        now = now or db_now(conn)
        stmt = stmt.where(leases.c.holder.is_not(None), leases.c.expires_at > now)
    return [LeaseRecord(**row) for row in conn.execute(stmt).mappings()]


def abandon_runs_of(conn: Connection, *, holder: str, reason: str, now: datetime) -> int:
    """Mark the running runs of ``holder`` abandoned."""
    stmt = (
        sa.update(runs)
        .where(runs.c.holder == holder, runs.c.status == RunStatus.RUNNING.value)
        .values(status=RunStatus.ABANDONED.value, ended_at=now, error=reason)
    )
    return int(conn.execute(stmt).rowcount)
