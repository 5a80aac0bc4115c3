"""The commit lock: put-if-absent for stores that cannot do it themselves, opt-in only.

An object store without conditional put (an old S3-compatible server) cannot publish a commit safely: two
writers would both "create" version ``v`` and one would silently overwrite the other. maintd refuses such a
store (:class:`~maintd.errors.ConditionalPutUnsupportedError`) unless the user opts in with the storage
option ``commit_lock: state_store``: every writer of the table must then publish through the same lock,
held in the daemon's state store (:mod:`maintd.service.commit_lock` implements it; the storage layer sees
only this interface, so it imports no database library).

Under the lock, put-if-absent is "look, then write": correct only if *every* writer of the table takes the
lock (a writer that does not, another engine for instance, breaks it). The lock has a lease: a holder
that stalls past it loses the lock, so the write happens only while the lease is still valid
(:meth:`CommitLock.hold` checks it before returning control). Ambiguous writes are resolved as everywhere
else, by reading the commit back and comparing transaction ids.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Protocol, runtime_checkable

from maintd.errors import ConfigError


@runtime_checkable
class CommitLock(Protocol):
    """A mutual-exclusion lock over names, shared by every process that writes a table."""

    def hold(self, name: str) -> AbstractContextManager[None]:
        """Hold the lock ``name`` for the duration of the ``with`` block (waits for it, bounded; raises
        :class:`~maintd.errors.StateStoreError` if it cannot be had, or was lost before the block ran)."""


_lock = threading.Lock()
_installed: CommitLock | None = None


def install_commit_lock(lock: CommitLock | None) -> CommitLock | None:
    """Make ``lock`` the commit lock of this process (None: none); returns the one it replaces."""
    global _installed
    with _lock:
        previous, _installed = _installed, lock
    return previous


def commit_lock(uri: str) -> CommitLock:
    """The installed commit lock, or a :class:`ConfigError` naming the table that asked for one."""
    with _lock:
        lock = _installed
    if lock is None:
        raise ConfigError(
            f"table {uri}: the storage option commit_lock=state_store asks for commits under a lock held in the "
            "state store, but this process has none: run through the daemon or `maintd run` with a state store "
            "configured (state_store.url), or use a store that honours conditional put"
        )
    return lock


def lock_names(names: Iterator[str]) -> list[str]:
    """Lock names in a fixed order (taking several in that order never deadlocks)."""
    return sorted(set(names))


__all__ = ["CommitLock", "commit_lock", "install_commit_lock", "lock_names"]
