"""Commit records held in the state store, for object stores without conditional put (opt-in).

Implements :class:`maintd.storage.lock.CommitRecords` with one table, ``maintd_commit_records``: a commit's
bytes are inserted under the SHA-256 of its file's URI, the primary key, so that of two writers of one
version exactly one insert succeeds, on PostgreSQL and on SQLite alike. No lock is held while the file is
written, so no lease can run out under a writer that stalls: the record fixes what the file holds, and a
writer that finds a record not yet complete writes its bytes for it (docs/format.md, "Storage").

Complete records keep only their key once their file holds the bytes, and go after
:data:`RECORD_DAYS` days: a writer that publishes at a version whose record went finds the file there and
never overwrites it (:class:`~maintd.storage.objectstore.ObjectStoreStorage` looks first).

Every writer of such a table must use the same state store (``maintd run`` and the daemon do, once
:func:`install` ran).
"""

from __future__ import annotations

import hashlib
import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from loguru import logger

from maintd.errors import StateStoreError
from maintd.service.schema import commit_records
from maintd.storage.lock import Claim, CommitRecords, install_commit_lock

RECORD_DAYS = 7
"""Complete records older than this are deleted (their files have long been written)."""
PRUNE_EVERY = 256
"""Completions of this process between two prunings of old records."""


def record_key(name: str) -> str:
    """The primary key of the record of ``name`` (a file's URI, which may be longer than a key may be)."""
    return hashlib.sha256(name.encode()).hexdigest()


class StateStoreCommitRecords:
    """Commit records in the state store's database (see the module docstring)."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self._completions = itertools.count(1)

    def _failed(self, name: str, exc: sa.exc.SQLAlchemyError) -> StateStoreError:
        return StateStoreError(f"commit record {name}: the state store failed ({type(exc).__name__}: "
                               f"{str(exc).splitlines()[0][:200]})")

    def claim(self, name: str, data: bytes) -> Claim:
        key = record_key(name)
        try:
            try:
                with self.engine.begin() as conn:
                    conn.execute(commit_records.insert().values(key=key, name=name, data=data, complete=False,
                                                                created_at=datetime.now(UTC)))
                return Claim(created=True)
            except sa.exc.IntegrityError:
                pass  # the name is taken: by whom, and is its file written?
            with self.engine.connect() as conn:
                row = conn.execute(sa.select(commit_records.c.data, commit_records.c.complete)
                                   .where(commit_records.c.key == key)).first()
        except sa.exc.SQLAlchemyError as exc:
            raise self._failed(name, exc) from None
        if row is None or row.complete or row.data is None:
            return Claim(created=False)
        return Claim(created=False, pending=bytes(row.data))

    def complete(self, name: str) -> None:
        try:
            with self.engine.begin() as conn:
                conn.execute(commit_records.update().where(commit_records.c.key == record_key(name))
                             .values(complete=True, data=None))
                if next(self._completions) % PRUNE_EVERY == 0:
                    cutoff = datetime.now(UTC) - timedelta(days=RECORD_DAYS)
                    conn.execute(commit_records.delete().where(commit_records.c.complete.is_(True),
                                                               commit_records.c.created_at < cutoff))
        except sa.exc.SQLAlchemyError as exc:
            raise self._failed(name, exc) from None


def install(store: Any) -> CommitRecords:
    """Make the commit record store of this process the one held in ``store`` (a
    :class:`~maintd.service.store.StateStore` or an SQLAlchemy engine whose schema is migrated); tables that opted
    in (``commit_lock: state_store``) then commit through it."""
    engine = store if isinstance(store, sa.Engine) else store.engine
    records = StateStoreCommitRecords(engine)
    install_commit_lock(records)
    logger.debug("commit records in the state store installed")
    return records


__all__ = ["PRUNE_EVERY", "RECORD_DAYS", "StateStoreCommitRecords", "install", "record_key"]
