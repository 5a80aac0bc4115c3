"""Snapshots: the immutable state of a table at one version, and the pure replay that builds them."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from urllib.parse import quote

from maintd.table import properties as props
from maintd.table.actions import Action, AddFile, CommitInfo, Metadata, Protocol, RemoveFile, Txn

PartitionKey = tuple[tuple[str, str | None], ...]
"""A partition as a hashable tuple of (column, value) in ``partition_by`` order; () if unpartitioned."""


def partition_key(partition: Mapping[str, str | None], partition_by: Iterable[str]) -> PartitionKey:
    return tuple((c, partition.get(c)) for c in partition_by)


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

    @classmethod
    def from_snapshot(cls, s: Snapshot) -> SnapshotBuilder:
        return cls(s.version, s.timestamp, s.protocol, s.metadata, dict(s.files), dict(s.tombstones),
                   dict(s.app_txns))

    def apply(self, version: int, actions: Iterable[Action]) -> None:
        """Apply one commit's actions in order (an add after a remove of the same path revives it)."""
        for a in actions:
            if isinstance(a, AddFile):
                self.files[a.path] = a
                self.tombstones.pop(a.path, None)
            elif isinstance(a, RemoveFile):
                if self.files.pop(a.path, None) is not None:
                    self.tombstones[a.path] = a
            elif isinstance(a, Metadata):
                self.metadata = a
            elif isinstance(a, Protocol):
                self.protocol = a
            elif isinstance(a, Txn):
                self.app_txns[a.app_id] = a.version
            elif isinstance(a, CommitInfo):
                self.timestamp = a.timestamp
        self.version = version

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
        )
