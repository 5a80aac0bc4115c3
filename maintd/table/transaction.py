"""Optimistic transactions: record what was read and changed, then commit with conflict checks and retries.

The commit loop (as Delta Lake's ``doCommitRetryIteratively``, with the backoff delta-rs lacks):

1. try to publish ``read_version + 1`` with put-if-absent;
2. if the version is taken, wait (exponential backoff with jitter), read every commit since the
   last one checked, and check this transaction against each (:mod:`maintd.table.conflicts`);
3. retry at ``latest + 1``, until the attempts or the total time of the retry policy run out.

A winning commit that carries this transaction's id means an earlier attempt landed: that is
success. Writers' level-0 files take the version of the attempt that lands as their row version.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from maintd.errors import CommitRetriesExhaustedError, InvalidInputError
from maintd.table.actions import Action, AddFile, CommitInfo, IsolationLevel, Metadata, RemoveFile, Txn
from maintd.table.conflicts import AlreadyCommitted, TxnFootprint, WinningCommit, check_winner, state_change
from maintd.table.snapshot import PartitionKey, Snapshot, partition_key

if TYPE_CHECKING:
    from maintd.table.table import Table


@dataclass(frozen=True)
class RetryPolicy:
    """Bounds of the commit retry loop: attempts, backoff (seconds) and total time (seconds)."""

    max_attempts: int = 40
    base_delay: float = 0.005
    max_delay: float = 1.0
    total_timeout: float = 120.0

    def delay(self, attempt: int, rng: random.Random) -> float:
        """Full-jitter exponential backoff: uniform in [0, min(max, base * 2**attempt)]."""
        return rng.uniform(0, min(self.max_delay, self.base_delay * (2**attempt)))


DEFAULT_RETRY = RetryPolicy()


def now_ms() -> int:
    return int(time.time() * 1000)


class Transaction:
    """One optimistic transaction against a table. Build it, then call :meth:`commit` once."""

    def __init__(self, table: Table, operation: str, *, read_snapshot: Snapshot | None = None,
                 isolation_level: IsolationLevel | None = None, retry: RetryPolicy | None = None) -> None:
        self.table = table
        self.operation = operation
        self.read_snapshot = read_snapshot or table.snapshot()
        self.txn_id = uuid.uuid4().hex
        self.retry = retry or table.retry_policy
        level = isolation_level or self.read_snapshot.isolation_level
        self._adds: list[AddFile] = []
        self._removes: dict[str, RemoveFile] = {}
        self._metadata: Metadata | None = None
        self._app_txn: Txn | None = None
        self._footprint = TxnFootprint(level, self.read_snapshot.metadata.partition_by)
        self._committed: int | None = None
        self.attempts = 0
        self.conflicts_checked = 0

    @property
    def isolation_level(self) -> str:
        return self._footprint.isolation_level

    # -- recording -----------------------------------------------------------------------
    def add(self, f: AddFile) -> None:
        self._adds.append(f)

    def remove(self, f: AddFile | str, *, data_change: bool = True) -> None:
        path = f if isinstance(f, str) else f.path
        live = self.read_snapshot.files.get(path)
        if live is None:
            raise InvalidInputError(
                f"cannot remove {path}: it is not a live file of version {self.read_snapshot.version}"
            )
        self._removes[path] = RemoveFile(path=path, deletion_time=0, data_change=data_change,
                                         partition=live.partition, bucket=live.bucket, bytes=live.bytes)

    def read_files(self, paths: Any) -> None:
        self._footprint.read_files.update(paths)

    def read_partition(self, partition: Mapping[str, str | None] | None) -> None:
        """Record a read of one partition (None: the whole table)."""
        if partition is None:
            self._footprint.read_whole_table = True
        else:
            self._footprint.read_partitions.add(partition_key(partition, self.read_snapshot.metadata.partition_by))

    def replace(self, partitions: list[PartitionKey] | None) -> None:
        """Make this a replace of ``partitions`` (None: whole table): read and remove all their files."""
        snap = self.read_snapshot
        self._footprint.replace = True
        if partitions is None:
            self._footprint.read_whole_table = True
        else:
            self._footprint.read_partitions.update(partitions)
        for f in snap.files.values():
            if self._footprint.reads(f):
                self._footprint.read_files.add(f.path)
                self.remove(f)

    def set_metadata(self, metadata: Metadata) -> None:
        self._metadata = metadata

    def set_app_transaction(self, app_id: str, version: int) -> None:
        self._app_txn = Txn(app_id=app_id, version=version, last_updated=0)
        self._footprint.app_ids.add(app_id)

    @property
    def is_blind_append(self) -> bool:
        fp = self._footprint
        return (not self._removes and self._metadata is None and not fp.read_files
                and not fp.read_partitions and not fp.read_whole_table)

    # -- commit ---------------------------------------------------------------------------
    def commit(self, *, metrics: Mapping[str, Any] | None = None,
               parameters: Mapping[str, Any] | None = None) -> int:
        """Commit, retrying on lost races; returns the committed version.

        Raises:
            CommitConflictError: a subclass naming the conflicting version and operation.
            CommitRetriesExhaustedError: lost the race more often than the retry policy allows.
        """
        if self._committed is not None:
            return self._committed
        fp = self._footprint
        fp.removes = set(self._removes)
        fp.data_change = any(a.data_change for a in self._adds) or any(
            r.data_change for r in self._removes.values()) or self._metadata is not None
        blind = self.is_blind_append
        rng = random.Random()
        started = time.monotonic()
        checked = self.read_snapshot.version
        latest = self.read_snapshot
        while True:
            self.attempts += 1
            version = checked + 1
            actions = self._actions(version, latest, blind, metrics, parameters)
            if self.table.log.try_commit(version, actions):
                if self.table.log.landed(version, actions):
                    self._committed = version
                    self.table._after_commit(version, latest, actions)
                    return version
                # Published into the reclaimed past (see TableLog.landed): invisible, so take it back and
                # rebase on the latest state, as after a lost race.
                self.table.log.delete_commit(version)
            elif self.attempts >= self.retry.max_attempts or time.monotonic() - started > self.retry.total_timeout:
                raise CommitRetriesExhaustedError(
                    f"table {self.table.uri}: {self.operation} lost the race for a version {self.attempts} times "
                    f"in {time.monotonic() - started:.1f}s; retry later, or allow more attempts (RetryPolicy; "
                    "the commit settings of maintd's config)"
                )
            else:
                time.sleep(self.retry.delay(self.attempts, rng))
            newest = self.table.snapshot()
            done = self._check_winners(latest, newest)
            if done is not None:
                self._committed = done
                return done
            checked, latest = newest.version, newest
            self._rebase_removes(latest)

    def _check_winners(self, checked: Snapshot, newest: Snapshot) -> int | None:
        """Check this transaction against every commit after ``checked`` up to ``newest``.

        Returns the version of this transaction's own earlier attempt if one of them is it. When
        reclamation deleted some of those commits meanwhile, the two states stand in for them.
        """
        fp = self._footprint
        winners = [(v, self.table.log.read_commit(v)) for v in range(checked.version + 1, newest.version + 1)]
        if any(actions is None for _, actions in winners):
            self.conflicts_checked += 1
            check_winner(fp, state_change(checked, newest), self.txn_id)
            return None
        for v, actions in winners:
            assert actions is not None
            self.conflicts_checked += 1
            outcome = check_winner(fp, WinningCommit.from_actions(v, actions), self.txn_id)
            if isinstance(outcome, AlreadyCommitted):
                return outcome.version
        return None

    def _rebase_removes(self, latest: Snapshot) -> None:
        """Bring the remove set in line with the footprint after a replace was rebased."""
        fp = self._footprint
        for path in list(self._removes):
            if path not in fp.removes:
                del self._removes[path]
        for path in fp.removes - set(self._removes):
            live = latest.files.get(path)
            if live is not None:
                self._removes[path] = RemoveFile(path=path, deletion_time=0, data_change=True,
                                                 partition=live.partition, bucket=live.bucket, bytes=live.bytes)

    def _actions(self, version: int, latest: Snapshot, blind: bool, metrics: Mapping[str, Any] | None,
                 parameters: Mapping[str, Any] | None) -> list[Action]:
        ts = max(now_ms(), latest.timestamp + 1)
        info = CommitInfo(operation=self.operation, timestamp=ts, txn_id=self.txn_id,
                          read_version=self.read_snapshot.version, isolation_level=self.isolation_level,  # type: ignore[arg-type]
                          is_blind_append=blind, operation_parameters=dict(parameters or {}),
                          metrics=dict(metrics or {}))
        actions: list[Action] = [info]
        if self._metadata is not None:
            actions.append(self._metadata)
        if self._app_txn is not None:
            actions.append(self._app_txn.model_copy(update={"last_updated": ts}))
        actions += [r.model_copy(update={"deletion_time": ts}) for r in self._removes.values()]
        for a in self._adds:
            update: dict[str, Any] = {"modification_time": ts}
            if not a.carries_versions:
                update |= {"min_version": version, "max_version": version, "min_commit_time": ts,
                           "max_commit_time": ts}
            actions.append(a.model_copy(update=update))
        return actions
