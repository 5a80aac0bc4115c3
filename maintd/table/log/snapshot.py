"""Snapshots: the immutable state of a table at one version, and the pure replay that builds them."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TypeVar
from urllib.parse import quote

from maintd.errors import UnsupportedProtocolError
from maintd.table.log import features
from maintd.table.log import properties as props
from maintd.table.log.actions import (
    READER_VERSION,
    WRITER_VERSION,
    Action,
    AddFile,
    CommitInfo,
    Expire,
    Metadata,
    Pin,
    PriorRows,
    Protocol,
    RemoveFile,
    Txn,
    Unpin,
    expired_by,
)

PartitionKey = tuple[tuple[str, str | None], ...]
"""A partition as a hashable tuple of (column, value) in ``partition_by`` order; () if unpartitioned."""

TxnRecord = tuple[str, int]
"""The transaction id and commit time (ms) of one version: what proves which commit stands there."""
TXN_WINDOW_MS = 10 * 60_000
"""Transaction records younger than this (by commit time, from the snapshot's) are always kept, so a
committer that stalls for minutes between publishing and checking still finds its own record."""
TXN_RECORDS_MAX = 2_000
"""At most this many transaction records are kept (the newest; two checkpoint intervals if that is more),
whatever the commit rate: about 100 KB in a checkpoint."""


def partition_key(partition: Mapping[str, str | None], partition_by: Iterable[str]) -> PartitionKey:
    return tuple((c, partition.get(c)) for c in partition_by)


_Grouped = TypeVar("_Grouped", AddFile, PriorRows)


def by_group(items: Iterable[_Grouped], partition_by: Iterable[str]) -> dict[tuple[PartitionKey, int], list[_Grouped]]:
    """``items`` (files or prior-rows files) grouped by (partition, bucket), in the order given."""
    cols = tuple(partition_by)
    groups: dict[tuple[PartitionKey, int], list[_Grouped]] = defaultdict(list)
    for item in items:
        groups[(partition_key(item.partition, cols), item.bucket)].append(item)
    return dict(groups)


def partition_path(partition: Mapping[str, str | None], partition_by: Iterable[str]) -> str:
    """The directory of a partition below the table root, e.g. ``ds=2024-01-01`` (values URL-quoted)."""
    parts = []
    for c in partition_by:
        v = partition.get(c)
        parts.append(f"{c}={'__NULL__' if v is None else quote(v, safe='')}")
    return "/".join(parts)


def format_partition(key: PartitionKey) -> str:
    return ",".join(f"{c}={v}" for c, v in key) if key else "(unpartitioned)"


@dataclass(frozen=True)
class Snapshot:
    """The state of a table at ``version``: live files, tombstones, metadata and app transactions.

    Built only by :func:`replay`; never mutated. ``files`` maps a path to its ``add`` action.
    ``tombstones`` holds ``remove`` actions whose files may still be on storage (reclamation
    deletes them once no retained version needs them).
    """

    version: int
    timestamp: int
    protocol: Protocol
    metadata: Metadata
    files: Mapping[str, AddFile]
    tombstones: Mapping[str, RemoveFile] = field(default_factory=dict)
    app_txns: Mapping[str, int] = field(default_factory=dict)
    txns: Mapping[int, TxnRecord] = field(default_factory=dict)
    """Transaction records of the newest versions, dense up to ``version`` (docs/format.md, "Snapshots and
    checkpoints")."""
    base_checkpoint: int = -1
    """The checkpoint this state was loaded from or last written as (-1: none)."""
    pins: Mapping[str, Pin] = field(default_factory=dict)
    """Pins by id, expired ones too until a commit removes them (feature ``pins``; docs/format.md, "Pins")."""
    expired: Expire | None = None
    """The newest ``expire`` record: versions before ``expired.before`` were expired by reclamation."""
    priors: Mapping[str, PriorRows] = field(default_factory=dict)
    """Prior-rows files by path (feature ``priorRows``), kept as long as the tombstones of the BaseFiles they
    answer for (docs/format.md, "Prior rows")."""

    def priors_of(self, path: str) -> list[PriorRows]:
        """The prior-rows files that answer for BaseFile ``path`` (none if it was never compacted away)."""
        return [p for p in self.priors.values() if path in p.of]

    def referenced(self) -> set[str]:
        """Every data-area path an entry of this state names: live files, tombstones, prior-rows files."""
        return {*self.files, *self.tombstones, *self.priors}

    @property
    def expired_before(self) -> int:
        """Versions before this were expired by a recorded reclamation (0: none recorded)."""
        return self.expired.before if self.expired is not None else 0

    def live_pins(self, now_ms: int) -> list[Pin]:
        """The pins that hold at ``now_ms``, oldest version first."""
        return sorted((p for p in self.pins.values() if p.live(now_ms)), key=lambda p: (p.version, p.id))

    def txn_at(self, version: int) -> str | None:
        """The transaction id of the commit at ``version`` in this state's history, None if not recorded."""
        record = self.txns.get(version)
        return None if record is None else record[0]

    @property
    def txn_from(self) -> int | None:
        """The oldest version with a transaction record (records are dense from it to ``version``)."""
        return min(self.txns) if self.txns else None

    def check_writable(self, uri: str) -> None:
        """Refuse to write a table whose protocol needs a newer writer, or that uses a feature this code does not
        know, reader or writer feature (:class:`UnsupportedProtocolError`, naming the version or the features)."""
        required = features.unsupported_version(self.protocol, write=True)
        if required is not None:
            raise UnsupportedProtocolError(
                f"table {uri} requires writer protocol version {required}; this maintd writes up to version "
                f"{WRITER_VERSION}: upgrade maintd to write (or maintain) this table",
                required=required, supported=WRITER_VERSION,
            )
        unknown = features.unknown_writer_features(self.protocol)
        if unknown:
            raise unsupported_features(uri, unknown, required=self.protocol.min_writer_version,
                                       supported=WRITER_VERSION, write=True)

    @property
    def properties(self) -> Mapping[str, str]:
        return self.metadata.properties

    @property
    def retain_hours(self) -> int:
        return props.get_int(self.metadata.properties, props.RETAIN_HOURS)

    @property
    def isolation_level(self) -> str:
        return props.isolation_level(self.metadata.properties)

    @property
    def stores_prior_rows(self) -> bool:
        """Compactions of this table write prior-rows files (``changes.prior.rows`` set, feature ``priorRows``)."""
        return props.prior_rows(self.metadata.properties) and features.supports(self.protocol, features.PRIOR_ROWS)

    @property
    def looks_up_prior_rows(self) -> bool:
        """Clusterings of this table also write looked-up prior-rows files (``changes.prior.rows=lookup``,
        feature ``lookedUpPriorRows``)."""
        return (props.lookup_prior_rows(self.metadata.properties)
                and features.supports(self.protocol, features.LOOKED_UP_PRIOR_ROWS))

    @property
    def checkpoint_interval(self) -> int:
        return props.get_int(self.metadata.properties, props.CHECKPOINT_INTERVAL)

    def partition_of(self, f: AddFile) -> PartitionKey:
        return partition_key(f.partition, self.metadata.partition_by)

    def by_bucket(self) -> dict[tuple[PartitionKey, int], list[AddFile]]:
        """Live files grouped by (partition, bucket), each list ordered by (min_version, path)."""
        groups: dict[tuple[PartitionKey, int], list[AddFile]] = defaultdict(list)
        for f in self.files.values():
            groups[(self.partition_of(f), f.bucket)].append(f)
        for files in groups.values():
            files.sort(key=lambda f: (f.min_version, f.max_version, f.path))
        return dict(groups)

    def total_bytes(self) -> int:
        return sum(f.bytes for f in self.files.values())


@dataclass
class SnapshotBuilder:
    """Mutable accumulator used while replaying a checkpoint and the commits after it."""

    version: int = -1
    timestamp: int = 0
    protocol: Protocol | None = None
    metadata: Metadata | None = None
    files: dict[str, AddFile] = field(default_factory=dict)
    tombstones: dict[str, RemoveFile] = field(default_factory=dict)
    app_txns: dict[str, int] = field(default_factory=dict)
    txns: dict[int, TxnRecord] = field(default_factory=dict)
    base_checkpoint: int = -1
    pins: dict[str, Pin] = field(default_factory=dict)
    expired: Expire | None = None
    priors: dict[str, PriorRows] = field(default_factory=dict)
    _waiting: dict[str, set[str]] | None = None
    """BaseFile path -> the looked-up prior-rows files that answer for it and have no deletion time yet
    (built on the first remove that needs it)."""

    @classmethod
    def from_snapshot(cls, s: Snapshot) -> SnapshotBuilder:
        return cls(s.version, s.timestamp, s.protocol, s.metadata, dict(s.files), dict(s.tombstones),
                   dict(s.app_txns), dict(s.txns), s.base_checkpoint, dict(s.pins), s.expired, dict(s.priors))

    def apply(self, version: int, actions: Iterable[Action]) -> None:
        """Apply one commit's actions in order (an add after a remove of the same path revives it).

        Raises:
            UnsupportedProtocolError: the commit raises the reader protocol above what this code reads.
        """
        txn_id = ""
        seen = list(actions)
        for a in seen:
            if isinstance(a, AddFile):
                self.files[a.path] = a
                self.tombstones.pop(a.path, None)
            elif isinstance(a, RemoveFile):
                if self.files.pop(a.path, None) is not None:
                    self.tombstones[a.path] = a
                    self._detach(a)
            elif isinstance(a, Metadata):
                self.metadata = a
            elif isinstance(a, Protocol):
                check_readable(a)
                self.protocol = a
            elif isinstance(a, Txn):
                self.app_txns[a.app_id] = a.version
            elif isinstance(a, CommitInfo):
                self.timestamp = a.timestamp
                txn_id = a.txn_id
            elif isinstance(a, Pin):
                self.pins[a.id] = a
            elif isinstance(a, Unpin):
                self.pins.pop(a.id, None)
            elif isinstance(a, PriorRows):
                self.priors[a.path] = a
                if self._waiting is not None:
                    self._wait(a)
        self.expire(expired_by(seen))
        self.txns[version] = (txn_id, self.timestamp)
        self.version = version

    def _detach(self, removed: RemoveFile) -> None:
        """A looked-up prior-rows file lives as long as its BaseFiles (docs/format.md, "Prior rows"): the first
        commit that removes one of them gives it its deletion time, as a compaction's own file gets it."""
        if self._waiting is None:
            self._waiting = {}
            for p in self.priors.values():
                self._wait(p)
        for path in self._waiting.pop(removed.path, ()):
            prior = self.priors.get(path)
            if prior is not None and prior.attached:
                self.priors[path] = prior.model_copy(update={"deletion_time": removed.deletion_time})

    def _wait(self, prior: PriorRows) -> None:
        """Index ``prior`` by its BaseFiles if it has no deletion time yet (:meth:`_detach`)."""
        assert self._waiting is not None
        if prior.attached:
            for base in prior.of:
                self._waiting.setdefault(base, set()).add(prior.path)

    def expire(self, mark: Expire | None) -> None:
        """Record an expire mark (the newest, by version, stands)."""
        if mark is not None and (self.expired is None or mark.before > self.expired.before):
            self.expired = mark

    def build(self) -> Snapshot:
        if self.metadata is None or self.protocol is None:
            raise ValueError("log has no metadata or protocol action before this version")
        return Snapshot(
            version=self.version,
            timestamp=self.timestamp,
            protocol=self.protocol,
            metadata=self.metadata,
            files=MappingProxyType(dict(self.files)),
            tombstones=MappingProxyType(dict(self.tombstones)),
            app_txns=MappingProxyType(dict(self.app_txns)),
            txns=MappingProxyType(self.kept_txns()),
            base_checkpoint=self.base_checkpoint,
            pins=MappingProxyType(dict(self.pins)),
            expired=self.expired,
            priors=MappingProxyType(dict(self.priors)),
        )

    def kept_txns(self) -> dict[int, TxnRecord]:
        """The transaction records worth keeping: every version since the base checkpoint or within the last
        two checkpoint intervals, and every commit of the last :data:`TXN_WINDOW_MS`; at most the newest
        :data:`TXN_RECORDS_MAX` (or two intervals). Versions and times increase together, so what is kept
        stays dense."""
        assert self.metadata is not None
        interval = props.get_int(self.metadata.properties, props.CHECKPOINT_INTERVAL)
        always = min(self.base_checkpoint, self.version - 2 * interval)  # versions above it are always kept
        at_most = self.version - max(TXN_RECORDS_MAX, 2 * interval)  # versions at or below it never are
        recent = self.timestamp - TXN_WINDOW_MS
        return {v: r for v, r in self.txns.items() if v > at_most and (v > always or r[1] >= recent)}


def unsupported_features(uri: str | None, unknown: tuple[str, ...], *, required: int, supported: int,
                         write: bool) -> UnsupportedProtocolError:
    """The refusal of a table that uses features this code does not know, naming every one of them."""
    what = "the table" if uri is None else f"table {uri}"
    noun = "feature" if len(unknown) == 1 else "features"
    does = "write (or maintain)" if write else "read"
    return UnsupportedProtocolError(
        f"{what} uses {noun} {', '.join(unknown)}, which this maintd does not support; upgrade maintd to {does} "
        "this table", required=required, supported=supported, features=unknown)


def check_readable(protocol: Protocol, uri: str | None = None) -> None:
    """Refuse a table whose protocol needs a newer reader, or that uses a reader feature this code does not know
    (:class:`UnsupportedProtocolError`, naming the version or the features)."""
    required = features.unsupported_version(protocol, write=False)
    if required is not None:
        raise UnsupportedProtocolError(
            f"the table requires reader protocol version {required}; this maintd reads up to version "
            f"{READER_VERSION}: upgrade maintd to read this table",
            required=required, supported=READER_VERSION,
        )
    unknown = features.unknown_reader_features(protocol)
    if unknown:
        raise unsupported_features(uri, unknown, required=protocol.min_reader_version, supported=READER_VERSION,
                                   write=False)
