"""Read benchmarks: the change feed against the full diff, and merge-on-read of one bucket against DuckDB.

    .venv/bin/python bench/bench_reads.py [--rows 1000000 --changed 0.01 --files 200 --file-rows 5000 --samples 5]

1. ``changes``: a table of ROWS rows (8 columns, 16 buckets, ``changes.prior.rows=lookup``), written as one
   commit and compacted (one BaseFile of about 62,500 rows per bucket), then 20 commits (10 upserts, 10
   deletes) that together change CHANGED of the rows (80% updates of existing keys, 10% deletes, 10% new
   keys). Timed: ``Table.changes(s, e)`` (the incremental feed) and ``Table.full_changes(s, e)`` (the diff of
   two full reads of the touched buckets) over those commits, results checked equal, and, as the floor of a
   feed that must read the prior rows from the data files (changed keys fall in every row group), decoding
   once every file of (s, e] and every file of the touched buckets at s. Five steps: (1) before any
   maintenance, (2) the clustering of each bucket's 20 level-0 files into one level-1 file, on copies of the
   table with the lookup on and off (what looking the prior rows up costs), (3) after it, when the feed
   reads the rows the clustering looked up, (4) the compaction that folds the bucket, with prior rows on and
   off, (5) after it. ``--prior-rows true``: compactions only store prior rows (step 2 is then not timed).
   ``--task-memory`` gives that compaction's units a memory budget (e.g. ``8m``: they
   merge through spilled runs).
2. merge-on-read: a one-bucket table of FILES level-0 files (one commit each, FILE_ROWS rows, keys drawn
   with repeats across files, 20% deletes). Timed: ``Table.read()`` against DuckDB reading the same files
   with the same dedupe: the version of each file comes from the table's log (it is not in the file), the
   greatest version per key wins, deletes dropped. The row counts and contents are checked equal.

Every step is sampled SAMPLES times, alternating contenders; printed: each sample, median and spread
(min-max), and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa

SCHEMA = pa.schema([pa.field("pk", pa.int64(), nullable=False), ("name", pa.string()), ("amount", pa.float64()),
                    ("qty", pa.int32()), ("note", pa.string()), ("score", pa.float64()), ("flag", pa.bool_()),
                    ("ts", pa.int64())])


def rows(rng: np.random.Generator, keys: np.ndarray) -> pa.Table:
    n = len(keys)
    return pa.table({
        "pk": pa.array(keys, pa.int64()), "name": pa.array([f"user-{k:012d}" for k in keys]),
        "amount": pa.array(rng.random(n) * 1000), "qty": pa.array(rng.integers(0, 1000, n, dtype=np.int32)),
        "note": pa.array(rng.choice(["alpha", "beta", "gamma", "delta"], n)), "score": pa.array(rng.random(n)),
        "flag": pa.array(rng.random(n) < 0.5), "ts": pa.array(rng.integers(0, 10**12, n))}, schema=SCHEMA)


def sample(fns: dict[str, Callable[[], object]], samples: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {k: [] for k in fns}
    for s in range(samples):
        for name in (list(fns) if s % 2 == 0 else list(reversed(fns))):
            t0 = time.perf_counter()
            fns[name]()
            out[name].append(time.perf_counter() - t0)
    return out


def report(title: str, times: dict[str, list[float]], ours: str, peer: str) -> None:
    print(title)
    for k, v in times.items():
        print(f"  {k:24s} median {statistics.median(v) * 1000:8.1f} ms  spread {min(v) * 1000:.1f}-"
              f"{max(v) * 1000:.1f} ms  samples {', '.join(f'{x * 1000:.0f}' for x in v)}")
    m_ours, m_peer = statistics.median(times[ours]), statistics.median(times[peer])
    print(f"  ratio {ours} / {peer}: {m_ours / m_peer:.3f}x ({m_peer / m_ours:.1f}x faster)" if m_ours < m_peer
          else f"  ratio {ours} / {peer}: {m_ours / m_peer:.3f}x")


def compact(table, task_memory: int | None = None, kind: str = "compact") -> list:  # type: ignore[no-untyped-def,type-arg]
    """Compact every bucket of ``table`` in process (as the daemon runs small tables), committed; with a
    ``task_memory`` budget (bytes) per unit, if given. ``kind="cluster"``: merge each bucket's DeltaFiles into
    one level-1 file instead (a clustering)."""
    from maintd.execution import ExecutionOptions, PlanDoc, PlanTaskDoc, commit_rewrites, run_plan

    snap = table.snapshot()
    tasks = tuple(PlanTaskDoc(task_id=f"{kind}-{b}", kind=kind, partition=dict(part), bucket=b,
                              inputs=tuple(sorted(f.path for f in files if kind == "compact" or f.kind == "delta")),
                              target_level=None if kind == "compact" else 1)
                  for (part, b), files in sorted(snap.by_bucket().items(), key=lambda kv: kv[0][1]))
    plan = PlanDoc(table_uri=table.uri, read_version=snap.version, tasks=tasks)
    options = ExecutionOptions() if task_memory is None else ExecutionOptions(task_memory_bytes=task_memory)
    results = run_plan(plan, table, None, options).results
    assert all(r.ok for r in results) and commit_rewrites(table, plan, results).committed
    return results


def bench_changes(work: Path, nrows: int, changed: float, samples: int, task_memory: int | None = None,
                  prior_rows: str = "lookup") -> None:
    from maintd import Table

    rng = np.random.default_rng(3)
    table = Table.create(str(work / "changes"), SCHEMA, primary_key="pk", buckets=16,
                         properties={"changes.prior.rows": prior_rows})
    table.upsert(rows(rng, np.arange(nrows)))
    compact(table)  # the table as maintenance keeps it: one BaseFile per bucket
    start = table.version
    n = int(nrows * changed)
    per = n // 10
    for _ in range(10):
        upd = rng.choice(nrows, int(per * 0.8), replace=False)
        new = rng.integers(nrows, nrows * 2, per - int(per * 0.8) - per // 10)
        table.upsert(rows(rng, np.concatenate([upd, new])))
        table.delete(pa.table({"pk": pa.array(rng.choice(nrows, per // 10, replace=False), pa.int64())}))
    end = table.version
    print(f"changes: {nrows:,} rows in 16 buckets (one BaseFile each), {end - start} commits changing {n:,} rows "
          f"({changed:.1%})")
    feed_steps(table, start, end, samples, "1. before any maintenance: prior rows are in the BaseFiles")
    if prior_rows == "lookup":
        maintenance_cost(work, table, samples, None, "cluster", "2. the clustering of those level-0 files")
    compact(table, kind="cluster")
    feed_steps(table, start, end, samples, f"3. after the clustering (changes.prior.rows={prior_rows}), "
               "no compaction yet")
    maintenance_cost(work, table, samples, task_memory, "compact", "4. the compaction that folds them")
    modes = sorted({r.mode for r in compact(table, task_memory)})
    print(f"   the compaction's units merged: {', '.join(modes)}")
    feed_steps(table, start, end, samples, "5. after it (its prior rows answer for the BaseFiles)")


def feed_steps(table, start: int, end: int, samples: int, title: str) -> None:  # type: ignore[no-untyped-def]
    a, b = table.changes(start, end), table.full_changes(start, end)
    assert a.sort_by("pk").equals(b.sort_by("pk")), "the change feed differs from the full diff"
    print(f"{title}; {a.num_rows:,} changed keys")
    times = sample({"changes (incremental)": lambda: table.changes(start, end),
                    "full diff": lambda: table.full_changes(start, end),
                    "decode once (floor)": lambda: decode_once(table, start, end)}, samples)
    report("", times, "changes (incremental)", "full diff")
    report("", {k: times[k] for k in ("changes (incremental)", "decode once (floor)")}, "changes (incremental)",
           "decode once (floor)")


def maintenance_cost(work: Path, table, samples: int, task_memory: int | None, kind: str,  # type: ignore[no-untyped-def]
                     title: str) -> None:
    """What storing prior rows costs the clustering (looked up) or the compaction that takes the changes: the
    same task on copies of the table, with ``changes.prior.rows`` as it is and without what the task stores
    (each sample on a fresh copy)."""
    from maintd import Table

    name = "clustering" if kind == "cluster" else "compaction"
    off = "true" if kind == "cluster" else "false"  # a clustering looks up with "lookup" only
    times: dict[str, list[float]] = {f"{name}, prior rows": [], f"{name}, none": []}
    written: dict[str, int] = {}
    for s in range(samples):
        for label in (list(times) if s % 2 == 0 else list(reversed(times))):
            copy = work / f"copy-{s}-{len(written)}-{label.split()[-1]}"
            shutil.copytree(table.uri, copy)
            t = Table.open(str(copy))
            if label.endswith("none"):
                t.set_properties({"changes.prior.rows": off})
            t0 = time.perf_counter()
            results = compact(t, task_memory, kind)
            times[label].append(time.perf_counter() - t0)
            written[label] = sum(a.bytes for r in results for a in r.adds)
            written[label + " (prior rows)"] = sum(p.bytes for r in results for p in r.priors)
            shutil.rmtree(copy, ignore_errors=True)
    print(f"{title} (in process), data files written {written[f'{name}, none'] / 1e6:.1f} MB; prior-rows files "
          f"{written[f'{name}, prior rows (prior rows)'] / 1e6:.2f} MB")
    report("", times, f"{name}, prior rows", f"{name}, none")


def decode_once(table, start: int, end: int) -> None:  # type: ignore[no-untyped-def]
    """Every file the feed must look at decoded once, every column, on the feed's threads: the files of
    (start, end] and the files live at ``start`` in the buckets they touch. With changed keys spread over
    every row group, no incremental feed can read less than this (it needs the prior rows of those keys)."""
    from concurrent.futures import ThreadPoolExecutor

    from maintd.table.files.datafiles import read_data_file
    from maintd.table.log.snapshot import partition_key

    before, after = table.snapshot(start), table.snapshot(end)
    md = after.metadata
    new = [f for p, f in after.files.items() if p not in before.files]
    groups = {(partition_key(f.partition, md.partition_by), f.bucket or 0) for f in new}
    old = [f for g, fs in before.by_bucket().items() if g in groups for f in fs]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda f: read_data_file(table.storage, md, f, threads=False), new + old))


def bench_merge_on_read(work: Path, nfiles: int, file_rows: int, samples: int) -> None:
    import duckdb

    from maintd import Table

    rng = np.random.default_rng(5)
    table = Table.create(str(work / "mor"), SCHEMA, primary_key="pk", buckets=1)
    keyspace = nfiles * file_rows // 3
    for _ in range(nfiles):
        keys = np.unique(rng.zipf(1.3, file_rows) % keyspace)
        t = rows(rng, keys)
        ops = (rng.random(len(keys)) < 0.2).astype(np.int8)
        table.write_changes(t.append_column("op", pa.array(ops)), "op")
    snap = table.snapshot()
    files = sorted(snap.files.values(), key=lambda f: f.min_version)
    assert len(files) == nfiles and len(snap.by_bucket()) == 1
    versions = pa.table({"filename": [table.storage.full_path(f.path) for f in files],
                         "version": [f.min_version for f in files]})
    con = duckdb.connect()
    con.register("versions", versions)
    paths = versions.column("filename").to_pylist()
    cols = ", ".join(SCHEMA.names)
    query = f"""SELECT {cols} FROM (
        SELECT d.*, row_number() OVER (PARTITION BY pk ORDER BY v.version DESC) rn
        FROM read_parquet({paths!r}, filename = true) d JOIN versions v USING (filename))
        WHERE rn = 1 AND _maintd_op = 0"""

    def duck() -> pa.Table:
        return con.sql(query).to_arrow_table()

    ours = table.read().sort_by("pk")
    theirs = duck()
    theirs = (theirs.read_all() if hasattr(theirs, "read_all") else theirs).sort_by("pk").cast(ours.schema)
    assert ours.equals(theirs), "DuckDB's dedupe differs from maintd's merge-on-read"
    nbytes = sum(f.bytes for f in files)
    print(f"merge-on-read: one bucket of {nfiles} level-0 files ({nbytes / 1e6:.1f} MB, "
          f"{sum(f.rows for f in files):,} row versions, {ours.num_rows:,} visible rows)")
    times = sample({"maintd Table.read": table.read, "DuckDB same dedupe": duck}, samples)
    report("", times, "maintd Table.read", "DuckDB same dedupe")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--changed", type=float, default=0.01)
    ap.add_argument("--files", type=int, default=200)
    ap.add_argument("--file-rows", type=int, default=5000)
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--only", choices=["changes", "mor"], default=None)
    ap.add_argument("--prior-rows", choices=["lookup", "true"], default="lookup",
                    help="the table's changes.prior.rows: lookup (clusterings look up too) or true (compactions only)")
    ap.add_argument("--task-memory", default=None,
                    help="memory budget of a compaction unit in step 2 and 3 of 'changes' (e.g. 8m: the units "
                         "merge through spilled runs, as those of buckets far larger than their budget do)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="maintd-bench-reads-"))
    try:
        if args.only in (None, "changes"):
            from maintd.execution.spark import parse_size

            memory = None if args.task_memory is None else parse_size(args.task_memory)
            bench_changes(work, args.rows, args.changed, args.samples, memory, args.prior_rows)
        if args.only in (None, "mor"):
            bench_merge_on_read(work, args.files, args.file_rows, args.samples)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
