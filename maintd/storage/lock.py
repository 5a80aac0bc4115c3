"""Commit records: put-if-absent for stores that cannot do it themselves, opt-in only.

An object store without conditional put cannot publish a commit safely: two writers would both "create"
version ``v``. maintd refuses such a store (:class:`~maintd.errors.ConditionalPutUnsupportedError`) unless the
table opts in with the storage option ``commit_lock: state_store``; every writer of the table must then
publish through the same record store, held in the daemon's state store (:mod:`maintd.service.commit_lock`
implements this interface, so the storage layer imports no database library).

No lock, so no lease that a stalled holder could outlive: the database decides, the file follows.

1. **Claim**: the commit's bytes are inserted as a record under a unique key (the file's URI); of two writers
   of one version exactly one inserts.
2. **Write**: the winner writes the file with a plain PUT, then marks the record complete. A writer that
   stalls between 1 and 2 can only ever write the bytes every other writer would write for it.
3. **Finish a stalled commit**: a writer whose insert finds an incomplete record writes that record's bytes to
   the file itself before it reports the version as taken.

A file that exists already is never overwritten: the claim reports the name as taken. Ambiguous writes are
resolved as everywhere else, by reading the commit back and comparing transaction ids.

docs/format.md ("Stores without conditional put") specifies the records; docs/design.md ("Storage") the reasons.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from maintd.errors import ConfigError


@dataclass(frozen=True)
class Claim:
    """What a claim of a name found: ``created`` (this call inserted the record), else ``pending``, the bytes of a
    record that is not complete (its writer may have stopped before writing the file), or None."""

    created: bool
    pending: bytes | None = None


@runtime_checkable
class CommitRecords(Protocol):
    """Records of commits under unique names, shared by every process that writes a table."""

    def claim(self, name: str, data: bytes) -> Claim:
        """Insert the record ``name`` -> ``data`` unless one exists, atomically (raises
        :class:`~maintd.errors.StateStoreError` if the store fails; then nothing is known of the record)."""

    def complete(self, name: str) -> None:
        """Mark record ``name`` complete: its file holds its bytes."""


_lock = threading.Lock()
_installed: CommitRecords | None = None


def install_commit_lock(records: CommitRecords | None) -> CommitRecords | None:
    """Make ``records`` the commit record store of this process (None: none); returns the one it replaces."""
    global _installed
    with _lock:
        previous, _installed = _installed, records
    return previous


def commit_lock(uri: str) -> CommitRecords:
    """The installed commit record store, or a :class:`ConfigError` naming the table that asked for one."""
    with _lock:
        records = _installed
    if records is None:
        raise ConfigError(
            f"table {uri}: the storage option commit_lock=state_store asks for commits recorded in the state "
            "store, but this process has none: run through the daemon or `maintd run` with a state store "
            "configured (state_store.url), or use a store that honours conditional put"
        )
    return records


__all__ = ["Claim", "CommitRecords", "commit_lock", "install_commit_lock"]
