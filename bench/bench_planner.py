"""Planner benchmark: planning time for 1,000,000 files over 10,000 buckets, and for 1,000 tables.

Run: ``.venv/bin/python bench/bench_planner.py [--files 1000000] [--buckets 10000] [--tables 1000]``.
Only ``plan()`` (and, for many tables, policy resolution) is timed; building the snapshots is not.
Figures are recorded in docs/benchmarks.md ("Planner").
"""

from __future__ import annotations

import argparse
import random
import time
from datetime import UTC, datetime
from types import MappingProxyType

from maintd.planner import default_policy, load_policy_file, plan
from maintd.table.log.actions import AddFile, Field_, Metadata, Protocol
from maintd.table.log.snapshot import Snapshot

NOW = datetime(2024, 6, 1, tzinfo=UTC)
NOW_MS = int(NOW.timestamp() * 1000)
MiB = 1 << 20


def _files(rng: random.Random, part: str, bucket: int, n: int) -> list[AddFile]:
    """One bucket: a base, then level-2/1 files, then level-0 files, one commit a minute."""
    out = [AddFile.model_construct(path=f"ds={part}/b{bucket}/base", partition={"ds": part}, bucket=bucket,
                                   kind="base", level=None, rows=100_000, bytes=200 * MiB, min_version=0,
                                   max_version=0, min_commit_time=NOW_MS - 10**8, max_commit_time=NOW_MS - 10**8,
                                   delete_rows=0, modification_time=NOW_MS - 10**8)]
    v = 1
    for i in range(n - 1):
        level = 2 if i < n // 10 else 1 if i < n // 4 else 0
        width = {2: 50, 1: 10, 0: 1}[level]
        t0, t1 = NOW_MS - (10_000 - v) * 60_000, NOW_MS - (10_000 - v - width + 1) * 60_000
        out.append(AddFile.model_construct(
            path=f"ds={part}/b{bucket}/d{i}", partition={"ds": part}, bucket=bucket, kind="delta", level=level,
            rows=1000, bytes=rng.randint(1, 4 * MiB * (1 + 8 * level)), min_version=v, max_version=v + width - 1,
            min_commit_time=t0, max_commit_time=t1, delete_rows=rng.randint(0, 50), modification_time=t1))
        v += width
    return out


def snapshot(files: int, buckets: int, partitions: int, seed: int = 1) -> Snapshot:
    rng = random.Random(seed)
    per = files // buckets
    fs = [f for p in range(partitions) for b in range(buckets // partitions)
          for f in _files(rng, f"2024-01-{p:04d}", b, per)]
    md = Metadata(table_id="bench", name="bench.t", fields=(Field_(name="id", type="int64"),), primary_key=("id",),
                  partition_by=("ds",), buckets=max(1, buckets // partitions), properties={}, created_time=0)
    return Snapshot(version=10**6, timestamp=NOW_MS, protocol=Protocol(), metadata=md,
                    files=MappingProxyType({f.path: f for f in fs}))


def bench_big(files: int, buckets: int) -> None:
    t0 = time.perf_counter()
    snap = snapshot(files, buckets, partitions=max(1, buckets // 100))
    build = time.perf_counter() - t0
    pol = default_policy()
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        p = plan(snap, pol, NOW, "bench://t")
        times.append(time.perf_counter() - t0)
    kinds = {k: sum(1 for t in p.tasks if t.kind == k) for k in ("cluster", "compact")}
    print(f"one table: {len(snap.files):,} files, {len(p.decisions):,} buckets: plan() best {min(times):.2f} s, "
          f"median {sorted(times)[1]:.2f} s (snapshot built in {build:.1f} s, not timed); "
          f"{len(p.tasks)} tasks {kinds}")


def bench_tables(tables: int) -> None:
    snaps = [snapshot(320, 16, 1, seed=i) for i in range(tables)]
    pf = load_policy_file()
    t0 = time.perf_counter()
    n = 0
    for i, s in enumerate(snaps):
        resolved = pf.resolve(name=f"db.t{i}", uri=f"bench://t{i}", properties=s.metadata.properties)
        n += len(plan(s, resolved.policy, NOW, f"bench://t{i}", policy_name=resolved.name).tasks)
    dt = time.perf_counter() - t0
    print(f"{tables:,} tables x 16 buckets x 20 files: {dt:.2f} s total, {dt / tables * 1000:.2f} ms per table "
          f"(policy resolution included); {n} tasks")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--files", type=int, default=1_000_000)
    ap.add_argument("--buckets", type=int, default=10_000)
    ap.add_argument("--tables", type=int, default=1_000)
    a = ap.parse_args()
    bench_big(a.files, a.buckets)
    bench_tables(a.tables)


if __name__ == "__main__":
    main()
