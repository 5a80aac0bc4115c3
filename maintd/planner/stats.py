"""Per-(partition, bucket) statistics of a snapshot: the only facts the planner decides from.

Pure: built from a :class:`~maintd.table.log.snapshot.Snapshot` and ``now`` (epoch ms), nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from maintd.errors import InvalidInputError
from maintd.table.log.actions import AddFile
from maintd.table.log.snapshot import PartitionKey, Snapshot, format_partition

MS_PER_HOUR = 3_600_000


def to_ms(now: datetime) -> int:
    """Epoch milliseconds of an aware datetime (naive datetimes are rejected: plans must be replayable)."""
    if now.tzinfo is None:
        raise InvalidInputError(f"the planner's now ({now.isoformat()}) has no time zone: give an aware datetime "
                                "(e.g. datetime.now(timezone.utc)); a naive one would be read as local time")
    return int(now.timestamp() * 1000)


def hours(ms: int) -> float:
    return ms / MS_PER_HOUR


@dataclass(frozen=True, slots=True)
class KindStats:
    """Files, bytes, rows and delete rows of one kind/level (``base``, ``L0``, ``L1``, ``L2``)."""

    files: int = 0
    bytes: int = 0
    rows: int = 0
    delete_rows: int = 0


@dataclass(frozen=True)
class BucketStats:
    """Everything the planner knows about one (partition, bucket) at ``now_ms``.

    ``deltas`` are ordered by (min_version, max_version, path), the order contiguity is defined in.
    ``compaction_clock_ms`` is when the bucket was last compacted (the newest BaseFile's
    ``modification_time``), or the oldest DeltaFile's ``min_commit_time`` if it never was.
    """

    partition: PartitionKey
    bucket: int
    now_ms: int
    bases: tuple[AddFile, ...]
    deltas: tuple[AddFile, ...]
    by_kind: dict[str, KindStats] = field(default_factory=dict)
    compaction_clock_ms: int | None = None
    retain_hours: int = 24
    pinned_until_ms: int | None = None
    """When the table's last live pin expires (None: no live pin). While pins hold history back, reclamation
    keeps every file removed after the oldest pinned version, so a compaction frees nothing before then."""

    @property
    def label(self) -> str:
        return f"{format_partition(self.partition)} bucket {self.bucket}"

    @property
    def base_bytes(self) -> int:
        return sum(f.bytes for f in self.bases)

    @property
    def delta_bytes(self) -> int:
        return sum(f.bytes for f in self.deltas)

    @property
    def delta_rows(self) -> int:
        return sum(f.rows for f in self.deltas)

    @property
    def delete_rows(self) -> int:
        return sum(f.delete_rows for f in self.deltas)

    @property
    def base_max_version(self) -> int:
        return max((f.max_version for f in self.bases), default=-1)

    @property
    def deltas_on_base(self) -> tuple[AddFile, ...]:
        """DeltaFiles whose rows are all newer than the BaseFile(s): what a reader merges on top."""
        top = self.base_max_version
        return tuple(f for f in self.deltas if f.min_version > top)

    @property
    def delete_share(self) -> float:
        rows = self.delta_rows
        return self.delete_rows / rows if rows else 0.0

    @property
    def oldest_delta_age_ms(self) -> int | None:
        if not self.deltas:
            return None
        return self.now_ms - min(f.min_commit_time for f in self.deltas)

    @property
    def since_compaction_ms(self) -> int | None:
        return None if self.compaction_clock_ms is None else self.now_ms - self.compaction_clock_ms

    @property
    def expired_deltas(self) -> tuple[AddFile, ...]:
        """DeltaFiles older than ``acid.data.retain.hours``: only compaction can free them."""
        cutoff = self.now_ms - self.retain_hours * MS_PER_HOUR
        return tuple(f for f in self.deltas if f.max_commit_time < cutoff)

    @property
    def max_file_span_ms(self) -> int:
        return max((f.max_commit_time - f.min_commit_time for f in self.deltas), default=0)


def _by_kind(files: Sequence[AddFile]) -> dict[str, KindStats]:
    acc: dict[str, list[int]] = {}
    for f in files:
        k = "base" if f.kind == "base" else f"L{f.level}"
        a = acc.setdefault(k, [0, 0, 0, 0])
        a[0] += 1
        a[1] += f.bytes
        a[2] += f.rows
        a[3] += f.delete_rows
    return {k: KindStats(*v) for k, v in sorted(acc.items())}


def bucket_stats_of(partition: PartitionKey, bucket: int, files: Sequence[AddFile], now_ms: int,
                    retain_hours: int = 24, pinned_until_ms: int | None = None) -> BucketStats:
    """Statistics of one bucket's live files (any order)."""
    ordered = sorted(files, key=lambda f: (f.min_version, f.max_version, f.path))
    bases = tuple(f for f in ordered if f.kind == "base")
    deltas = tuple(f for f in ordered if f.kind == "delta")
    if bases:
        clock: int | None = max(f.modification_time for f in bases)
    else:
        clock = min((f.min_commit_time for f in deltas), default=None)
    return BucketStats(partition, bucket, now_ms, bases, deltas, _by_kind(ordered), clock, retain_hours,
                       pinned_until_ms)


def bucket_stats(snapshot: Snapshot, now: datetime) -> list[BucketStats]:
    """Statistics of every (partition, bucket) of a snapshot, ordered by (partition, bucket)."""
    now_ms = to_ms(now)
    retain = snapshot.retain_hours
    groups = snapshot.by_bucket()
    pinned_until = max((p.expires for p in snapshot.live_pins(now_ms)), default=None)
    return [bucket_stats_of(p, b, groups[(p, b)], now_ms, retain, pinned_until)
            for p, b in sorted(groups, key=lambda k: (_sort_key(k[0]), k[1]))]


def _sort_key(p: PartitionKey) -> tuple[tuple[str, bool, str], ...]:
    return tuple((c, v is None, v or "") for c, v in p)
