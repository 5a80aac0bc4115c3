"""Did my commit land? Publishing one attempt and settling what it did (docs/format.md, "Did a commit land?").

The one rule: an attempt to commit version ``v`` landed if and only if the transaction's own id stands at
``v`` in the table's history; neither a put-if-absent's yes nor an exception settles it (docs/design.md says
why). The evidence, cheapest first:

1. the commit file at ``v`` carries our id, and the commit at ``v - 1`` still carries the id that the state
   we built on recorded there. Reclamation deletes commits oldest first, so while ``v - 1`` is the commit we
   built on, the commit at ``v`` was never removed, and the history runs through our file. One small read.
2. otherwise the latest state, loaded afresh from the newest checkpoint (checkpoints record the transaction
   ids of the commits they summarise), decides: our id at ``v``: landed. Another id: our file is not part
   of the table (published into removed history), so the attempt did not land and the file is taken back;
   no record reaching back to ``v``: it cannot be known.

A publish that raised may have applied: the commit at ``v`` is read back first, and published again only
while the table has not moved past ``v``. Storage errors while settling are retried with the commit
backoff; when the outcome still cannot be told, :class:`~maintd.errors.CommitStateUnknownError`, and the
caller deletes nothing.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING

from loguru import logger

from maintd.errors import CommitStateUnknownError, StorageError, VersionNotFoundError
from maintd.table.log.actions import Action
from maintd.table.log.retry import Budget, RetryPolicy
from maintd.table.log.snapshot import Snapshot

if TYPE_CHECKING:
    from maintd.table.log.tablelog import TableLog

STORAGE_ERRORS = (OSError, StorageError)
"""What a storage raises when an operation failed (or, for a publish, may have applied)."""


class _Unknowable(Exception):
    """The log no longer tells whether the attempt landed; retrying cannot change that."""


class Attempt:
    """One attempt to commit ``actions`` at ``version`` on top of ``base`` (the state at ``version - 1``)."""

    def __init__(self, log: TableLog, *, txn_id: str, operation: str, base: Snapshot, version: int,
                 actions: Sequence[Action], fmt: int, retry: RetryPolicy, rng: random.Random) -> None:
        self.log = log
        self.txn_id = txn_id
        self.operation = operation
        self.base = base
        self.version = version
        self.actions = actions
        self.fmt = fmt
        self.retry = retry
        self.rng = rng
        self.created: bool | None = None
        """Whether this attempt's file is at ``version``: None while unknown (a publish that raised)."""
        self.ambiguous = 0
        """Publishes of this attempt that raised (their outcome had to be read back)."""

    def run(self) -> bool:
        """Publish, then settle: True if the attempt landed, False if it certainly did not.

        Raises:
            CommitStateUnknownError: whether it landed cannot be told.
        """
        self._publish()
        budget = Budget(self.retry, self.rng)
        problem = "the storage failed while publishing it"
        while True:
            try:
                verdict = self._settle()
                if verdict is not None:
                    return verdict
            except _Unknowable as exc:
                raise self._unknown(str(exc)) from None
            except (*STORAGE_ERRORS, VersionNotFoundError) as exc:  # the log moved under a fresh load, or I/O
                problem = f"the storage kept failing ({exc})"
            if budget.spent():
                raise self._unknown(problem)
            budget.pause()

    def base_stands(self) -> bool:
        """Whether the commit this attempt builds on (``version - 1``) is still the one its base recorded there.
        That is, the same file of the same incarnation of the table, so that a publish of ``version`` continues the
        table's history (never above a gap, never in a table dropped and created again, or rolled back)."""
        if self.version == 0:
            return True
        expected = self.base.txn_at(self.version - 1)
        if expected is None:  # a base loaded from a checkpoint of the first format: the file's presence tells
            return self.log.commit_exists(self.version - 1)
        return self.log.read_commit_txn(self.version - 1) == expected

    def _publish(self) -> None:
        try:
            self.created = self.log.try_commit(self.version, self.actions, fmt=self.fmt)
        except STORAGE_ERRORS as exc:
            self.ambiguous += 1
            self.created = None
            logger.warning("table {}: publishing version {} raised ({}); reading the log to see whether it landed",
                           self.log.storage.uri, self.version, exc)

    def _settle(self) -> bool | None:
        """True landed, False not landed, None: look again (after a publish whose answer was lost again)."""
        if self.created is None:
            found = self.log.read_commit_txn(self.version)
            if found is None:
                if self.log.latest_version(hint=self.base.version) >= self.version:
                    return self._in_history()  # our file is not there and the table moved past it
                if not self.base_stands():
                    return False  # our file is not there, and publishing again could land above a gap
                self._publish()  # it did not apply (yet): publish again; a late first copy changes nothing
                if not self.created:
                    self.created = None  # refused: perhaps by our own first request, applied late
                    return None
            else:
                self.created = found == self.txn_id
        if not self.created:
            return False
        expected = self.base.txn_at(self.version - 1)
        if expected is not None and self.log.read_commit_txn(self.version - 1) == expected:
            return True
        landed = self._in_history()
        if not landed:
            self._take_back()
        return landed

    def _in_history(self) -> bool:
        """Whether our id stands at ``version`` in the latest state, loaded afresh, on the commit we built on. A
        table that does not reach ``version`` (our file stands above a gap: the table was dropped and created
        again, or rolled back, under us), or holds another commit at ``version - 1`` (another incarnation), does
        not hold our commit."""
        latest = self.log.load_snapshot()
        if latest.version < self.version:
            return False
        found = latest.txn_at(self.version)
        if found is None:
            raise _Unknowable(f"the table's transaction records no longer reach back to version {self.version}")
        if found != self.txn_id:
            return False
        # Our file stands at ``version``, but on the commit we built on? Not if the table was dropped and created
        # again (or rolled back and written again) up to ``version - 1`` under us: then it continues another
        # history (and a metadata commit of ours would even carry the old table id), and is no commit of ours.
        before, ours = latest.txn_at(self.version - 1), self.base.txn_at(self.version - 1)
        return before is None or ours is None or before == ours

    def _take_back(self) -> None:
        """Delete our file at ``version``: it is no part of the table (best effort: reclamation removes it too)."""
        logger.info("table {}: version {} was published into history that reclamation had removed; taking it back "
                    "and committing at a later version", self.log.storage.uri, self.version)
        try:
            if self.log.read_commit_txn(self.version) == self.txn_id:
                self.log.delete_commit(self.version)
        except STORAGE_ERRORS as exc:
            logger.warning("table {}: could not take back the commit file of version {} ({}); it is no part of "
                           "the table and reclamation removes it", self.log.storage.uri, self.version, exc)

    def _unknown(self, reason: str) -> CommitStateUnknownError:
        return CommitStateUnknownError(
            f"table {self.log.storage.uri}: whether {self.operation} (transaction {self.txn_id}) landed at version "
            f"{self.version} cannot be known: {reason}. Its data files are kept (orphan cleanup deletes them after "
            f"its grace if it did not land); look for transaction {self.txn_id} in the table history before "
            "retrying", version=self.version, txn_id=self.txn_id,
        )


__all__ = ["STORAGE_ERRORS", "Attempt"]
