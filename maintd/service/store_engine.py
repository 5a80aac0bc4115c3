"""The SQLAlchemy engine of the state store: SQLite (a local file) or PostgreSQL, set up for leases.

PostgreSQL connections time out after ``connect_timeout`` and are checked before use (a replica's pool
survives a database restart); a ``db_schema`` is applied to every statement through SQLAlchemy's schema
translation. SQLite runs in WAL mode (readers proceed while one process writes) and every transaction
starts with ``BEGIN IMMEDIATE``, the write lock that makes lease updates atomic across processes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from maintd.errors import ConfigError, StateStoreError
from maintd.settings import redact_url


def make_engine(url: str, db_schema: str | None, connect_timeout: float) -> Engine:
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ConfigError(f"invalid state store URL {redact_url(url)!r}: {exc}; see store.url") from None
    backend = parsed.get_backend_name()
    try:
        if backend == "sqlite":
            return _sqlite_engine(parsed, connect_timeout)
        if backend == "postgresql":
            engine = sa.create_engine(
                parsed, pool_pre_ping=True, connect_args={"connect_timeout": max(1, int(connect_timeout))}
            )
            if db_schema is not None:
                engine = engine.execution_options(schema_translate_map={None: db_schema})
            return engine
    except (ImportError, SQLAlchemyError) as exc:
        raise StateStoreError(f"cannot open state store {redact_url(url)}: {exc}") from None
    raise ConfigError(  # a setting to fix, not a store that failed
        f"state store URL {redact_url(url)} uses {backend!r}; use sqlite:///path or postgresql+psycopg://..."
    )


def _sqlite_engine(parsed: sa.URL, connect_timeout: float) -> Engine:
    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(parsed, connect_args={"timeout": connect_timeout})

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy emit BEGIN itself (below), and let readers proceed while one process writes.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @sa.event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # Take the write lock up front so that read-check-write sequences (leases) are atomic across processes.
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


__all__ = ["make_engine"]
