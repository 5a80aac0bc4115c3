"""Conflict detection between a losing transaction and each winning commit (docs/format.md, "Conflicts").

The checks run in Delta Lake's order (``ConflictChecker.scala``): protocol, metadata, application
transactions, appends where the loser read, deletes of what it read, deletes of what it deletes.
A winning commit that carries the loser's own transaction id means the loser's earlier attempt
landed (its answer was lost); that is reported as :class:`AlreadyCommitted`, not as a conflict.

Two refinements over Delta Lake, both for primary-key tables:

* Maintenance (every action ``data_change=false``) runs at snapshot isolation: appends never
  conflict with it; it fails only when a file it removes was removed concurrently.
* A *replace* (``overwrite``) is rebased instead of failed when a winner changed no data in its
  partitions (maintenance) or, under WriteSerializable, blindly appended there: the replace then
  also removes those files, which is the serial order "winner, then replace".

Pins (docs/format.md, "Pins"): a pin of version ``v`` and a commit that expires ``v`` (reclamation's
``expire`` record, a PURGE) conflict with :class:`~maintd.errors.PinConflictError`, whichever lands first, so a
pin is never acknowledged for a version whose files reclamation goes on to delete.

When the winning commits themselves are gone (reclamation deleted them while the transaction ran),
:func:`state_change` stands in for them: the difference between the last state checked and the latest
state, checked the same way. It cannot tell a blind append from another add, so it counts every add,
which may report a conflict the commits would not have; it never misses one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NoReturn

from maintd.errors import (
    CommitConflictError,
    ConcurrentAppendError,
    ConcurrentDeleteDeleteError,
    ConcurrentDeleteReadError,
    ConcurrentTransactionError,
    MetadataChangedError,
    PinConflictError,
    ProtocolChangedError,
)
from maintd.table.log.actions import (
    Action,
    AddFile,
    CommitInfo,
    Expire,
    Metadata,
    Pin,
    Protocol,
    RemoveFile,
    Txn,
    expired_by,
)
from maintd.table.log.snapshot import PartitionKey, Snapshot, partition_key

ADD_COLUMNS = "ADD COLUMNS"
"""The operation of a commit that only adds nullable columns to the schema (``Table.add_columns``). A data write
that read nothing of the schema change commits over it: its files lack the new columns, which read as nulls."""


@dataclass(frozen=True)
class WinningCommit:
    """What the checks need to know of a commit that won the race."""

    version: int
    operation: str
    txn_id: str | None
    is_blind_append: bool
    protocol_changed: bool
    metadata_changed: bool
    app_ids: frozenset[str]
    adds: tuple[AddFile, ...]
    removes: tuple[RemoveFile, ...]
    pinned: tuple[int, ...] = ()
    """Versions the commit pinned."""
    expired_before: int | None = None
    """The commit expired every version before this (reclamation's record, a PURGE); None: it expired none."""
    columns_added: bool = False
    """Its metadata change only added nullable columns (operation ``ADD COLUMNS``, no protocol change)."""

    @classmethod
    def from_actions(cls, version: int, actions: Sequence[Action]) -> WinningCommit:
        info = next((a for a in actions if isinstance(a, CommitInfo)), None)
        return cls(
            version=version,
            operation=info.operation if info else "UNKNOWN",
            txn_id=info.txn_id if info else None,
            is_blind_append=bool(info and info.is_blind_append),
            protocol_changed=any(isinstance(a, Protocol) for a in actions),
            metadata_changed=any(isinstance(a, Metadata) for a in actions),
            app_ids=frozenset(a.app_id for a in actions if isinstance(a, Txn)),
            adds=tuple(a for a in actions if isinstance(a, AddFile)),
            removes=tuple(a for a in actions if isinstance(a, RemoveFile)),
            pinned=tuple(sorted(a.version for a in actions if isinstance(a, Pin))),
            expired_before=_before(expired_by(actions)),
            columns_added=bool(info and info.operation == ADD_COLUMNS)
            and not any(isinstance(a, Protocol) for a in actions),
        )


def _before(expire: Expire | None) -> int | None:
    return None if expire is None else expire.before


@dataclass
class TxnFootprint:
    """What a pending transaction read and changes; mutated only by rebasing."""

    isolation_level: str
    partition_by: tuple[str, ...]
    read_whole_table: bool = False
    read_partitions: set[PartitionKey] = field(default_factory=set)
    read_files: set[str] = field(default_factory=set)
    removes: set[str] = field(default_factory=set)
    app_ids: set[str] = field(default_factory=set)
    data_change: bool = True
    replace: bool = False
    pins: set[int] = field(default_factory=set)
    """Versions this transaction pins."""
    expires_before: int | None = None
    """This transaction expires every version before this (None: none)."""
    keeps: set[str] = field(default_factory=set)
    """Files that must stay live: the BaseFiles this transaction's looked-up prior-rows files answer for."""
    metadata: bool = False
    """This transaction changes the metadata (properties, schema) itself."""

    def reads(self, f: AddFile) -> bool:
        return self.read_whole_table or partition_key(f.partition, self.partition_by) in self.read_partitions


@dataclass(frozen=True)
class AlreadyCommitted:
    """The winner at ``version`` is this transaction's own earlier attempt."""

    version: int


def _fail(cls: type[CommitConflictError], w: WinningCommit, what: str, paths: Iterable[str] = ()) -> NoReturn:
    listed = sorted(paths)
    shown = ", ".join(listed[:5]) + (f" and {len(listed) - 5} more" if len(listed) > 5 else "")
    raise cls(
        f"concurrent {w.operation} at version {w.version} {what}" + (f": {shown}" if shown else ""),
        version=w.version,
        winning_operation=w.operation,
        paths=tuple(listed),
    )


def check_winner(fp: TxnFootprint, w: WinningCommit, own_txn_id: str) -> AlreadyCommitted | None:
    """Raise the first conflict between the pending transaction and winning commit ``w``.

    Returns :class:`AlreadyCommitted` when ``w`` is this transaction itself, else None. On
    success the footprint may have been rebased (a replace takes over files added by ``w``).
    """
    if w.txn_id == own_txn_id:
        return AlreadyCommitted(w.version)
    if w.protocol_changed:
        _fail(ProtocolChangedError, w, "changed the table protocol; reopen the table and retry")
    if w.metadata_changed and not (w.columns_added and fp.data_change and not fp.metadata):
        # a data write whose files lack columns added concurrently lands: they read as nulls (docs/format.md)
        _fail(MetadataChangedError, w, "changed the table metadata or properties; re-read the table and retry")
    clash = fp.app_ids & w.app_ids
    if clash:
        _fail(ConcurrentTransactionError, w, "committed for the same application id", clash)
    _check_pins(fp, w)
    _check_appends(fp, w)
    _check_deletes(fp, w)
    return None


def _check_pins(fp: TxnFootprint, w: WinningCommit) -> None:
    if fp.pins and w.expired_before is not None and min(fp.pins) < w.expired_before:
        _fail(PinConflictError, w, f"expired every version before {w.expired_before}, so version {min(fp.pins)} "
              f"cannot be pinned any more; pin version {w.expired_before} or newer")
    if fp.expires_before is not None:
        hit = [v for v in w.pinned if v < fp.expires_before]
        if hit:
            _fail(PinConflictError, w, f"pinned version {min(hit)}, which this transaction would expire; plan the "
                  "reclamation again (it keeps pinned versions)")


def _check_appends(fp: TxnFootprint, w: WinningCommit) -> None:
    if not fp.data_change:
        return  # maintenance: snapshot isolation, appends never conflict
    counted = fp.isolation_level == "Serializable" or not w.is_blind_append
    hits = [a for a in w.adds if a.data_change and fp.reads(a)]
    if hits and counted:
        _fail(ConcurrentAppendError, w, "added files where this transaction read", (a.path for a in hits))
    if fp.replace:  # rebase: the replace also removes what the winner added in its partitions
        fp.removes.update(a.path for a in w.adds if fp.reads(a))


def _check_deletes(fp: TxnFootprint, w: WinningCommit) -> None:
    changed = {r.path for r in w.removes if r.data_change}
    rewritten = {r.path for r in w.removes if not r.data_change}
    read_gone = fp.read_files & changed
    if read_gone:
        _fail(ConcurrentDeleteReadError, w, "removed files this transaction read", read_gone)
    if fp.replace:
        fp.read_files -= rewritten
        fp.removes -= rewritten
        double = fp.removes & changed
    else:
        double = fp.removes & (changed | rewritten)
    if double:
        _fail(ConcurrentDeleteDeleteError, w, "removed files this transaction also removes", double)
    kept_gone = fp.keeps & (changed | rewritten)
    if kept_gone:  # a looked-up prior-rows file must be added while its BaseFiles live (docs/format.md)
        _fail(ConcurrentDeleteDeleteError, w, "removed BaseFiles this transaction's looked-up prior rows answer for",
              kept_gone)


def state_change(before: Snapshot, after: Snapshot) -> WinningCommit:
    """All commits from ``before`` to ``after`` as one winning commit, rebuilt from the two states."""
    removed = [after.tombstones.get(p) or RemoveFile(path=p, deletion_time=0, data_change=True)
               for p in before.files.keys() - after.files.keys()]
    changed_apps = frozenset(a for a, v in after.app_txns.items() if before.app_txns.get(a) != v)
    return WinningCommit(
        version=after.version,
        operation=f"commits {before.version + 1}..{after.version} (reclaimed, compared by state)",
        txn_id=None,
        is_blind_append=False,
        protocol_changed=after.protocol != before.protocol,
        metadata_changed=after.metadata != before.metadata,
        app_ids=changed_apps,
        adds=tuple(f for p, f in after.files.items() if before.files.get(p) != f),
        removes=tuple(sorted(removed, key=lambda r: r.path)),
        pinned=tuple(sorted(p.version for i, p in after.pins.items() if i not in before.pins)),
        # The commits after ``before`` were reclaimed: everything up to ``before`` itself has expired.
        expired_before=max(after.expired_before, before.version + 1),
    )
