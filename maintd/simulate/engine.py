"""The simulation: a table's write pattern replayed in simulated time, maintained by the real planner.

Starting from a real snapshot, events run in time order: writer commits (the learned trace, shifted by whole
periods), maintenance passes, reclamation passes and samples of the state. A maintenance pass runs
``maintd.planner.plan(snapshot, policy, now)`` on the simulated state, then estimates every task's output by
:class:`~maintd.simulate.sizes.SizeModel` and commits it, as :func:`maintd.execution.commit_rewrites` commits a
run (one commit, inputs removed, outputs added). A reclamation pass drops the files no retained version reads, by
the rule of :mod:`maintd.reclaim`.
In a table with ``changes.prior.rows``, a compaction that rewrites a BaseFile also writes prior-rows files
(their bytes estimated by the size model); they are history: kept, and reclaimed, with the BaseFiles it removed.
With ``lookup``, a clustering of a bucket that has BaseFiles writes one too, estimated the same way: it stays
while the bucket's BaseFiles do and becomes history at the bucket's next compaction.
Nothing touches storage; the simulated files are ``AddFile`` values with made-up paths, versions and commit times
exactly as the real log would give them, so the planner cannot tell them from real ones.

At equal times writers go first, then maintenance, then reclamation, then the sample.
"""

from __future__ import annotations

import bisect
import heapq
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType

from maintd.planner import PlanTask, Policy, plan
from maintd.simulate.pattern import HOUR_MS, BucketKey, WritePattern, WriterCommit
from maintd.simulate.schedule import Schedule
from maintd.simulate.sizes import OutputEstimate, SizeModel
from maintd.table.log.actions import AddFile
from maintd.table.log.properties import lookup_prior_rows, prior_rows
from maintd.table.log.snapshot import PartitionKey, Snapshot, format_partition, partition_key

LEVELS = ("L0", "L1", "L2", "base")
WRITE, MAINTAIN, RECLAIM, SAMPLE = range(4)
"""Event kinds, in the order events of equal time run."""
_WRITE, _MAINTAIN, _RECLAIM, _SAMPLE = WRITE, MAINTAIN, RECLAIM, SAMPLE


def level_of(f: AddFile) -> str:
    return "base" if f.kind == "base" else f"L{f.level}"


@dataclass(frozen=True, slots=True)
class Sample:
    """The simulated table at one moment; counters (``*_bytes`` of work, ``tasks``) are cumulative from the start.

    ``file_hours`` and ``read_amp_hours`` integrate files per level and read amplification over time since the
    start (exactly, between events), so a mean over any stretch is a difference divided by its hours, whatever
    the phase of the samples and the maintenance passes.
    """

    time_ms: int
    files: dict[str, int]
    bytes: dict[str, int]
    read_amp_mean: float
    read_amp_max: int
    file_hours: dict[str, float]
    read_amp_hours: float
    writer_bytes: int
    maintenance_read: int
    maintenance_written: int
    tasks: dict[str, int]
    reclaimed_bytes: int
    reclaimable_bytes: int
    history_bytes: int
    history_hours: float
    oldest_delta_hours: float
    oldest_l0_minutes: float = 0.0
    """Age of the oldest level-0 file of any bucket (0 when there is none): how long fresh data has waited."""


@dataclass
class Exposure:
    """What readers and fresh data met, weighted by time: a histogram of the most files any bucket holds (ms per
    file count: the layout's read amplification, which the daemon measures a table's target against) and of the
    oldest level-0 age (ms per whole minute of age).

    Filled by :meth:`SimTable.advance` between events, so a percentile over it is over the simulated time,
    whatever the cadence of samples and passes; the age grows during an interval and is spread over the minutes
    it passes through.
    """

    files_ms: Counter[int] = field(default_factory=Counter)
    age_ms: Counter[int] = field(default_factory=Counter)

    def add(self, dt_ms: int, buckets_by_files: Counter[int], oldest_l0_ms: int | None, now_ms: int) -> None:
        worst = max((n for n, k in buckets_by_files.items() if n > 0 and k > 0), default=0)
        if worst:
            self.files_ms[worst] += dt_ms
        if oldest_l0_ms is None:
            self.age_ms[-1] += dt_ms  # no level-0 file: nothing waits
            return
        t, end = now_ms - dt_ms, now_ms  # the interval, in the age's own minutes
        while t < end:
            minute = (t - oldest_l0_ms) // 60_000
            step = min(end, oldest_l0_ms + (minute + 1) * 60_000) - t
            self.age_ms[max(0, minute)] += step
            t += step

    def files_p95(self) -> float:
        return float(max(0, _percentile(self.files_ms, 0.95)))

    def age_p95_minutes(self) -> float:
        """The p95 age, to the minute above (a ceiling is met only when the whole minute is); 0 with no wait."""
        return float(max(0, _percentile(self.age_ms, 0.95) + 1))


def _percentile(weights: Counter[int], q: float) -> int:
    """The smallest value whose weight, with every smaller value's, reaches ``q`` of the total (-1 when empty)."""
    total = sum(weights.values())
    seen = 0
    for value in sorted(weights):
        seen += weights[value]
        if seen >= q * total:
            return value
    return -1


@dataclass
class _Tombstones:
    """Removed files in removal order, with running byte totals; a prefix of them is reclaimed."""

    times: list[int] = field(default_factory=list)
    totals: list[int] = field(default_factory=lambda: [0])
    reclaimed: int = 0

    def add(self, time_ms: int, size: int) -> None:
        self.times.append(time_ms)
        self.totals.append(self.totals[-1] + size)

    def reclaimable(self, cutoff_ms: int) -> tuple[int, int]:
        """(index after the last tombstone removed at or before ``cutoff_ms``, bytes not yet reclaimed up to it)."""
        end = max(self.reclaimed, bisect.bisect_right(self.times, cutoff_ms))
        return end, self.totals[end] - self.totals[self.reclaimed]


class SimTable:
    """The simulated state of one table: live files, tombstones, commit times and the work counters."""

    def __init__(self, start: Snapshot, commit_times: dict[int, int]) -> None:
        self.start = start
        self.files: dict[str, AddFile] = dict(start.files)
        self.version = start.version
        self.timestamp = start.timestamp
        self.retain_ms = start.retain_hours * HOUR_MS
        known = sorted({t for v, t in commit_times.items() if v <= start.version} | {start.timestamp})
        self.commit_ms: list[int] = known
        self.oldest_readable_ms = known[0]
        self.tombs = _Tombstones()
        # prior-rows files are history too: deleted with the BaseFiles they were written with
        held = [(r.deletion_time, r.bytes or 0) for r in start.tombstones.values()]
        held += [(p.deletion_time, p.bytes) for p in start.priors.values() if not p.attached]
        for time_ms, size in sorted(held):
            self.tombs.add(time_ms, size)
        self.prior_rows = prior_rows(start.metadata.properties)
        self.lookup = lookup_prior_rows(start.metadata.properties)
        self.attached: Counter[BucketKey] = Counter()
        """Bytes of looked-up prior-rows files per bucket, live until the bucket's next compaction."""
        for p in start.priors.values():
            if p.attached:
                self.attached[(partition_key(p.partition, start.metadata.partition_by), p.bucket)] += p.bytes
        self.per_bucket: Counter[BucketKey] = Counter()
        self.buckets_by_files: Counter[int] = Counter()
        """How many buckets hold each number of files (kept with ``per_bucket``, so exposure costs no scan)."""
        self.l0_times: Counter[int] = Counter()
        """Commit times of the live level-0 files (the oldest is the merge delay)."""
        self._oldest_l0: int | None = None
        self.exposure: Exposure | None = None
        """Set to an :class:`Exposure` to record what readers and fresh data meet over time."""
        self.levels: Counter[str] = Counter()
        self.level_bytes: Counter[str] = Counter()
        for f in self.files.values():
            self._count(f, 1)
        self.writer_bytes = self.maintenance_read = self.maintenance_written = self.reclaimed_bytes = 0
        self.tasks: Counter[str] = Counter()
        self._seq = 0
        self._since = start.timestamp
        self.file_ms: Counter[str] = Counter()
        self.read_amp_ms = 0.0

    # -- state ---------------------------------------------------------------------------------------------------
    def _count(self, f: AddFile, sign: int) -> None:
        key = (partition_key(f.partition, self.start.metadata.partition_by), f.bucket)
        self.buckets_by_files[self.per_bucket[key]] -= 1
        self.per_bucket[key] += sign
        self.buckets_by_files[self.per_bucket[key]] += 1
        if self.per_bucket[key] <= 0:
            del self.per_bucket[key]
        if f.kind == "delta" and f.level == 0:
            self._count_l0(f.min_commit_time, sign)
        self.levels[level_of(f)] += sign
        self.level_bytes[level_of(f)] += sign * f.bytes

    def _count_l0(self, time_ms: int, sign: int) -> None:
        self.l0_times[time_ms] += sign
        if self.l0_times[time_ms] <= 0:
            del self.l0_times[time_ms]
            if time_ms == self._oldest_l0:
                self._oldest_l0 = min(self.l0_times, default=None)
        elif self._oldest_l0 is None or time_ms < self._oldest_l0:
            self._oldest_l0 = time_ms

    @property
    def oldest_l0_ms(self) -> int | None:
        """Commit time of the oldest live level-0 file, None when there is none."""
        return self._oldest_l0

    @property
    def read_amp(self) -> float:
        """Files a read merges per bucket, on average over the buckets that hold files."""
        return sum(self.levels.values()) / len(self.per_bucket) if self.per_bucket else 0.0

    def advance(self, now_ms: int) -> None:
        """Integrate the current state up to ``now_ms`` (called before every change and every sample)."""
        dt = now_ms - self._since
        if dt <= 0:
            return
        for k, n in self.levels.items():
            self.file_ms[k] += n * dt
        self.read_amp_ms += self.read_amp * dt
        if self.exposure is not None:
            self.exposure.add(dt, self.buckets_by_files, self._oldest_l0, now_ms)
        self._since = now_ms

    def snapshot(self) -> Snapshot:
        """The simulated state as a :class:`Snapshot` for the planner (a read-only view, not a copy)."""
        return Snapshot(version=self.version, timestamp=self.timestamp, protocol=self.start.protocol,
                        metadata=self.start.metadata, files=MappingProxyType(self.files))

    def _commit(self, now_ms: int, removes: Sequence[str], adds: Sequence[AddFile]) -> int:
        self.advance(now_ms)
        ts = max(now_ms, self.timestamp + 1)
        self.version += 1
        self.timestamp = ts
        self.commit_ms.append(ts)
        for path in removes:
            f = self.files.pop(path)
            self._count(f, -1)
            self.tombs.add(ts, f.bytes)
        for a in adds:
            self.files[a.path] = a
            self._count(a, 1)
        return ts

    def _path(self, partition: PartitionKey, bucket: int, tag: str) -> str:
        self._seq += 1
        return f"_simulated/{format_partition(partition)}/bucket-{bucket:05d}/{tag}-{self._seq:09d}"

    # -- events --------------------------------------------------------------------------------------------------
    def write(self, now_ms: int, commit: WriterCommit) -> None:
        """One writer commit: level-0 files per bucket (versions and times as a transaction sets them)."""
        version, ts = self.version + 1, max(now_ms, self.timestamp + 1)
        removes: list[str] = []
        if commit.replaces:  # an overwrite: the buckets it replaced lose every file
            pb, replaced = self.start.metadata.partition_by, set(commit.replaces)
            removes = [p for p, f in self.files.items() if (partition_key(f.partition, pb), f.bucket) in replaced]
        adds = []
        for w in commit.writes:
            for i in range(w.files):
                adds.append(AddFile.model_construct(
                    path=self._path(w.partition, w.bucket, f"delta-L0-v{version}"), partition=dict(w.partition),
                    bucket=w.bucket, kind="delta", level=0, rows=_share(w.rows, w.files, i),
                    bytes=_share(w.bytes, w.files, i), min_version=version, max_version=version,
                    min_commit_time=ts, max_commit_time=ts, delete_rows=_share(w.delete_rows, w.files, i),
                    key_min=None, key_max=None, data_change=True, modification_time=ts))
        self.writer_bytes += sum(a.bytes for a in adds)
        self._commit(now_ms, removes, adds)

    def maintain(self, now_ms: int, policy: Policy, sizes: SizeModel, table_uri: str, policy_name: str) -> int:
        """One maintenance pass: plan with the real planner, estimate every task's output, commit. Returns tasks."""
        now = datetime.fromtimestamp(now_ms / 1000, UTC)
        p = plan(self.snapshot(), policy, now, table_uri, policy_name=policy_name)
        if not p.tasks:
            return 0
        ts = max(now_ms, self.timestamp + 1)
        removes: list[str] = []
        adds: list[AddFile] = []
        prior = looked_up = freed = 0
        pb = self.start.metadata.partition_by
        based = {(partition_key(f.partition, pb), f.bucket) for f in self.files.values() if f.kind == "base"}
        for task in p.tasks:
            inputs = [self.files[path] for path in task.inputs]
            key = (partition_key(task.partition, pb), task.bucket)
            for est in estimate_outputs(task, inputs, sizes):
                adds.append(self._output(task, inputs, est, ts))
            if self.prior_rows and task.kind == "compact":
                prior += sizes.prior_bytes(inputs)
            if task.kind == "compact":  # the bucket's looked-up files go with the BaseFiles it removes
                freed += self.attached.pop(key, 0)
            elif self.lookup and task.kind == "cluster" and key in based:
                size = sizes.prior_bytes(inputs, has_base=True)
                self.attached[key] += size
                looked_up += size
            removes += task.inputs
            self.tasks[task.kind] += 1
            self.maintenance_read += task.input_bytes
        self.maintenance_written += sum(a.bytes for a in adds) + prior + looked_up
        ts = self._commit(now_ms, removes, adds)
        if prior + freed:
            self.tombs.add(ts, prior + freed)
        return len(p.tasks)

    def _output(self, task: PlanTask, inputs: Sequence[AddFile], est: OutputEstimate, ts: int) -> AddFile:
        pk = partition_key(task.partition, self.start.metadata.partition_by)
        tag = "base" if est.kind == "base" else f"delta-L{est.level}"
        return AddFile.model_construct(
            path=self._path(pk, task.bucket, tag), partition=dict(task.partition), bucket=task.bucket,
            kind=est.kind, level=est.level, rows=est.rows, bytes=est.bytes,
            min_version=min(f.min_version for f in inputs), max_version=max(f.max_version for f in inputs),
            min_commit_time=min(f.min_commit_time for f in inputs),
            max_commit_time=max(f.max_commit_time for f in inputs), delete_rows=est.delete_rows, key_min=None,
            key_max=None, data_change=False, modification_time=ts)

    def retained_from_ms(self, now_ms: int) -> int:
        """Commit time of the oldest retained version at ``now_ms`` (the reclamation rule of maintd.reclaim)."""
        if self.retain_ms == 0:
            return self.commit_ms[-1]
        i = bisect.bisect_left(self.commit_ms, now_ms - self.retain_ms)
        return self.commit_ms[min(i, len(self.commit_ms) - 1)]

    def reclaim(self, now_ms: int) -> None:
        """One reclamation pass: files removed at or before the oldest retained version go, and that history."""
        floor = self.retained_from_ms(now_ms)
        end, size = self.tombs.reclaimable(floor)
        self.tombs.reclaimed = end
        self.reclaimed_bytes += size
        self.oldest_readable_ms = max(self.oldest_readable_ms, floor)

    def sample(self, now_ms: int) -> Sample:
        self.advance(now_ms)
        counts = list(self.per_bucket.values())
        _, reclaimable = self.tombs.reclaimable(self.retained_from_ms(now_ms))
        held = self.tombs.totals[-1] - self.tombs.totals[self.tombs.reclaimed] - reclaimable
        oldest = min((f.min_commit_time for f in self.files.values() if f.kind == "delta"), default=None)
        return Sample(
            time_ms=now_ms, files={k: self.levels.get(k, 0) for k in LEVELS},
            bytes={k: self.level_bytes.get(k, 0) for k in LEVELS},
            read_amp_mean=self.read_amp, read_amp_max=max(counts, default=0),
            file_hours={k: self.file_ms.get(k, 0) / HOUR_MS for k in LEVELS}, read_amp_hours=self.read_amp_ms / HOUR_MS,
            writer_bytes=self.writer_bytes, maintenance_read=self.maintenance_read,
            maintenance_written=self.maintenance_written,
            tasks={k: self.tasks.get(k, 0) for k in ("cluster", "compact")},
            reclaimed_bytes=self.reclaimed_bytes, reclaimable_bytes=reclaimable, history_bytes=held,
            history_hours=max(0.0, (now_ms - self.oldest_readable_ms) / HOUR_MS),
            oldest_delta_hours=0.0 if oldest is None else max(0.0, (now_ms - oldest) / HOUR_MS),
            oldest_l0_minutes=0.0 if self._oldest_l0 is None else max(0.0, (now_ms - self._oldest_l0) / 60_000))


def _share(total: int, parts: int, i: int) -> int:
    """Part ``i`` of ``total`` split as evenly as integers allow over ``parts``."""
    return total // parts + (1 if i < total % parts else 0)


def estimate_outputs(task: PlanTask, inputs: Sequence[AddFile], sizes: SizeModel) -> list[OutputEstimate]:
    """The files one planned task writes, estimated from its inputs (none when nothing survives a compaction)."""
    if task.kind == "compact":
        out = sizes.compact(inputs)
        return [] if out is None else [out]
    return [sizes.cluster(inputs, task.target_level or 1)]


def writer_times(pattern: WritePattern, start_ms: int, end_ms: int) -> Iterator[tuple[int, WriterCommit]]:
    """The trace's commits shifted by whole periods into ``(start_ms, end_ms]``, in time order."""
    p = pattern.period_ms
    k = max(0, (start_ms - pattern.end_ms) // p)  # the cycles before it end at or before start_ms
    while pattern.start_ms + k * p <= end_ms:
        for c in pattern.commits:
            t = c.time_ms + k * p
            if start_ms < t <= end_ms:
                yield t, c
        k += 1


def events(pattern: WritePattern, schedule: Schedule, start_ms: int, end_ms: int, sample_ms: int
            ) -> Iterator[tuple[int, int, WriterCommit | None]]:
    writes = ((t, _WRITE, c) for t, c in writer_times(pattern, start_ms, end_ms))
    maint = ((t, _MAINTAIN, None) for t in schedule.maintenance_at(start_ms, end_ms))
    recl = ((t, _RECLAIM, None) for t in schedule.reclamation_at(start_ms, end_ms))
    ends = [*range(start_ms, end_ms + 1, sample_ms)]
    if ends[-1] != end_ms:  # the end is always sampled
        ends.append(end_ms)
    samples = ((t, _SAMPLE, None) for t in ends)
    return heapq.merge(writes, maint, recl, samples, key=lambda e: (e[0], e[1]))


@dataclass(frozen=True)
class Run:
    """The samples of one simulated policy, and how many maintenance passes planned work."""

    samples: tuple[Sample, ...]
    passes: int
    busy_passes: int


def simulate(start: Snapshot, pattern: WritePattern, sizes: SizeModel, policy: Policy, schedule: Schedule, *,
             start_ms: int, end_ms: int, policy_name: str = "default", sample_ms: int = HOUR_MS,
             table_uri: str = "", progress: Callable[[float], None] | None = None) -> Run:
    """Replay ``pattern`` from ``start`` over ``[start_ms, end_ms]`` under ``policy``; samples every ``sample_ms``.

    ``progress`` is called with the share of simulated time done at every sample.
    """
    sim = SimTable(start, pattern.commit_times)
    sim.advance(start_ms)
    sim.file_ms.clear()
    sim.read_amp_ms = 0.0
    samples: list[Sample] = []
    passes = busy = 0
    for t, kind, commit in events(pattern, schedule, start_ms, end_ms, sample_ms):
        if kind == _WRITE and commit is not None:
            sim.write(t, commit)
        elif kind == _MAINTAIN:
            passes += 1
            busy += sim.maintain(t, policy, sizes, table_uri or pattern.table_uri, policy_name) > 0
        elif kind == _RECLAIM:
            sim.reclaim(t)
        else:
            samples.append(sim.sample(t))
            if progress is not None:
                progress((t - start_ms) / max(1, end_ms - start_ms))
    return Run(tuple(samples), passes, busy)


__all__ = ["LEVELS", "MAINTAIN", "RECLAIM", "SAMPLE", "WRITE", "Exposure", "Run", "Sample", "SimTable",
           "estimate_outputs", "events", "level_of", "simulate", "writer_times"]
