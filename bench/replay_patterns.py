"""Recorded write patterns replayed against a real table with real maintenance, at compressed time.

A recording writes micro-batches with maintd's writer and runs maintenance passes with the real planner, the
local executor and the real commit, under freezegun's clock: an hour of the pattern takes seconds, and the log
records the pattern's own times, so ``maintd tune`` and ``maintd simulate`` learn it as they would from a
table in production. The same pattern and seed always write the same rows at the same times, so two policies
meet exactly the same writes.

Measures, sampled every ``sample_every`` of pattern time from the table's real snapshots:
- files a reader opens per bucket: the most live files any bucket holds (the layout's read amplification, as the
  daemon measures it), p95 over the samples;
- the age of the table's oldest level-0 file in minutes (0 when it has none), p95 over the samples;
- write amplification: bytes maintenance wrote / bytes the writers wrote.
"""

from __future__ import annotations

import copy
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.acero  # imported before freezegun swaps datetime.date, which its C module checks on import
from freezegun import freeze_time

from maintd.execution import commit_rewrites, execute
from maintd.planner import Policy, plan
from maintd.table import Table

T0 = datetime(2026, 3, 2, tzinfo=UTC)
SCHEMA = "id:int64!,v:string,city:string,amount:double"


@dataclass(frozen=True)
class Pattern:
    """A writer: commits every ``every``; a burst of ``burst_commits`` commits ``burst_every`` apart starts every
    ``burst_period`` (none when 0); each commit writes ``new`` keys and updates and deletes live ones."""

    name: str
    every: timedelta
    new: int
    updates: int
    deletes: int
    burst_period: timedelta = timedelta(0)
    burst_every: timedelta = timedelta(minutes=1)
    burst_commits: int = 0
    burst_rows: int = 0


PATTERNS = {
    "steady": Pattern("steady", timedelta(minutes=5), new=300, updates=150, deletes=15),
    "bursty": Pattern("bursty", timedelta(minutes=20), new=100, updates=50, deletes=5,
                      burst_period=timedelta(hours=3), burst_commits=30, burst_rows=1500),
    "update-heavy": Pattern("update-heavy", timedelta(minutes=5), new=30, updates=800, deletes=30),
}


def commit_times(p: Pattern, start: datetime, end: datetime) -> Iterator[tuple[datetime, bool]]:
    """(time, in a burst) of every commit of ``p`` in (start, end], in time order."""
    times = {start + p.every * i: False for i in range(1, int((end - start) / p.every) + 1)}
    if p.burst_commits and p.burst_period:
        b = start + p.burst_period / 2
        while b <= end:
            for i in range(p.burst_commits):
                if (t := b + p.burst_every * i) <= end:
                    times[t] = True
            b += p.burst_period
    yield from sorted(times.items())


@dataclass
class Measured:
    """What a replay measured."""

    read_files_p95: float
    merge_delay_minutes_p95: float
    write_amplification: float
    writer_bytes: int
    maintenance_bytes: int
    rewritten_bytes: int
    """Bytes maintenance read as inputs: the cost the tuner minimises."""
    passes: int
    tasks: int
    commits: int

    def as_targets(self) -> dict[str, float]:
        return {"read_files_per_bucket": self.read_files_p95, "merge_delay_minutes": self.merge_delay_minutes_p95,
                "write_amplification": self.write_amplification}


def _batch(rng: np.random.Generator, live: np.ndarray, next_id: int, new: int, updates: int, deletes: int
           ) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    fresh = np.arange(next_id, next_id + new)
    upd = rng.choice(live, min(updates, len(live) // 2), replace=False) if len(live) else live
    dels = np.setdiff1d(rng.choice(live, min(deletes, len(live) // 4), replace=False), upd) if len(live) else live
    ids = np.concatenate([fresh, upd, dels]).astype(np.int64)
    ops = np.concatenate([np.zeros(len(fresh) + len(upd), np.int8), np.ones(len(dels), np.int8)])
    data = pa.table({"id": ids, "v": [f"value-{x % 997}-{x}" for x in ids],
                     "city": [("ams", "ber", "cph", "dub", "edi")[x % 5] for x in ids],
                     "amount": rng.random(len(ids)), "op": ops})
    return data, fresh, dels


def _percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if values else 0.0


def _sample(table: Table, now_ms: int, files: list[float], delays: list[float]) -> None:
    """The table now: the most files any bucket holds, and the age of its oldest level-0 file (0 if none)."""
    per_bucket: dict[tuple[tuple[tuple[str, str | None], ...], int], int] = {}
    oldest_l0 = now_ms
    for f in table.snapshot().files.values():
        key = (tuple(sorted(f.partition.items())), f.bucket)
        per_bucket[key] = per_bucket.get(key, 0) + 1
        if f.kind == "delta" and f.level == 0:
            oldest_l0 = min(oldest_l0, f.min_commit_time)
    files.append(float(max(per_bucket.values(), default=0)))
    delays.append((now_ms - oldest_l0) / 60_000)


@dataclass
class Writer:
    """The writer's state (its random generator, the live keys, the next new key): copied, two continuations of
    one recording write exactly the same rows."""

    rng: np.random.Generator
    live: np.ndarray
    next_id: int = 0

    def batch(self, rows: int, pattern: Pattern) -> pa.Table:
        data, fresh, dels = _batch(self.rng, self.live, self.next_id, rows, pattern.updates, pattern.deletes)
        self.live, self.next_id = np.setdiff1d(np.union1d(self.live, fresh), dels), self.next_id + len(fresh)
        return data


def _run(table: Table, writer: Writer, pattern: Pattern, policy: Policy, *, interval: timedelta, start: datetime,
         end: datetime, sample_every: timedelta | None) -> Measured:
    """Write and maintain from ``start`` to ``end`` (both on the pattern's clock, anchored at :data:`T0`)."""
    files: list[float] = []
    delays: list[float] = []
    writer_bytes = maintenance_bytes = rewritten_bytes = passes = tasks = commits = 0
    events: list[tuple[datetime, int, bool]] = [(t, 0, burst) for t, burst in commit_times(pattern, T0, end)
                                                if t > start]
    events += [(start + interval * i, 1, False) for i in range(1, int((end - start) / interval) + 1)]
    if sample_every is not None:
        events += [(start + sample_every * i, 2, False) for i in range(1, int((end - start) / sample_every) + 1)]
    with freeze_time(start) as clock:
        for when, what, burst in sorted(events):  # at equal times: writer, then maintenance, then the sample
            clock.move_to(when)
            if what == 0:
                data = writer.batch(pattern.burst_rows if burst else pattern.new, pattern)
                written_before = set(table.snapshot().files)
                table.write_changes(data, "op")
                writer_bytes += sum(f.bytes for path, f in table.snapshot().files.items() if path not in written_before)
                commits += 1
            elif what == 1:
                p = plan(table.snapshot(), policy, when, table.uri)
                passes += 1
                if p.tasks:
                    before = dict(table.snapshot().files)
                    commit_rewrites(table, p, execute(p, table, None))
                    snap = table.snapshot()
                    maintenance_bytes += sum(f.bytes for path, f in snap.files.items() if path not in before)
                    rewritten_bytes += sum(f.bytes for path, f in before.items() if path not in snap.files)
                    tasks += len(p.tasks)
            else:
                _sample(table, int(when.timestamp() * 1000), files, delays)
    return Measured(read_files_p95=_percentile(files, 95), merge_delay_minutes_p95=_percentile(delays, 95),
                    write_amplification=maintenance_bytes / writer_bytes if writer_bytes else 0.0,
                    writer_bytes=writer_bytes, maintenance_bytes=maintenance_bytes, rewritten_bytes=rewritten_bytes,
                    passes=passes, tasks=tasks, commits=commits)


def record(root: Path, pattern: Pattern, policy: Policy, *, interval: timedelta, hours: float, seed: int,
           buckets: int = 8) -> tuple[str, Writer, Measured]:
    """A new table written with ``pattern`` for ``hours`` from :data:`T0`, maintained with ``policy`` every
    ``interval``: (its URI, the writer's state at the end, what it measured after the first hour)."""
    uri = str(root / f"{pattern.name}-{seed}")
    writer = Writer(np.random.default_rng(seed), np.zeros(0, np.int64))
    with freeze_time(T0):
        table = Table.create(uri, SCHEMA, primary_key="id", buckets=buckets,
                             properties={"acid.data.retain.hours": 12})
    end = T0 + timedelta(hours=hours)
    warm = min(end, T0 + timedelta(hours=1))  # the table starts empty: its first hour says nothing of the policy
    _run(table, writer, pattern, policy, interval=interval, start=T0, end=warm, sample_every=None)
    measured = _run(table, writer, pattern, policy, interval=interval, start=warm, end=end,
                    sample_every=timedelta(minutes=5))
    return uri, writer, measured


def resume(uri: str, dest: Path, writer: Writer, pattern: Pattern, policy: Policy, *, interval: timedelta,
           start: datetime, hours: float) -> Measured:
    """A copy of the table at ``uri`` (left as it is) continued from ``start`` for ``hours`` with ``policy``
    every ``interval``, by a copy of ``writer``; what it measured."""
    shutil.copytree(uri, dest)
    return _run(Table.open(str(dest)), copy.deepcopy(writer), pattern, policy, interval=interval, start=start,
                end=start + timedelta(hours=hours), sample_every=timedelta(minutes=5))
