"""The commit lock held in the state store, for object stores without conditional put (opt-in).

Implements :class:`maintd.storage.lock.CommitLock` with the database's own locks, so no table or
migration is needed and a holder that dies releases the lock with its connection:

* PostgreSQL: a session-level advisory lock (``pg_try_advisory_lock``) on a 64-bit hash of the name,
  polled with backoff until it is had or the wait is over;
* SQLite: the database write lock (``BEGIN IMMEDIATE``, taken by every transaction of the store's
  engine), held for the duration of the block; other processes wait on it with SQLite's busy timeout.

Every writer of such a table must use the same state store (``maintd run`` and the daemon do, once
:func:`install` ran); docs/format.md, "Storage", says why.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from loguru import logger

from maintd.errors import StateStoreError
from maintd.storage.lock import CommitLock, install_commit_lock

DEFAULT_WAIT_SECONDS = 60.0


def lock_key(name: str) -> int:
    """A signed 64-bit key for ``name`` (PostgreSQL advisory locks take a bigint)."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big", signed=True)


class StateStoreCommitLock:
    """Mutual exclusion over names through the state store's database (see the module docstring)."""

    def __init__(self, engine: sa.Engine, *, wait_seconds: float = DEFAULT_WAIT_SECONDS) -> None:
        self.engine = engine
        self.wait_seconds = wait_seconds

    @contextmanager
    def hold(self, name: str) -> Iterator[None]:
        try:
            if self.engine.dialect.name == "postgresql":
                with self._advisory(name):
                    yield
            else:
                with self.engine.begin():  # BEGIN IMMEDIATE: the database write lock
                    yield
        except sa.exc.SQLAlchemyError as exc:
            raise StateStoreError(f"commit lock {name}: the state store failed ({type(exc).__name__}: "
                                  f"{str(exc).splitlines()[0][:200]}); nothing was committed") from None

    @contextmanager
    def _advisory(self, name: str) -> Iterator[None]:
        key = lock_key(name)
        with self.engine.connect() as conn:
            deadline = time.monotonic() + self.wait_seconds
            pause = 0.005
            while not conn.execute(sa.text("SELECT pg_try_advisory_lock(:k)"), {"k": key}).scalar_one():
                conn.commit()
                if time.monotonic() > deadline:
                    raise StateStoreError(f"commit lock {name}: not had within {self.wait_seconds:.0f} s (another "
                                          "writer holds it); nothing was committed, try again")
                time.sleep(random.uniform(0, pause))
                pause = min(0.5, pause * 2)
            conn.commit()
            try:
                yield
            finally:
                try:
                    conn.execute(sa.text("SELECT pg_advisory_unlock(:k)"), {"k": key})
                    conn.commit()
                except sa.exc.SQLAlchemyError as exc:  # the session ends with the connection: so does the lock
                    logger.warning("commit lock {}: unlock failed ({}); released when the connection closes",
                                   name, exc)
                    conn.invalidate()


def install(store: Any, *, wait_seconds: float = DEFAULT_WAIT_SECONDS) -> CommitLock:
    """Make the commit lock of this process the one held in ``store`` (a :class:`~maintd.service.store.StateStore`
    or an SQLAlchemy engine); tables that opted in (``commit_lock: state_store``) then commit under it."""
    engine = store if isinstance(store, sa.Engine) else store.engine
    lock = StateStoreCommitLock(engine, wait_seconds=wait_seconds)
    install_commit_lock(lock)
    return lock


__all__ = ["DEFAULT_WAIT_SECONDS", "StateStoreCommitLock", "install", "lock_key"]
