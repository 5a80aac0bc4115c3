"""A table's write pattern, learned from its log: what writers committed, per bucket, and when.

The pattern is the *trace* of a learning window (by default the last 24 hours of writes): every writer commit
with, per (partition, bucket), the rows, delete rows and bytes it added. Replaying the trace shifted by whole
periods keeps what averages would lose: bursts, quiet nights, the buckets that are hot and those that are not,
and which buckets one commit touches together. Maintenance commits found in the window are kept as
:class:`MergeObservation` values: they show what real merges of this table produced (output rows and bytes
from given inputs), from which the size estimator learns (:mod:`maintd.simulate.sizes`).

The log is read through the public table API only (``Table.version``, ``Table.snapshot(version)`` and
``Table.log.read_commit(version)``), newest commit first, as far back as the window reaches or the log is
retained.
"""

from __future__ import annotations

import itertools
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from maintd.errors import InvalidInputError, VersionNotFoundError
from maintd.table import Table
from maintd.table.log.actions import Action, AddFile, CommitInfo, PriorRows, RemoveFile
from maintd.table.log.snapshot import PartitionKey, Snapshot, format_partition, partition_key

HOUR_MS = 3_600_000
BucketKey = tuple[PartitionKey, int]


@dataclass(frozen=True, slots=True)
class BucketWrite:
    """What one writer commit added to one (partition, bucket): level-0 DeltaFiles, their rows and bytes."""

    partition: PartitionKey
    bucket: int
    files: int
    rows: int
    delete_rows: int
    bytes: int

    @property
    def key(self) -> BucketKey:
        return self.partition, self.bucket


@dataclass(frozen=True, slots=True)
class WriterCommit:
    """One writer commit: its time, what it added per bucket, and the buckets it replaced (an overwrite)."""

    version: int
    time_ms: int
    writes: tuple[BucketWrite, ...]
    replaces: tuple[BucketKey, ...] = ()

    @property
    def bytes(self) -> int:
        return sum(w.bytes for w in self.writes)


@dataclass(frozen=True, slots=True)
class MergeObservation:
    """One bucket's share of a maintenance commit: the files it removed and the files it added."""

    time_ms: int
    partition: PartitionKey
    bucket: int
    inputs: tuple[AddFile, ...]
    outputs: tuple[AddFile, ...]
    prior_bytes: int = 0
    """Bytes of the prior-rows files the commit added for this bucket (tables with ``changes.prior.rows``)."""

    @property
    def kind(self) -> str:
        """``compact`` when a BaseFile came out (or nothing survived a merge that read one), else ``cluster``."""
        if any(f.kind == "base" for f in self.outputs) or (not self.outputs and any(
                f.kind == "base" for f in self.inputs)):
            return "compact"
        return "cluster"


@dataclass(frozen=True, slots=True)
class BucketRates:
    """The learned rates of one (partition, bucket), as the report shows them."""

    partition: PartitionKey
    bucket: int
    commits_per_hour: float
    rows_per_commit: float
    bytes_per_commit: float
    delete_share: float

    @property
    def label(self) -> str:
        return f"{format_partition(self.partition)} bucket {self.bucket}"


@dataclass(frozen=True)
class WritePattern:
    """The writes of one table over a learning window ``[start_ms, end_ms]``, and the merges seen in it.

    ``period_ms`` is the length of one replay cycle: the window plus one typical gap between commits, so
    the last commit of one cycle and the first of the next are as far apart as commits usually are.
    ``commit_times`` holds the time of every commit read (writers and maintenance), by version.
    """

    table_uri: str
    start_ms: int
    end_ms: int
    period_ms: int
    commits: tuple[WriterCommit, ...]
    merges: tuple[MergeObservation, ...] = ()
    commit_times: dict[int, int] = field(default_factory=dict)
    first_version: int = 0
    start_version: int = 0
    """The version whose state the window's commits apply to (the one before ``first_version``, if readable)."""

    @property
    def hours(self) -> float:
        return self.period_ms / HOUR_MS

    def bucket_rates(self) -> list[BucketRates]:
        """Per (partition, bucket): commits per hour, rows and bytes per commit, delete share."""
        acc: dict[BucketKey, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
        for c in self.commits:
            for w in c.writes:
                a = acc[w.key]
                a[0] += 1
                a[1] += w.rows
                a[2] += w.delete_rows
                a[3] += w.bytes
        hours = max(self.hours, 1e-9)
        return [BucketRates(p, b, n / hours, rows / n, size / n, dels / rows if rows else 0.0)
                for (p, b), (n, rows, dels, size) in sorted(acc.items(), key=lambda kv: (str(kv[0][0]), kv[0][1]))]

    def totals(self) -> dict[str, float]:
        """Table-wide: commits per hour, rows and bytes per hour, delete share, buckets written."""
        rows = sum(w.rows for c in self.commits for w in c.writes)
        dels = sum(w.delete_rows for c in self.commits for w in c.writes)
        size = sum(c.bytes for c in self.commits)
        hours = max(self.hours, 1e-9)
        return {"commits_per_hour": len(self.commits) / hours, "rows_per_hour": rows / hours,
                "bytes_per_hour": size / hours, "delete_share": dels / rows if rows else 0.0,
                "buckets": float(len({w.key for c in self.commits for w in c.writes}))}


def _info(actions: Sequence[Action]) -> CommitInfo | None:
    return next((a for a in actions if isinstance(a, CommitInfo)), None)


def is_writer_commit(actions: Sequence[Action]) -> bool:
    """A commit that changed data: it added level-0 DeltaFiles, or removed files with ``data_change``."""
    return any((isinstance(a, AddFile) and a.data_change) or (isinstance(a, RemoveFile) and a.data_change)
               for a in actions)


@dataclass
class _Walk:
    """The commits read, newest first, and where the window ended up."""

    commits: list[tuple[int, list[Action]]] = field(default_factory=list)
    times: dict[int, int] = field(default_factory=dict)


def _walk(table: Table, latest: int, hours: float | None, first: int | None) -> _Walk:
    """Read commits from ``latest`` back to ``first`` (or until ``hours`` before the newest writer commit)."""
    walk = _Walk()
    newest_write: int | None = None
    v = latest
    while v >= max(first or 0, 1):
        actions = table.log.read_commit(v)
        if actions is None:  # the older log was reclaimed: the window starts where the retained log does
            break
        info = _info(actions)
        ts = info.timestamp if info else 0
        if newest_write is not None and hours is not None and ts < newest_write - hours * HOUR_MS:
            break
        walk.times[v] = ts
        walk.commits.append((v, actions))
        if newest_write is None and is_writer_commit(actions):
            newest_write = ts
        v -= 1
    walk.commits.reverse()
    return walk


def _bucket_writes(adds: Sequence[AddFile], partition_by: Sequence[str]) -> tuple[BucketWrite, ...]:
    acc: dict[BucketKey, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for f in adds:
        a = acc[(partition_key(f.partition, partition_by), f.bucket)]
        a[0] += 1
        a[1] += f.rows
        a[2] += f.delete_rows
        a[3] += f.bytes
    return tuple(BucketWrite(p, b, *v) for (p, b), v in acc.items())


def _merges(ts: int, removed: Sequence[AddFile], added: Sequence[AddFile], partition_by: Sequence[str],
            priors: Sequence[PriorRows] = ()) -> list[MergeObservation]:
    """A maintenance commit split by bucket (a plan gives each bucket its own task or tasks)."""
    groups: dict[BucketKey, tuple[list[AddFile], list[AddFile]]] = defaultdict(lambda: ([], []))
    for f in removed:
        groups[(partition_key(f.partition, partition_by), f.bucket)][0].append(f)
    for f in added:
        groups[(partition_key(f.partition, partition_by), f.bucket)][1].append(f)
    prior: Counter[BucketKey] = Counter()
    for r in priors:
        prior[(partition_key(r.partition, partition_by), r.bucket)] += r.bytes
    return [MergeObservation(ts, p, b, tuple(ins), tuple(outs), prior[(p, b)])
            for (p, b), (ins, outs) in groups.items() if ins]


def _replay(start: Snapshot, commits: Sequence[tuple[int, list[Action]]]
            ) -> tuple[list[WriterCommit], list[MergeObservation]]:
    """Walk the window forward from ``start``: writer commits as the trace, maintenance as observed merges."""
    files = dict(start.files)
    partition_by = start.metadata.partition_by
    writes: list[WriterCommit] = []
    merges: list[MergeObservation] = []
    for v, actions in commits:
        info = _info(actions)
        ts = info.timestamp if info else 0
        adds = [a for a in actions if isinstance(a, AddFile)]
        removes = [a for a in actions if isinstance(a, RemoveFile)]
        removed = [files.pop(r.path) for r in removes if r.path in files]
        if is_writer_commit(actions):
            replaced = tuple(sorted({(partition_key(f.partition, partition_by), f.bucket) for f in removed},
                                    key=lambda k: (str(k[0]), k[1])))
            writes.append(WriterCommit(v, ts, _bucket_writes([a for a in adds if a.data_change], partition_by),
                                       replaced))
        elif removed:
            merges += _merges(ts, removed, adds, partition_by, [a for a in actions if isinstance(a, PriorRows)])
        files.update((a.path, a) for a in adds)
    return writes, merges


def _start(table: Table, commits: list[tuple[int, list[Action]]]
           ) -> tuple[Snapshot, list[tuple[int, list[Action]]]]:
    """The state just before the window, and the window's commits replayed on top of it.

    When the version before the window cannot be rebuilt (its log was reclaimed), the window's first
    commit becomes the starting state instead.
    """
    first = commits[0][0]
    try:
        return table.snapshot(first - 1), commits
    except VersionNotFoundError:
        return table.snapshot(first), commits[1:]


def _period(commits: Sequence[WriterCommit], start_ms: int, end_ms: int) -> int:
    """The window plus one typical gap between writer commits (at least one second)."""
    gaps = [b.time_ms - a.time_ms for a, b in itertools.pairwise(commits) if b.time_ms > a.time_ms]
    gap = int(statistics.median(gaps)) if gaps else HOUR_MS
    return max(1000, end_ms - start_ms + gap)


def learn_pattern(table: Table, *, hours: float | None = 24.0, until_version: int | None = None,
                  from_version: int | None = None) -> WritePattern:
    """Learn the write pattern of ``table`` from its log.

    Args:
        table: the table.
        hours: the learning window: writes this many hours back from the newest writer commit (None: all
            retained history).
        until_version: the newest version to learn from (default: the latest).
        from_version: the oldest version to learn from (default: as far as ``hours`` or the retained log reach).

    Raises:
        InvalidInputError: the window holds no writer commit (nothing to learn a pattern from).
    """
    latest = table.version if until_version is None else until_version
    walk = _walk(table, latest, hours, from_version)
    writer = [v for v, actions in walk.commits if is_writer_commit(actions)]
    if not writer:
        where = f" between versions {from_version or 1} and {latest}" if from_version or until_version else ""
        raise InvalidInputError(
            f"table {table.uri} has no writes in its retained history{where}: there is no write pattern to learn "
            "and replay; simulate a table that writers have committed to")
    start, commits = _start(table, walk.commits)
    trace, merges = _replay(start, commits)
    if not trace:  # the only writer commit became the starting state
        raise InvalidInputError(f"table {table.uri} has too little retained write history to learn a pattern "
                                "from; simulate it after writers have committed again")
    start_ms, end_ms = trace[0].time_ms, trace[-1].time_ms
    return WritePattern(table_uri=table.uri, start_ms=start_ms, end_ms=end_ms,
                        period_ms=_period(trace, start_ms, end_ms), commits=tuple(trace), merges=tuple(merges),
                        commit_times=dict(walk.times), first_version=commits[0][0], start_version=start.version)


__all__ = ["BucketKey", "BucketRates", "BucketWrite", "MergeObservation", "WritePattern", "WriterCommit",
           "is_writer_commit", "learn_pattern"]
