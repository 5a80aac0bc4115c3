"""Optimistic transactions: record what was read and changed, then commit with conflict checks and retries.

The commit loop (as Delta Lake's ``doCommitRetryIteratively``, with the backoff delta-rs lacks):

1. try to publish ``read_version + 1`` with put-if-absent (never when the commit it builds on was
   reclaimed meanwhile: that would publish into removed history);
2. settle what the attempt did (:mod:`maintd.table.log.landing`): **landed**, **not landed**, or **unknown**,
   by finding this transaction's own id at that version in the table's history, never by assumption;
3. if it did not land, wait (exponential backoff with jitter), read every commit since the last one
   checked, and check this transaction against each (:mod:`maintd.table.log.conflicts`);
4. retry at ``latest + 1``, until the attempts or the total time of the retry policy run out.

Every error this raises after the first publish says which of the three it is: a
:class:`~maintd.errors.CommitConflictError` or :class:`~maintd.errors.CommitRetriesExhaustedError` means no
attempt landed (the caller may delete the data files it wrote for it); a
:class:`~maintd.errors.CommitStateUnknownError` means one may have (nothing may be deleted). Writers'
level-0 files take the version of the attempt that lands as their row version.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar
from typing import Protocol as TypingProtocol

from maintd.errors import CommitRetriesExhaustedError, InvalidInputError, TableReplacedError
from maintd.table.log import features
from maintd.table.log.actions import (
    Action,
    AddFile,
    CommitInfo,
    Expire,
    IsolationLevel,
    Metadata,
    Pin,
    PriorRows,
    Protocol,
    RemoveFile,
    Txn,
    Unpin,
)
from maintd.table.log.commitfile import format_for
from maintd.table.log.conflicts import AlreadyCommitted, TxnFootprint, WinningCommit, check_winner, state_change
from maintd.table.log.landing import STORAGE_ERRORS, Attempt
from maintd.table.log.retry import Budget, RetryPolicy
from maintd.table.log.snapshot import PartitionKey, Snapshot, partition_key
from maintd.table.log.tablelog import TableLog
from maintd.table.log.timeline import now_ms

T = TypeVar("T")

FRESH_BASE_SECONDS = 10.0
"""A writer whose state is the commit it made itself (or looked up) less than this long ago prepares its next
write on that state without a lookup; well inside the ten minutes for which the transaction records of every
commit are kept."""

LOOKED_UP_SECONDS = 1.0
"""A base found as the latest version by a lookup of the log that started less than this long ago is published on
without first reading the commit it builds on again (the landing check after the publish decides in every case).
Any other base (a writer's own last commit, a maintenance run's read version) is checked first. Its commit must
still carry the transaction id the base recorded, so that no commit is published above a gap or into another
incarnation of the table (one dropped and created again, or rolled back)."""


class StaleRead(Exception):
    """A transaction prepared on a cached state lost its first attempt and the table's metadata changed since:
    nothing landed; prepare it again on the latest state.

    A signal between :class:`Transaction` and ``Table._write``, which always catches it, not an error a caller
    ever sees: so it stands outside the :class:`~maintd.errors.MaintdError` tree."""


class CommitTarget(TypingProtocol):
    """What a transaction needs of the table it commits to (:class:`maintd.table.Table` is one): its log, its
    retry policy, its latest state, and a hook told of every commit that landed (to keep its cached state)."""

    log: TableLog
    retry_policy: RetryPolicy

    @property
    def uri(self) -> str: ...

    def snapshot(self, version: int | None = None) -> Snapshot: ...

    def reload(self) -> Snapshot: ...

    def looked_up_within(self, version: int, seconds: float) -> bool: ...

    def committed(self, version: int, base: Snapshot, actions: Sequence[Action], *,
                  published_after: float | None = None) -> None: ...


class Transaction:
    """One optimistic transaction against a table. Build it, then call :meth:`commit` once.

    Raises:
        UnsupportedProtocolError: (when built) the table needs a newer writer than this code.
    """

    def __init__(self, table: CommitTarget, operation: str, *, read_snapshot: Snapshot | None = None,
                 isolation_level: IsolationLevel | None = None, retry: RetryPolicy | None = None,
                 unconfirmed_read: bool = False) -> None:
        self.table = table
        self.unconfirmed_read = unconfirmed_read
        """The read snapshot was not looked up for this transaction (a writer's cached latest state): if the first
        attempt loses and the table's schema, properties or protocol have changed since, :class:`StaleRead`
        is raised (nothing landed) so that the caller can start again from the latest state."""
        self.operation = operation
        self.read_snapshot = read_snapshot or table.snapshot()
        self.read_snapshot.check_writable(table.uri)
        self.txn_id = uuid.uuid4().hex
        self.retry = retry or table.retry_policy
        level = isolation_level or self.read_snapshot.isolation_level
        self._adds: list[AddFile] = []
        self._removes: dict[str, RemoveFile] = {}
        self._metadata: Metadata | None = None
        self._protocol: Protocol | None = None
        self._app_txn: Txn | None = None
        self._pins: list[Pin] = []
        self._unpins: list[Unpin] = []
        self._expire: tuple[int | None, int | None] | None = None
        self._priors: list[PriorRows] = []
        self._footprint = TxnFootprint(level, self.read_snapshot.metadata.partition_by)
        self._committed: int | None = None
        self._rng = random.Random()
        self.attempts = 0
        self.conflicts_checked = 0
        self.ambiguous = 0
        """Publishes whose answer was lost (the storage raised), each settled by reading the log."""

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

    def add_prior(self, prior: PriorRows) -> None:
        """Record a prior-rows file (docs/format.md, "Prior rows"). A compaction's answers for BaseFiles this
        transaction removes (feature ``priorRows``): its ``deletion_time`` becomes this commit's time, as the
        removes' does. A looked-up one (``prior.lookup``, feature ``lookedUpPriorRows``) answers for BaseFiles
        that stay live: it has no deletion time until a later commit removes one of them, and this commit
        conflicts with a concurrent one that removes any of them.

        Raises:
            InvalidInputError: the table lacks the file's feature, or the file answers for a BaseFile this
                transaction does not remove (a compaction's) or that is not live or that it removes (a
                looked-up one), checked at commit.
        """
        needed = features.LOOKED_UP_PRIOR_ROWS if prior.lookup else features.PRIOR_ROWS
        protocol = self._protocol or self.read_snapshot.protocol
        if not features.supports(protocol, needed):
            raise InvalidInputError(
                f"table {self.table.uri} (protocol {features.describe(protocol)}) lacks feature {needed} "
                f"({features.REGISTRY[needed].description}); set the table property changes.prior.rows to "
                f"{'lookup' if prior.lookup else 'true'}")
        self._priors.append(prior)

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

    def pin(self, pin: Pin) -> None:
        """Record a pin (tables with feature ``pins``); it conflicts with a concurrent commit expiring its version."""
        self._pins.append(pin)
        self._footprint.pins.add(pin.version)

    def unpin(self, pin_id: str, reason: str = "") -> None:
        """Record the removal of pin ``pin_id`` (removing a pin never conflicts)."""
        self._unpins.append(Unpin(id=pin_id, reason=reason))

    def expire(self, before: int | None, timestamp: int | None = None) -> None:
        """Record that this commit expires every version before ``before`` (None: before this commit's own
        version, as a PURGE does). It conflicts with a concurrent pin of such a version."""
        self._expire = (before, timestamp)
        self._footprint.expires_before = before if before is not None else 2**63

    @property
    def is_blind_append(self) -> bool:
        fp = self._footprint
        return (not self._removes and not self._pins and not self._unpins and self._expire is None
                and self._metadata is None and self._protocol is None and not fp.read_files
                and not fp.read_partitions and not fp.read_whole_table)

    def require_feature(self, feature: str) -> None:
        """Enable ``feature`` in this commit unless the table supports it already
        (:func:`maintd.table.log.features.require`: a legacy table is raised to the version that implies it, a
        table on named features gains exactly it and what it depends on)."""
        raised = features.require(self._protocol or self.read_snapshot.protocol, feature)
        if raised is not None:
            self.set_protocol(raised)

    def set_protocol(self, protocol: Protocol) -> None:
        """Change the table's protocol (an upgrade): every concurrent transaction then conflicts."""
        self._protocol = protocol

    # -- commit ---------------------------------------------------------------------------
    def commit(self, *, metrics: Mapping[str, Any] | None = None,
               parameters: Mapping[str, Any] | None = None) -> int:
        """Commit, retrying on lost races; returns the version at which it landed.

        Raises:
            CommitConflictError: a subclass naming the conflicting version and operation; nothing landed.
            CommitRetriesExhaustedError: lost the race (or the storage kept failing) more often than the retry
                policy allows; nothing landed.
            CommitStateUnknownError: an attempt may have landed and the log cannot tell any more whether it
                did (the storage kept failing): nothing may be deleted, and retrying may apply it twice.
        """
        if self._committed is not None:
            return self._committed
        self._check_features()
        fp = self._footprint
        for prior in self._priors:
            if prior.lookup:
                stray = sorted(p for p in prior.of if p in self._removes or p not in self.read_snapshot.files)
                if stray:
                    raise InvalidInputError(
                        f"table {self.table.uri}: looked-up prior-rows file {prior.path} answers for {stray}, "
                        f"which this commit removes or version {self.read_snapshot.version} does not hold")
                fp.keeps.update(prior.of)
            elif not set(prior.of) <= self._removes.keys():
                raise InvalidInputError(
                    f"table {self.table.uri}: prior-rows file {prior.path} answers for "
                    f"{sorted(set(prior.of) - self._removes.keys())}, which this commit does not remove")
        fp.removes = set(self._removes)
        fp.metadata = self._metadata is not None
        fp.data_change = any(a.data_change for a in self._adds) or any(
            r.data_change for r in self._removes.values()) or self._metadata is not None
        blind = self.is_blind_append
        budget = Budget(self.retry, self._rng)
        latest = self.read_snapshot
        while True:
            self.attempts += 1
            version = latest.version + 1
            actions = self._actions(version, latest, blind, metrics, parameters)
            started = time.monotonic()
            if self._attempt(version, actions, latest, budget):
                self._committed = version
                self.table.committed(version, latest, actions, published_after=started)
                return version
            if not budget.spent(self.attempts):
                budget.pause(self.attempts)
            newest = self._retrying(self.table.snapshot, budget)
            if newest.version <= latest.version:
                # The attempt did not land, yet the table did not move past its base: the state in memory may be
                # the base itself, taken for the latest at the same version of another incarnation. Load afresh.
                newest = self._retrying(self.table.reload, budget)
            replaced = (newest.metadata.table_id != self.read_snapshot.metadata.table_id
                        or newest.version < latest.version)
            if self.unconfirmed_read and self.attempts == 1 and (
                    replaced or newest.metadata != latest.metadata or newest.protocol != latest.protocol):
                raise StaleRead(f"table {self.table.uri}: version {latest.version}, which {self.operation} was "
                                f"prepared on, is not the latest and the table's metadata changed since")
            if replaced:
                raise TableReplacedError(
                    f"table {self.table.uri}: {self.operation} read table {self.read_snapshot.metadata.table_id} at "
                    f"version {self.read_snapshot.version}, but the table there is now table "
                    f"{newest.metadata.table_id} at version {newest.version} (dropped and created again, or rolled "
                    "back); nothing of it landed. Read the table again and decide whether the change still applies",
                    version=newest.version, winning_operation=None)
            done = self._retrying(lambda: self._check_winners(latest, newest), budget)  # noqa: B023
            if done is not None:
                self._committed = done
                return done
            latest = newest
            self._rebase_removes(latest)
            if budget.spent(self.attempts):
                raise CommitRetriesExhaustedError(
                    f"table {self.table.uri}: {self.operation} lost the race for a version {self.attempts} times "
                    f"in {budget.elapsed:.1f}s; nothing of it landed; retry later, or allow more attempts "
                    "(RetryPolicy; the commit settings of maintd's config)"
                )

    def _check_features(self) -> None:
        """A commit holds only what the table's protocol (after this commit) supports: pins and unpins need feature
        ``pins``, a schema with added columns ``addedColumns`` (prior-rows files are checked as they are added)."""
        protocol = self._protocol or self.read_snapshot.protocol
        needed = []
        if self._pins or self._unpins:
            needed.append(features.PINS)
        if self._metadata is not None and any(f.added for f in self._metadata.fields):
            needed.append(features.ADDED_COLUMNS)
        missing = [n for n in needed if not features.supports(protocol, n)]
        if missing:
            raise InvalidInputError(
                f"table {self.table.uri} (protocol {features.describe(protocol)}) lacks feature "
                f"{', '.join(f'{n} ({features.REGISTRY[n].description})' for n in missing)}: "
                f"{self.operation} cannot commit what needs it")

    def _attempt(self, version: int, actions: list[Action], base: Snapshot, budget: Budget) -> bool:
        """Publish ``version`` on top of ``base`` and settle it: True if it landed, False if it certainly did not."""
        log = self.table.log
        protocol = self._protocol or base.protocol
        attempt = Attempt(log, txn_id=self.txn_id, operation=self.operation, base=base, version=version,
                          actions=actions, fmt=format_for(protocol), retry=self.retry,
                          rng=self._rng)
        # The commit it builds on must still be the one the base recorded, or the publish would land above a gap
        # (the table was dropped and created again, or rolled back), in another incarnation of the table, or in
        # history reclamation removed. The landing check after the publish catches the last in every case (it
        # reads commit version - 1 back); only a base a lookup found a moment ago is published on unread.
        if (version > 0 and not self.table.looked_up_within(version - 1, LOOKED_UP_SECONDS)
                and not self._retrying(attempt.base_stands, budget)):
            return False
        try:
            return attempt.run()
        finally:
            self.ambiguous += attempt.ambiguous

    def _retrying(self, fn: Callable[[], T], budget: Budget) -> T:
        """``fn``, retried on storage errors, at a point where no attempt of this transaction has landed."""
        while True:
            try:
                return fn()
            except STORAGE_ERRORS as exc:
                if budget.spent():
                    raise CommitRetriesExhaustedError(
                        f"table {self.table.uri}: {self.operation} did not land: the storage kept failing "
                        f"({exc}); retry later"
                    ) from exc
                budget.pause()

    def _check_winners(self, checked: Snapshot, newest: Snapshot) -> int | None:
        """Check this transaction against every commit after ``checked`` up to ``newest``.

        Returns the version of this transaction's own earlier attempt if one of them is it. When
        reclamation deleted some of those commits meanwhile (or ``checked`` itself: then the commits read
        may stand in history it removed), the two states stand in for them.
        """
        fp = self._footprint
        log = self.table.log
        winners = [(v, log.read_commit(v)) for v in range(checked.version + 1, newest.version + 1)]
        anchor = checked.txn_at(checked.version)
        reliable = not winners or (anchor is not None and log.read_commit_txn(checked.version) == anchor)
        if not reliable or any(actions is None for _, actions in winners):
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
        params = dict(parameters or {})
        expire: Expire | None = None
        if self._expire is not None:
            before = self._expire[0] if self._expire[0] is not None else version
            mark_ts = self._expire[1] if self._expire[1] is not None else ts
            if features.supports(self._protocol or latest.protocol, features.PINS):
                expire = Expire(before=before, timestamp=mark_ts)
            else:  # tables without pins: their readers may know no expire action; the parameters carry it
                params |= {"oldest_retained_version": before, "retained_timestamp": mark_ts}
        info = CommitInfo(operation=self.operation, timestamp=ts, txn_id=self.txn_id,
                          read_version=self.read_snapshot.version, isolation_level=self.isolation_level,  # type: ignore[arg-type]
                          is_blind_append=blind, operation_parameters=params,
                          metrics=dict(metrics or {}))
        actions: list[Action] = [info]
        if self._protocol is not None:
            actions.append(self._protocol)
        if self._metadata is not None:
            actions.append(self._metadata)
        if self._app_txn is not None:
            actions.append(self._app_txn.model_copy(update={"last_updated": ts}))
        actions += self._pins
        actions += self._unpins
        if expire is not None:
            actions.append(expire)
        actions += [r.model_copy(update={"deletion_time": ts}) for r in self._removes.values()]
        actions += [p if p.lookup else p.model_copy(update={"deletion_time": ts}) for p in self._priors]
        for a in self._adds:
            update: dict[str, Any] = {"modification_time": ts}
            if not a.carries_versions:
                update |= {"min_version": version, "max_version": version, "min_commit_time": ts,
                           "max_commit_time": ts}
            actions.append(a.model_copy(update=update))
        return actions
