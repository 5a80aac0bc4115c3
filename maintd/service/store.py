"""The daemon's state store: registered tables, runs, per-bucket decisions and leases.

One SQLAlchemy 2 Core implementation serves SQLite (a local file, the default) and PostgreSQL (production,
shared by every replica). Every method is one short transaction, so the daemon, ``maintd status`` and
``maintd history`` can use the store at the same time.

Time: methods that record or compare times take ``now`` (an aware datetime); when it is omitted the
*database* clock is read in the same transaction. Leases always compare against the database clock by
default, so replicas whose clocks disagree still agree on when a lease has expired (see
:mod:`maintd.service.leases`).

Concurrency: PostgreSQL locks lease rows with ``FOR UPDATE SKIP LOCKED``. SQLite has no row locks, so
every transaction starts with ``BEGIN IMMEDIATE`` (one writer at a time, others wait up to the busy
timeout), which makes each read-check-write atomic across processes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError

from maintd.errors import StateStoreError
from maintd.service import aggregates as _aggregates
from maintd.service import console_reads as _console
from maintd.service import leases as _leases
from maintd.service import migrations
from maintd.service import tuning_store as _tuning
from maintd.service.records import (
    CheckRecord,
    Decision,
    DecisionRecord,
    LeaseRecord,
    RootRecord,
    RunKind,
    RunRecord,
    RunStatus,
    TableRecord,
    TuningRecord,
)
from maintd.service.schema import (
    LAYOUT_MEASURES,
    decisions,
    layout_measure_values,
    metadata,
    replicas,
    roots,
    runs,
    tables,
)
from maintd.service.store_engine import make_engine
from maintd.settings import redact_secrets, redact_url

if TYPE_CHECKING:
    from maintd.settings import Settings

#: The PostgreSQL advisory lock that serialises schema changes of replicas starting together.
_SCHEMA_LOCK = 7041963


class StateStore:
    """Registered tables, runs, decisions and leases in SQLite or PostgreSQL.

    Args:
        url: SQLAlchemy URL (``sqlite:///path/maintd.db``, ``postgresql+psycopg://user:pass@host/db``).
        db_schema: PostgreSQL schema holding the tables (created if missing); ignored on SQLite.
        connect_timeout: seconds to wait for a connection (PostgreSQL) or the write lock (SQLite).
        create: create or upgrade the schema on open (:meth:`upgrade_schema`); when false nothing is read
            until the first call (see :meth:`check_schema`).

    Raises:
        StateStoreError: the URL is invalid or the database cannot be reached.
    """

    def __init__(
        self, url: str, *, db_schema: str | None = None, connect_timeout: float = 10.0, create: bool = True
    ) -> None:
        self._display_url = redact_url(url)
        self.engine = make_engine(url, db_schema, connect_timeout)
        self.db_schema = db_schema if self.dialect == "postgresql" else None
        if create:
            self.upgrade_schema()

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self.engine.dialect.name

    def __repr__(self) -> str:
        return f"StateStore({self._display_url!r})"

    def close(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()

    def upgrade_schema(self) -> tuple[str | None, str]:
        """Create the schema, or upgrade it to this maintd's revision (safe from several replicas at once).

        Returns:
            The revision found (None: an empty store, or maintd 0.1.0's) and the revision now recorded.

        Raises:
            StateStoreError: the store cannot be reached, or a newer maintd migrated it.
        """
        with self._schema_transaction("upgrade the schema") as conn:
            return migrations.upgrade(conn, metadata, self._display_url)

    def create_schema(self) -> None:
        """Create the schema and tables, or upgrade them (the same as :meth:`upgrade_schema`)."""
        self.upgrade_schema()

    def check_schema(self) -> None:
        """Raise :class:`StateStoreError` unless the schema is this maintd's (for commands that only read)."""
        with self._schema_transaction("read the schema revision", create=False) as conn:
            migrations.check(conn, self._display_url)

    def schema_revision(self) -> str | None:
        """The schema revision recorded in the store (None: none)."""
        with self._schema_transaction("read the schema revision", create=False) as conn:
            return migrations.current(conn)

    def drop_schema(self) -> None:
        """Drop every table of the store (and its PostgreSQL schema, if one was given). For tests and purges."""
        with self._transaction("drop the schema") as conn:
            if self.db_schema is not None:
                conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{self.db_schema}" CASCADE'))
            else:
                metadata.drop_all(conn, checkfirst=True)
                conn.execute(sa.text(f"DROP TABLE IF EXISTS {migrations.VERSION_TABLE}"))

    @contextmanager
    def _schema_transaction(self, what: str, *, create: bool = True) -> Iterator[Connection]:
        """A transaction under the schema lock, unqualified names resolving in ``db_schema`` (PostgreSQL)."""
        with self._transaction(what) as conn:
            if self.dialect == "postgresql":
                # Serialise replicas starting together: CREATE ... IF NOT EXISTS is not race-free in PostgreSQL.
                conn.execute(sa.text(f"SELECT pg_advisory_xact_lock({_SCHEMA_LOCK})"))
                if self.db_schema is not None:
                    if create:
                        conn.execute(sa.text(f'CREATE SCHEMA IF NOT EXISTS "{self.db_schema}"'))
                    conn.execute(sa.text(f'SET LOCAL search_path TO "{self.db_schema}"'))
            yield conn

    def ping(self) -> None:
        """Raise :class:`StateStoreError` unless the store answers (the ``/readyz`` check)."""
        with self._transaction("ping") as conn:
            conn.execute(sa.text("SELECT 1"))

    def db_now(self) -> datetime:
        """The database clock, as an aware UTC datetime."""
        with self._transaction("read the clock") as conn:
            return _leases.db_now(conn)

    # -- tables -----------------------------------------------------------------------------------------

    def register_table(
        self, uri: str, *, name: str | None = None, source: str = "explicit", now: datetime | None = None
    ) -> TableRecord:
        """Register ``uri`` (idempotent: an existing registration is kept as it is) and return it."""
        self.register_tables([uri], source=source, now=now, names={uri: name} if name else None)
        record = self.get_table(uri)
        assert record is not None
        return record

    def register_tables(
        self,
        uris: Iterable[str],
        *,
        source: str = "explicit",
        now: datetime | None = None,
        names: Mapping[str, str] | None = None,
    ) -> int:
        """Register every URI not registered yet; returns how many were new."""
        wanted = sorted(set(uris))
        with self._transaction("register tables") as conn:
            now = now or _leases.db_now(conn)
            rows = [
                {
                    "uri": uri,
                    "name": (names or {}).get(uri) or _table_name(uri),
                    "source": source,
                    "registered_at": now,
                    "enabled": True,
                    "maintenance_failures": 0,
                    "reclaim_failures": 0,
                }
                for uri in wanted
            ]
            return _leases.insert_missing(conn, tables, rows, "uri")

    def set_enabled(self, uri: str, enabled: bool) -> None:
        """Enable or disable maintenance of a registered table."""
        with self._transaction("enable or disable a table") as conn:
            result = conn.execute(sa.update(tables).where(tables.c.uri == uri).values(enabled=enabled))
            if result.rowcount == 0:
                raise StateStoreError(f"table {uri} is not registered; register it first")

    def unregister_table(self, uri: str) -> None:
        """Forget a table (its runs stay in the history)."""
        with self._transaction("unregister a table") as conn:
            conn.execute(sa.delete(tables).where(tables.c.uri == uri))

    def get_table(self, uri: str) -> TableRecord | None:
        """The registration of ``uri``, or None."""
        with self._transaction("read a table") as conn:
            row = conn.execute(sa.select(tables).where(tables.c.uri == uri)).mappings().first()
        return None if row is None else TableRecord(**row)

    def list_tables(self, *, enabled_only: bool = False) -> list[TableRecord]:
        """Every registered table, by URI."""
        stmt = sa.select(tables).order_by(tables.c.uri)
        if enabled_only:
            stmt = stmt.where(tables.c.enabled.is_(True))
        with self._transaction("list tables") as conn:
            return [TableRecord(**row) for row in conn.execute(stmt).mappings()]

    def due_tables(
        self, candidates: Iterable[str], kind: RunKind | str | None = None, *, now: datetime | None = None
    ) -> list[str]:
        """The candidates not disabled and not waiting for a retry of ``kind`` after failures of that kind
        (of either kind when ``kind`` is None). Unregistered candidates are due."""
        wanted = set(candidates)
        kinds = list(RunKind) if kind is None else [RunKind(kind)]
        with self._transaction("find due tables") as conn:
            now = now or _leases.db_now(conn)
            backing_off = [tables.c[f"{k.value}_retry_after"] > now for k in kinds]
            blocked = conn.execute(
                sa.select(tables.c.uri).where(sa.or_(tables.c.enabled.is_(False), *backing_off))
            ).scalars()
            return sorted(wanted - set(blocked))

    def schedule(self, kind: RunKind | str) -> tuple[datetime, dict[str, datetime | None]]:
        """The database clock and, for every enabled table, when runs of ``kind`` may be retried (None: now).

        What a pass reads once: two columns of every enabled table, so that a pass over 10,000 tables costs
        one light query.
        """
        column = tables.c[f"{RunKind(kind).value}_retry_after"]
        stmt = sa.select(tables.c.uri, column).where(tables.c.enabled.is_(True))
        with self._transaction("read the schedule") as conn:
            now = _leases.db_now(conn)
            return now, {uri: retry for uri, retry in conn.execute(stmt)}

    def health_measures(self, uris: Iterable[str]) -> dict[str, dict[str, float | None]]:
        """The measures a table's health is scored by (read amplification, oldest level-0 file, backlog bytes),
        as its layout last recorded them, for the tables ``uris`` (a queue's: a few, not the fleet)."""
        wanted = sorted(set(uris))
        if not wanted:
            return {}
        backlog = tables.c.layout["backlog_bytes"].as_float()
        stmt = sa.select(tables.c.uri, tables.c.layout_read_amplification, tables.c.layout_oldest_l0_ms,
                         backlog).where(tables.c.uri.in_(sa.bindparam("uris", expanding=True)))
        with self._transaction("read the health of queued tables") as conn:
            rows = conn.execute(stmt, {"uris": wanted})
            return {uri: {"read_amplification": amp, "oldest_l0_ms": oldest, "backlog_bytes": back}
                    for uri, amp, oldest, back in rows}

    def record_checks(self, holder: str, checks: Iterable[CheckRecord]) -> int:
        """Add checks onto their tables' rows, in place (no row is added); returns how many tables.

        A check whose last outcome found nothing to do counts as the table's last success of its kind and
        clears that kind's failures and backoff, and its last status becomes ``skipped``, as a run that found
        nothing did; its layout, if given, replaces the stored one.
        """
        shapes: dict[tuple[RunKind, bool, bool], list[dict[str, Any]]] = {}
        for c in checks:
            key = (c.kind, c.found_nothing, c.layout is not None)
            row = {"u": c.uri, "t": c.checked_at, "h": holder, "n": c.checks, "p": c.planned}
            if c.layout is not None:
                row["l"] = c.layout
                row.update(layout_measure_values(c.layout))
            shapes.setdefault(key, []).append(row)
        if not shapes:
            return 0
        with self._transaction("record checks") as conn:
            for (kind, nothing, with_layout), rows in shapes.items():
                values: dict[str, Any] = {"checked_at": sa.bindparam("t"), "checked_by": sa.bindparam("h"),
                                          "checks": tables.c.checks + sa.bindparam("n"),
                                          "checks_planned": tables.c.checks_planned + sa.bindparam("p")}
                if kind is not RunKind.MAINTENANCE:
                    values = {}  # only maintenance is checked: reclamation passes count no checks
                if nothing:  # what a run that found nothing used to record on the table
                    values.update({f"{kind.value}_succeeded_at": sa.bindparam("t"), f"{kind.value}_failures": 0,
                                   f"{kind.value}_retry_after": None, "last_status": RunStatus.SKIPPED.value,
                                   "last_run_at": sa.bindparam("t"), "last_error": None})
                if with_layout:
                    values.update(layout=sa.bindparam("l", type_=tables.c.layout.type), layout_at=sa.bindparam("t"))
                    values.update({f"layout_{m}": sa.bindparam(f"layout_{m}") for m in LAYOUT_MEASURES})
                if values:
                    stmt = sa.update(tables).where(tables.c.uri == sa.bindparam("u")).values(**values)
                    conn.execute(stmt, rows)
        return sum(len(rows) for rows in shapes.values())

    # -- runs -------------------------------------------------------------------------------------------

    def start_run(
        self,
        table_uri: str,
        kind: RunKind | str,
        *,
        holder: str | None = None,
        plan: Any = None,
        now: datetime | None = None,
        seconds_ago: float = 0.0,
    ) -> int:
        """Record the start of a run (registering the table if needed) and return its id.

        ``seconds_ago`` dates the start back from the database clock: a run is recorded only once it has
        something to show (it planned work, failed, or was refused), not when its look at the table began.
        """
        kind = RunKind(kind)
        self.register_tables([table_uri], source="run", now=now)
        with self._transaction("start a run") as conn:
            now = (now or _leases.db_now(conn)) - timedelta(seconds=max(0.0, seconds_ago))
            result = conn.execute(
                sa.insert(runs)
                .values(
                    table_uri=table_uri,
                    kind=kind.value,
                    status=RunStatus.RUNNING.value,
                    holder=holder,
                    started_at=now,
                    plan=plan,
                )
                .returning(runs.c.id)
            )
            return int(result.scalar_one())

    def finish_run(
        self,
        run_id: int,
        status: RunStatus | str,
        *,
        metrics: Mapping[str, Any] | None = None,
        error: str | None = None,
        plan: Any = None,
        retry_after: datetime | None = None,
        layout: Mapping[str, Any] | None = None,
        now: datetime | None = None,
    ) -> RunRecord:
        """Record the end of a run and update its table's last status (and ``layout``, when given).

        A failed run increments the table's consecutive failures of the run's kind and sets that kind's
        retry time (computed by the caller's backoff); a succeeded or skipped run of the kind resets both
        and records when it succeeded. The other kind's failures are left alone.
        """
        status = RunStatus(status)
        if status is RunStatus.RUNNING:
            raise ValueError("finish_run needs a final status, not 'running'")
        error = None if error is None else redact_secrets(error)
        with self._transaction("finish a run") as conn:
            now = now or _leases.db_now(conn)
            values: dict[str, Any] = {"status": status.value, "ended_at": now, "error": error}
            if metrics is not None:
                values["metrics"] = dict(metrics)
            if plan is not None:
                values["plan"] = plan
            row = conn.execute(
                sa.update(runs).where(runs.c.id == run_id).values(**values).returning(runs.c.table_uri, runs.c.kind)
            ).first()
            if row is None:
                raise StateStoreError(f"run {run_id} does not exist in {self._display_url}")
            outcome = _table_outcome(RunKind(row.kind), status, now, error, retry_after)
            if layout is not None:
                outcome.update(layout=dict(layout), layout_at=now, **layout_measure_values(dict(layout)))
            conn.execute(sa.update(tables).where(tables.c.uri == row.table_uri).values(**outcome))
        record = self.get_run(run_id)
        assert record is not None
        return record

    def record_decisions(self, run_id: int, items: Iterable[Decision]) -> int:
        """Store the per-bucket decisions (the ``--explain`` reasons) of a run; returns how many."""
        rows = [
            {
                "run_id": run_id,
                "partition": d.partition,
                "bucket": d.bucket,
                "action": d.action,
                "rule": d.rule,
                "message": d.message,
            }
            for d in items
        ]
        if not rows:
            return 0
        with self._transaction("record decisions") as conn:
            conn.execute(sa.insert(decisions), rows)
        return len(rows)

    def get_run(self, run_id: int) -> RunRecord | None:
        """One run, or None."""
        with self._transaction("read a run") as conn:
            row = conn.execute(sa.select(runs).where(runs.c.id == run_id)).mappings().first()
        return None if row is None else RunRecord(**row)

    def history(
        self,
        table_uri: str | None = None,
        *,
        kind: RunKind | str | None = None,
        status: RunStatus | str | None = None,
        limit: int = 50,
        before_id: int | None = None,
    ) -> list[RunRecord]:
        """Runs, newest first; filter by table, kind and status; page with ``before_id``."""
        stmt = sa.select(runs).order_by(runs.c.id.desc()).limit(limit)
        if table_uri is not None:
            stmt = stmt.where(runs.c.table_uri == table_uri)
        if kind is not None:
            stmt = stmt.where(runs.c.kind == RunKind(kind).value)
        if status is not None:
            stmt = stmt.where(runs.c.status == RunStatus(status).value)
        if before_id is not None:
            stmt = stmt.where(runs.c.id < before_id)
        with self._transaction("read the history") as conn:
            return [RunRecord(**row) for row in conn.execute(stmt).mappings()]

    def last_runs(self, kind: RunKind | str | None = None) -> dict[str, RunRecord]:
        """The latest run of every table (of one kind, if given), by table URI: what ``maintd status`` shows."""
        latest = sa.select(sa.func.max(runs.c.id)).group_by(runs.c.table_uri)
        if kind is not None:
            latest = latest.where(runs.c.kind == RunKind(kind).value)
        stmt = sa.select(runs).where(runs.c.id.in_(latest.scalar_subquery()))
        with self._transaction("read the last runs") as conn:
            return {row["table_uri"]: RunRecord(**row) for row in conn.execute(stmt).mappings()}

    def decisions_of(self, run_id: int) -> list[DecisionRecord]:
        """The decisions recorded for a run, in the order they were recorded."""
        stmt = sa.select(decisions).where(decisions.c.run_id == run_id).order_by(decisions.c.id)
        with self._transaction("read decisions") as conn:
            return [
                DecisionRecord(
                    id=row["id"],
                    run_id=row["run_id"],
                    decision=Decision(row["partition"], row["bucket"], row["action"], row["rule"], row["message"]),
                )
                for row in conn.execute(stmt).mappings()
            ]

    def abandon_runs(self, holder: str, *, reason: str, now: datetime | None = None) -> int:
        """Mark every running run of ``holder`` abandoned (on shutdown, or at start after a crash)."""
        with self._transaction("abandon runs") as conn:
            now = now or _leases.db_now(conn)
            return _leases.abandon_runs_of(conn, holder=holder, reason=reason, now=now)

    def prune_history(self, older_than: datetime) -> int:
        """Delete finished runs (and their decisions) that ended before ``older_than``; returns how many."""
        with self._transaction("prune the history") as conn:
            old = sa.select(runs.c.id).where(runs.c.ended_at < older_than)
            conn.execute(sa.delete(decisions).where(decisions.c.run_id.in_(old.scalar_subquery())))
            return int(conn.execute(sa.delete(runs).where(runs.c.ended_at < older_than)).rowcount)

    # -- leases -----------------------------------------------------------------------------------------

    def acquire_leases(
        self, holder: str, candidates: Iterable[str], duration: float, limit: int, *, now: datetime | None = None
    ) -> list[str]:
        """Take (or extend) the leases of up to ``limit`` of ``candidates`` for ``holder``; see
        :func:`maintd.service.leases.acquire`."""
        wanted = sorted(set(candidates))
        if not wanted or limit <= 0:
            return []
        with self._transaction("create lease rows") as conn:
            _leases.ensure_rows(conn, wanted)
        with self._transaction("acquire leases") as conn:
            return _leases.acquire(conn, holder, wanted, timedelta(seconds=duration), limit, now)

    def renew_leases(
        self, holder: str, duration: float, table_uris: Iterable[str] | None = None, *, now: datetime | None = None
    ) -> list[str]:
        """Extend the unexpired leases of ``holder`` (all, or those in ``table_uris``); returns those still held."""
        with self._transaction("renew leases") as conn:
            return _leases.renew(conn, holder, timedelta(seconds=duration), table_uris, now)

    def renew_lease(self, holder: str, table_uri: str, duration: float, *, now: datetime | None = None) -> bool:
        """Extend one lease; False if ``holder`` no longer holds it (expired and maybe taken over)."""
        return table_uri in self.renew_leases(holder, duration, [table_uri], now=now)

    def release_lease(self, holder: str, table_uri: str) -> bool:
        """Give one lease up at once; False if ``holder`` did not hold it."""
        with self._transaction("release a lease") as conn:
            return _leases.release(conn, holder, [table_uri]) > 0

    def release_all(self, holder: str) -> int:
        """Give every lease of ``holder`` up (on shutdown); returns how many."""
        with self._transaction("release leases") as conn:
            return _leases.release(conn, holder, None)

    def leases(self, *, live_only: bool = True, now: datetime | None = None) -> list[LeaseRecord]:
        """The leases (only unexpired ones by default), by table URI."""
        with self._transaction("list leases") as conn:
            return _leases.list_leases(conn, live_only, now)

    def lease_holders(self, *, now: datetime | None = None) -> dict[str, str]:
        """Table URI to holder, for every unexpired lease."""
        return {lease.table_uri: lease.holder for lease in self.leases(now=now) if lease.holder is not None}

    # -- replicas ---------------------------------------------------------------------------------------

    def heartbeat(self, holder: str, live_for: float) -> list[str]:
        """Record that ``holder`` lives (database clock) and return the live replicas, sorted: those seen
        within the last ``live_for`` seconds. Replicas gone for ten times that are forgotten."""
        with self._transaction("renew the replica") as conn:
            now = _leases.db_now(conn)
            _leases.insert_missing(conn, replicas, [{"holder": holder, "started_at": now, "seen_at": now}], "holder")
            conn.execute(sa.update(replicas).where(replicas.c.holder == holder).values(seen_at=now))
            conn.execute(sa.delete(replicas).where(replicas.c.seen_at < now - timedelta(seconds=10 * live_for)))
            live = sa.select(replicas.c.holder).where(replicas.c.seen_at > now - timedelta(seconds=live_for))
            return sorted(conn.execute(live).scalars())

    def leave(self, holder: str) -> None:
        """Remove ``holder`` from the live replicas at once (a clean stop hands its tables on without delay)."""
        with self._transaction("remove the replica") as conn:
            conn.execute(sa.delete(replicas).where(replicas.c.holder == holder))

    # -- aggregates for /metrics -------------------------------------------------------------------------

    def table_counts(self) -> dict[str, int]:
        """Registered tables by state (``healthy``, ``failing``, ``disabled``), counted by the database."""
        with self._transaction("count tables") as conn:
            return _aggregates.table_counts(conn)

    def lease_counts(self, *, now: datetime | None = None) -> dict[str, int]:
        """Unexpired leases by holder, counted by the database."""
        with self._transaction("count leases") as conn:
            return _aggregates.lease_counts(conn, now)

    def unhealthiest_tables(self, limit: int) -> list[TableRecord]:
        """Up to ``limit`` enabled tables, the unhealthiest first: most failures in a row, then the longest
        without a successful maintenance (never first), then by URI."""
        with self._transaction("list the unhealthiest tables") as conn:
            return _aggregates.unhealthiest(conn, limit)

    def gauge_reads(self, max_tables: int | None, unhealthiest: int) -> _aggregates.GaugeReads:
        """What one scrape of ``/metrics`` reads, in one transaction: tables by state, leases by holder, the
        warehouse roots, and the enabled tables whose gauges are served (every one while at most
        ``max_tables`` are enabled, None: no bound; else the ``unhealthiest`` unhealthiest)."""
        with self._transaction("read the gauges") as conn:
            return _aggregates.gauge_reads(conn, max_tables, unhealthiest)

    # -- reads for the web console ----------------------------------------------------------------------

    def fleet_page(self, query: _console.FleetQuery) -> _console.FleetPage:
        """One page of the registered tables, filtered and ordered by the database (the console's fleet page)."""
        with self._transaction("read a page of tables") as conn:
            return _console.fleet_page(conn, query)

    def list_replicas(self) -> list[_console.ReplicaRecord]:
        """The replicas recorded in the store (live ones and those gone recently), by holder."""
        with self._transaction("list replicas") as conn:
            return _console.list_replicas(conn)

    # -- keeping targets (maintd.service.tuning) ----------------------------------------------------------

    def set_targets(self, declared: Mapping[str, Mapping[str, float]], undeclared: Iterable[str] = ()) -> None:
        """Record the targets of tables that declare them; forget the tuning rows and samples of ``undeclared``
        tables (they declare no target: never re-tuned, never measured)."""
        with self._transaction("record targets") as conn:
            _tuning.set_targets(conn, declared, undeclared)

    def tuning_records(self, uris: Iterable[str] | None = None) -> dict[str, TuningRecord]:
        """The tables that declare targets (of ``uris``, or all): targets, measured figures, last re-tune."""
        with self._transaction("read the tuning rows") as conn:
            return _tuning.tuning_records(conn, uris)

    def tuned_intervals(self) -> dict[str, float]:
        """The check intervals the daemon tuned (seconds), by table URI; tables without one are absent.

        What a maintenance pass reads besides :meth:`schedule`: the rows of tables with a tuned interval only.
        """
        with self._transaction("read the tuned intervals") as conn:
            return _tuning.tuned_intervals(conn)

    def tuned_overrides(self, uri: str) -> dict[str, Any] | None:
        """The knobs the daemon applied to ``uri`` (nested), or None."""
        record = self.tuning_records([uri]).get(uri)
        return None if record is None else record.overrides

    def record_tuning(
        self,
        uri: str,
        *,
        overrides: Mapping[str, Any],
        interval_seconds: float | None,
        reason: str,
        predicted: Mapping[str, float],
        measured: Mapping[str, float],
        now: datetime | None = None,
    ) -> None:
        """Store what a re-tune of ``uri`` applied, when, why, and the figures it predicted and measured."""
        with self._transaction("record a re-tune") as conn:
            now = now or _leases.db_now(conn)
            _tuning.record_tuning(conn, uri, {
                "overrides": dict(overrides), "interval_seconds": interval_seconds, "tuned_at": now,
                "reason": reason, "predicted": dict(predicted), "tuned_measured": dict(measured),
                "error": None, "error_at": None})

    def record_tuning_error(self, uri: str, error: str, *, now: datetime | None = None) -> None:
        """Store why a re-tune of ``uri`` failed (its applied knobs stay)."""
        with self._transaction("record a failed re-tune") as conn:
            now = now or _leases.db_now(conn)
            _tuning.record_tuning(conn, uri, {"error": redact_secrets(error), "error_at": now})

    def record_measured(self, measured: Mapping[str, tuple[Mapping[str, float], Mapping[str, float]]],
                        *, now: datetime | None = None) -> None:
        """Store each table's measured figures and gaps (``uri -> (measured, gaps)``)."""
        with self._transaction("record measured figures") as conn:
            _tuning.record_measured(conn, measured, now or _leases.db_now(conn))

    def sample_layouts(self, at: datetime) -> int:
        """Sample the layout measures of every enabled table with targets at ``at`` (once per table and time)."""
        with self._transaction("sample layouts") as conn:
            return _tuning.sample_layouts(conn, at)

    def layout_samples(self, uris: Iterable[str], since: datetime
                       ) -> dict[str, list[tuple[datetime, float | None, float | None]]]:
        """Samples of ``uris`` since ``since``, oldest first: (time, read amplification, level-0 age minutes)."""
        with self._transaction("read layout samples") as conn:
            return _tuning.samples(conn, uris, since)

    def prune_samples(self, older_than: datetime) -> int:
        """Delete layout samples taken before ``older_than``; returns how many."""
        with self._transaction("prune layout samples") as conn:
            return _tuning.prune_samples(conn, older_than)

    def missing_target_counts(self) -> dict[str, int]:
        """Tables missing each target, by target name (every target named)."""
        with self._transaction("count tables missing targets") as conn:
            return _tuning.missing_counts(conn)

    # -- warehouse roots --------------------------------------------------------------------------------

    def record_root_scan(
        self,
        uri: str,
        *,
        tables_found: int = 0,
        error: str | None = None,
        error_type: str | None = None,
        holder: str | None = None,
        now: datetime | None = None,
    ) -> None:
        """Record a search of warehouse root ``uri``: how many tables it found, or why it failed (redacted)."""
        error = None if error is None else redact_secrets(error)
        with self._transaction("record a warehouse root") as conn:
            now = now or _leases.db_now(conn)
            _leases.insert_missing(conn, roots, [{"uri": uri, "checked_at": now, "tables": 0, "failures": 0}], "uri")
            values: dict[str, Any] = {"checked_at": now, "holder": holder, "tables": tables_found, "error": error,
                                      "error_type": error_type}
            if error is None:
                values.update(failures=0, succeeded_at=now)
            else:
                values["failures"] = roots.c.failures + 1
            conn.execute(sa.update(roots).where(roots.c.uri == uri).values(**values))

    def list_roots(self) -> list[RootRecord]:
        """The last search of every recorded warehouse root, by URI."""
        with self._transaction("list warehouse roots") as conn:
            rows = conn.execute(sa.select(roots).order_by(roots.c.uri)).mappings()
            return [RootRecord(**row) for row in rows]

    def forget_roots(self, keep: Iterable[str]) -> int:
        """Delete the records of roots not in ``keep`` (no longer configured); returns how many."""
        kept = set(keep)
        with self._transaction("forget warehouse roots") as conn:
            gone = [uri for uri in conn.execute(sa.select(roots.c.uri)).scalars() if uri not in kept]
            if gone:
                conn.execute(sa.delete(roots).where(roots.c.uri.in_(gone)))
            return len(gone)

    # -- plumbing ---------------------------------------------------------------------------------------

    @contextmanager
    def _transaction(self, what: str) -> Iterator[Connection]:
        try:
            with self.engine.begin() as conn:
                yield conn
        except StateStoreError:
            raise
        except SQLAlchemyError as exc:
            detail = redact_secrets(str(exc).split("\n[SQL:")[0])
            raise StateStoreError(f"state store {self._display_url}: cannot {what}: {detail}") from exc


def _table_outcome(
    kind: RunKind, status: RunStatus, now: datetime, error: str | None, retry_after: datetime | None
) -> dict[str, Any]:
    values: dict[str, Any] = {"last_status": status.value, "last_run_at": now, "last_error": error}
    failures, retry = f"{kind.value}_failures", f"{kind.value}_retry_after"
    if status is RunStatus.FAILED:
        values[failures] = tables.c[failures] + 1
        values[retry] = retry_after
    elif status in (RunStatus.SUCCEEDED, RunStatus.SKIPPED):
        values[failures] = 0
        values[retry] = None
        values[f"{kind.value}_succeeded_at"] = now
    return values


def _table_name(uri: str) -> str:
    return uri.rstrip("/").rsplit("/", 1)[-1] or uri


def open_store(settings: Settings, *, upgrade: bool = True) -> StateStore:
    """The store of ``settings``: its schema upgraded (``upgrade``), or checked to be this maintd's.

    The store also becomes this process's commit lock (:mod:`maintd.service.commit_lock`), so that the
    daemon and ``maintd run`` can commit to tables whose store lacks conditional put and that opted into
    ``commit_lock: state_store``; tables that did not opt in never take it.

    Raises:
        StateStoreError: the store cannot be reached, or (``upgrade`` false) its schema is not current.
    """
    s = settings.store
    store = StateStore(s.url, db_schema=s.db_schema, connect_timeout=s.connect_timeout_seconds, create=upgrade)
    if not upgrade:
        try:
            store.check_schema()
        except StateStoreError:
            store.close()
            raise
    from maintd.service.commit_lock import install

    install(store)
    return store


def utcnow() -> datetime:
    """The local clock as an aware UTC datetime (for callers that pass ``now`` explicitly)."""
    return datetime.now(UTC)


__all__ = ["StateStore", "open_store", "utcnow"]
