"""Read benchmarks: the change feed against the full diff, and merge-on-read of one bucket against DuckDB.

    .venv/bin/python bench/bench_reads.py [--rows 1000000 --changed 0.01 --files 200 --file-rows 5000 --samples 5]

1. ``changes``: a table of ROWS rows (8 columns, 16 buckets, written as one commit: one file of about
   62,500 rows per bucket), then 10 commits that together change CHANGED of the rows (80% updates of
   existing keys, 10% deletes, 10% new keys). Timed: ``Table.changes(v1, v11)`` (the incremental feed) and
   ``Table.full_changes(v1, v11)`` (the diff of two full reads of the touched buckets); their results are
   checked equal. Also timed, as the floor of any incremental feed when changed keys fall in every row
   group: decoding once every file of (v1, v11] and every file of the touched buckets at v1.
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

SCHEMA = pa.schema([("pk", pa.int64()), ("name", pa.string()), ("amount", pa.float64()), ("qty", pa.int32()),
                    ("note", pa.string()), ("score", pa.float64()), ("flag", pa.bool_()), ("ts", pa.int64())])


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


def bench_changes(work: Path, nrows: int, changed: float, samples: int) -> None:
    from maintd import Table

    rng = np.random.default_rng(3)
    table = Table.create(str(work / "changes"), SCHEMA, primary_key="pk", buckets=16)
    start = table.upsert(rows(rng, np.arange(nrows)))
    n = int(nrows * changed)
    per = n // 10
    for _ in range(10):
        upd = rng.choice(nrows, int(per * 0.8), replace=False)
        new = rng.integers(nrows, nrows * 2, per - int(per * 0.8) - per // 10)
        table.upsert(rows(rng, np.concatenate([upd, new])))
        table.delete(pa.table({"pk": pa.array(rng.choice(nrows, per // 10, replace=False), pa.int64())}))
    end = table.version
    a, b = table.changes(start, end), table.full_changes(start, end)
    assert a.sort_by("pk").equals(b.sort_by("pk")), "the change feed differs from the full diff"
    print(f"changes: {nrows:,} rows in 16 buckets, {end - start} commits changing {n:,} rows "
          f"({changed:.1%}); {a.num_rows:,} changed keys")
    times = sample({"changes (incremental)": lambda: table.changes(start, end),
                    "full diff": lambda: table.full_changes(start, end),
                    "decode once (floor)": lambda: decode_once(table, start, end)}, samples)
    report("", times, "changes (incremental)", "full diff")
    report("", {k: times[k] for k in ("changes (incremental)", "decode once (floor)")}, "changes (incremental)",
           "decode once (floor)")


def decode_once(table, start: int, end: int) -> None:  # type: ignore[no-untyped-def]
    """Every file the feed must look at decoded once, every column, on the feed's threads: the files of
    (start, end] and the files live at ``start`` in the buckets they touch. With changed keys spread over
    every row group, no incremental feed can read less than this (it needs the prior rows of those keys)."""
    from concurrent.futures import ThreadPoolExecutor

    from maintd.table.files import read_data_file
    from maintd.table.snapshot import partition_key

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
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="maintd-bench-reads-"))
    try:
        if args.only in (None, "changes"):
            bench_changes(work, args.rows, args.changed, args.samples)
        if args.only in (None, "mor"):
            bench_merge_on_read(work, args.files, args.file_rows, args.samples)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
