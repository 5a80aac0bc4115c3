"""Table-format benchmark: latest-version lookup and snapshot load by history length, commit throughput
with concurrent processes, and merge-on-read of a bucket of many small files against one BaseFile.

Run: ``.venv/bin/python bench/bench_format.py [--versions 10,1000,100000] [--processes 1,2,4]
[--commits 100] [--files 200] [--rows 500] [--dir DIR]``. Figures are recorded in docs/benchmarks.md
("Format").

* Lookup and load: for each history length N a table is built whose latest version is N + 5 (the
  newest checkpoint at N, five commits after it) and whose state is the same at every N: 100 live
  files; the versions in between are property changes, so only the length of the history differs.
  The log is written through the log's own code (``TableLog.try_commit`` and ``write_checkpoint``) on a
  storage that skips ``fsync`` to build 100,000 versions quickly. Timed: ``TableLog.latest_version()``
  on a fresh storage object (no in-memory hint) and ``Table.open(uri).snapshot()``, medians with a
  warm OS cache. For scale, the time to merely list ``_log/`` is shown: what a lookup by listing costs.
* Throughput: P processes (spawned) each commit C upserts of 10 rows to one table at the same time.
* Merge-on-read: one bucket holding F level-0 files of R rows each (overlapping keys, 10% deletes),
  read with the reader's ``read_bucket``; then the same bucket after compaction into one BaseFile.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from maintd import Table
from maintd.execution.rewrite import run_task
from maintd.execution.specs import TaskSpec
from maintd.storage import LocalStorage
from maintd.table.log.actions import AddFile, CommitInfo
from maintd.table.log.snapshot import SnapshotBuilder
from maintd.table.log.tablelog import LOG_DIR, TableLog
from maintd.table.read.reader import read_bucket

LIVE_FILES = 100
TAIL = 5


class _NoSyncStorage(LocalStorage):
    """Builds benchmark logs fast: the storage's own atomic publication, with neither its temporary file nor the
    log directory ``fsync``ed."""

    def _write_temp(self, target: Path, data: bytes) -> Path:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.parent / f".tmp-{uuid.uuid4().hex}"
        tmp.write_bytes(data)
        return tmp

    def _sync_dir(self, directory: Path) -> None:
        return None


def median_time(fn: Callable[[], Any], repeat: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


# -- lookup and load by history length -----------------------------------------------------------------------------


def build_history(root: Path, history: int) -> None:
    """A table whose newest checkpoint is at ``history`` and whose latest version is ``history + TAIL``."""
    table = Table.create(str(root), "id:int64!,name:string", primary_key="id", buckets=16)
    storage = _NoSyncStorage(str(root))
    log = TableLog(storage)
    base = table.snapshot(0)
    builder = SnapshotBuilder.from_snapshot(base)
    md = base.metadata
    ts = base.timestamp
    adds = [AddFile(path=f"bucket-{i % 16:05d}/delta-L0-{i:032x}.parquet", bucket=i % 16, kind="delta", level=0,
                    rows=1000, bytes=64_000, min_version=1, max_version=1, min_commit_time=ts + 1,
                    max_commit_time=ts + 1, key_min=(i * 1000,), key_max=(i * 1000 + 999,), modification_time=ts + 1)
            for i in range(LIVE_FILES)]
    for v in range(1, history + TAIL + 1):
        info = CommitInfo(operation="UPSERT" if v == 1 else "SET PROPERTIES", timestamp=ts + v * 60_000,
                          txn_id=uuid.uuid4().hex, read_version=v - 1)
        actions: list[Any] = [info, *adds] if v == 1 else [
            info, md.model_copy(update={"properties": {**md.properties, "maintd.bench.seq": str(v)}})]
        assert log.try_commit(v, actions)
        builder.apply(v, actions)
        if v % 10 == 0:
            log.write_checkpoint(builder.build())
            builder.base_checkpoint = v  # as a committer's state after its checkpoint: records since it


def bench_history(base: Path, sizes: list[int]) -> list[dict[str, Any]]:
    out = []
    for n in sizes:
        root = base / f"history-{n}"
        t0 = time.perf_counter()
        build_history(root, n)
        built = time.perf_counter() - t0
        uri = str(root)
        assert TableLog(LocalStorage(uri)).latest_version() == n + TAIL
        assert len(Table.open(uri).snapshot().files) == LIVE_FILES
        out.append({
            "versions": n,
            "lookup": median_time(lambda uri=uri: TableLog(LocalStorage(uri)).latest_version(), 300),
            "load": median_time(lambda uri=uri: Table.open(uri).snapshot(), 100),
            "listing": median_time(lambda root=root: os.listdir(root / LOG_DIR), 5 if n > 10_000 else 50),
            "build": built,
        })
        print(f"  history {n:>7,}: built in {built:.1f}s", file=sys.stderr)
    return out


# -- commit throughput -----------------------------------------------------------------------------------------------


def _writer(uri: str, worker: int, commits: int, go: Any, results: Any) -> None:
    table = Table.open(uri)
    table.snapshot()
    latencies = []
    go.wait()
    for i in range(commits):
        ids = np.arange(10, dtype=np.int64) + (worker * commits + i) * 10
        t0 = time.perf_counter()
        table.upsert(pa.table({"id": ids, "name": [f"w{worker}"] * 10}))
        latencies.append(time.perf_counter() - t0)
    results.put(latencies)


def bench_throughput(base: Path, processes: list[int], commits: int) -> list[dict[str, Any]]:
    ctx = mp.get_context("spawn")
    out = []
    for n in processes:
        root = base / f"throughput-{n}"
        Table.create(str(root), "id:int64!,name:string", primary_key="id", buckets=4)
        go, results = ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=_writer, args=(str(root), w, commits, go, results)) for w in range(n)]
        for p in procs:
            p.start()
        time.sleep(3.0)  # let every process import and open the table before the clock starts
        t0 = time.perf_counter()
        go.set()
        latencies = [x for _ in procs for x in results.get(timeout=600)]
        wall = time.perf_counter() - t0
        for p in procs:
            p.join()
        table = Table.open(str(root))
        assert table.version == n * commits and table.read().num_rows == n * commits * 10
        retried = sum(1 for r in table.history() if r.read_version is not None and r.version > r.read_version + 1)
        out.append({"processes": n, "commits": n * commits, "wall": wall, "per_s": n * commits / wall,
                    "p50": statistics.median(latencies), "p95": float(np.percentile(latencies, 95)),
                    "retried": retried})
    return out


# -- merge-on-read ---------------------------------------------------------------------------------------------------


def bench_merge(base: Path, files: int, rows: int) -> dict[str, Any]:
    table = Table.create(str(base / "merge"), "id:int64!,name:string,amount:float64", primary_key="id", buckets=1)
    rng = np.random.default_rng(1)
    keyspace = files * rows // 4
    for _ in range(files):
        ids = rng.choice(keyspace, rows, replace=False).astype(np.int64)
        ops = (rng.random(rows) < 0.1).astype(np.int8)
        table.write_changes(pa.table({"id": ids, "name": [f"n{k}" for k in ids], "amount": rng.random(rows),
                                      "op": ops}), "op")
    snap = table.snapshot()
    md, deltas = snap.metadata, list(snap.files.values())
    t_many = median_time(lambda: read_bucket(table.storage, md, deltas, None), 5)
    visible = read_bucket(table.storage, md, deltas, None).num_rows
    spec = TaskSpec(table_uri=table.uri, task_id="compact-0", kind="compact", partition={}, bucket=0,
                    target_level=None, metadata=md, inputs=tuple(deltas))
    result = run_task(spec)
    assert result.ok and len(result.adds) == 1, result.error
    txn = table.new_transaction("OPTIMIZE", read_snapshot=snap)
    for f in deltas:
        txn.remove(f, data_change=False)
    txn.add(result.adds[0])
    txn.commit()
    (base_file,) = table.snapshot().files.values()
    t_one = median_time(lambda: read_bucket(table.storage, md, [base_file], None), 20)
    assert read_bucket(table.storage, md, [base_file], None).num_rows == visible
    return {"files": files, "rows": files * rows, "visible": visible, "many": t_many, "one": t_one,
            "compaction": result.seconds}


# -- report ----------------------------------------------------------------------------------------------------------


def ms(s: float) -> str:
    return f"{s * 1000:.3f} ms" if s < 0.01 else f"{s * 1000:.1f} ms"


def report(history: list[dict[str, Any]], throughput: list[dict[str, Any]], merge: dict[str, Any] | None) -> None:
    print(f"Machine: {os.cpu_count()} CPU, Python {platform.python_version()}, {platform.system()} "
          f"{platform.machine()}\n")
    if history:
        print("| history (versions) | latest-version lookup | snapshot load | listing `_log/` (for scale) |")
        print("|---|---|---|---|")
        for h in history:
            print(f"| {h['versions']:,} | {ms(h['lookup'])} | {ms(h['load'])} | {ms(h['listing'])} |")
        first, last = history[0], history[-1]
        print(f"\n{last['versions']:,} vs {first['versions']:,} versions: "
              f"lookup {last['lookup'] / first['lookup']:.2f}x, load {last['load'] / first['load']:.2f}x "
              "(goal: within 1.5x)\n")
    if throughput:
        print("| processes | commits | wall time | commits/s | latency p50 | latency p95 | commits that lost a race |")
        print("|---|---|---|---|---|---|---|")
        for t in throughput:
            print(f"| {t['processes']} | {t['commits']} | {t['wall']:.2f} s | {t['per_s']:.0f} | {ms(t['p50'])} | "
                  f"{ms(t['p95'])} | {t['retried']} |")
        print()
    if merge:
        print("| bucket | files | row versions | visible rows | merge-on-read |")
        print("|---|---|---|---|---|")
        print(f"| before compaction | {merge['files']} level-0 DeltaFiles | {merge['rows']:,} | {merge['visible']:,} | "
              f"{ms(merge['many'])} |")
        print(f"| after compaction | 1 BaseFile | {merge['visible']:,} | {merge['visible']:,} | {ms(merge['one'])} |")
        print(f"\nmerge-on-read {merge['many'] / merge['one']:.1f}x faster after compaction "
              f"(the compaction task itself: {merge['compaction']:.2f} s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--versions", default="10,1000,100000", help="history lengths, comma-separated ('' skips)")
    ap.add_argument("--processes", default="1,2,4", help="concurrent writer processes, comma-separated ('' skips)")
    ap.add_argument("--commits", type=int, default=100, help="commits per writer process")
    ap.add_argument("--files", type=int, default=200, help="level-0 files in the merge-on-read bucket (0 skips)")
    ap.add_argument("--rows", type=int, default=500, help="rows per level-0 file")
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    args = ap.parse_args()

    def ints(s: str) -> list[int]:
        return [int(x) for x in s.split(",") if x.strip()]

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        base = Path(tmp)
        history = bench_history(base, ints(args.versions))
        throughput = bench_throughput(base, ints(args.processes), args.commits)
        merge = bench_merge(base, args.files, args.rows) if args.files else None
        report(history, throughput, merge)


if __name__ == "__main__":
    main()
