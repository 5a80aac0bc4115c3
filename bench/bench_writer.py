"""Writer benchmark: maintd's micro-batch commit against delta-rs writing the same batches with the same file count.

    .venv/bin/python bench/bench_writer.py [--batches 60 --rows 12000 --partitions 3 --buckets 32 --samples 3]
    .venv/bin/python bench/bench_writer.py --profile out.prof     # cProfile of one maintd sample

Workload: BATCHES micro-batches of ROWS rows with 20 columns (int64 key, a partition string of PARTITIONS values,
18 value columns of int, float, string, bool and timestamp types), keys drawn from a space three times the batch
size so batches update earlier rows, and every key unique within its batch (both writers get exactly the same
rows: maintd's writer would keep the last of a repeated key, delta-rs would keep both).

* maintd: a table partitioned by ``part`` with BUCKETS buckets; ``Table.upsert`` of each batch is one commit of
  PARTITIONS x BUCKETS level-0 files (hashing, splitting, sorting, statistics and durability included).
* delta-rs: ``write_deltalake(mode="append", partition_by=["part", "bucket"])`` of the same batch with maintd's
  bucket column precomputed (untimed), so each commit writes the same PARTITIONS x BUCKETS files.

Each sample writes all batches into a new table for each writer, alternating writers so that both see about the
same machine; a sample's figure is the median commit time over its batches. Printed: every sample, the median
and spread (min-max) over samples, and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa


def make_batches(n: int, rows: int, partitions: int, seed: int = 11) -> list[pa.Table]:
    rng = np.random.default_rng(seed)
    keyspace = rows * 3
    out = []
    words = np.array(["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"])
    for i in range(n):
        keys = rng.choice(keyspace * max(1, i // 10 + 1), rows, replace=False).astype(np.int64)
        cols: dict[str, pa.Array] = {
            "pk": pa.array(keys),
            "part": pa.array(np.array([f"p{j}" for j in range(partitions)])[keys % partitions]),
        }
        for j in range(5):
            cols[f"i{j}"] = pa.array(rng.integers(0, 1_000_000, rows, dtype=np.int64))
        for j in range(5):
            cols[f"f{j}"] = pa.array(rng.random(rows) * 1000)
        for j in range(4):
            cols[f"s{j}"] = pa.array(words[rng.integers(0, len(words), rows)].astype(object) + f"-{j}")
        cols["b0"] = pa.array(rng.random(rows) < 0.5)
        cols["b1"] = pa.array(rng.random(rows) < 0.1)
        cols["t0"] = pa.array((1_700_000_000_000_000 + rng.integers(0, 10**12, rows)).astype("datetime64[us]"))
        cols["t1"] = pa.array((1_700_000_000_000_000 + rng.integers(0, 10**12, rows)).astype("datetime64[us]"))
        out.append(pa.table(cols))
    return out


def maintd_sample(batches: list[pa.Table], uri: str, buckets: int) -> list[float]:
    from maintd import Table

    schema = batches[0].schema
    schema = schema.set(schema.get_field_index("pk"), schema.field("pk").with_nullable(False))
    table = Table.create(uri, schema, primary_key="pk", partition_by="part", buckets=buckets)
    times = []
    for b in batches:
        t0 = time.perf_counter()
        table.upsert(b)
        times.append(time.perf_counter() - t0)
    return times


def deltars_sample(batches: list[pa.Table], uri: str) -> list[float]:
    from deltalake import write_deltalake

    times = []
    for b in batches:
        t0 = time.perf_counter()
        write_deltalake(uri, b, mode="append", partition_by=["part", "bucket"])
        times.append(time.perf_counter() - t0)
    return times


def files_per_commit(uri: str) -> int:
    from maintd import Table

    t = Table.open(uri)
    return t.history(limit=1)[0].files_added


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=60)
    ap.add_argument("--rows", type=int, default=12000)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--buckets", type=int, default=32)
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--profile", default=None, help="write a cProfile of one maintd sample here and stop")
    args = ap.parse_args()
    from maintd.table.files.bucketing import bucket_of

    batches = make_batches(args.batches, args.rows, args.partitions)
    with_bucket = [b.append_column("bucket", pa.array(bucket_of(b, ["pk"], args.buckets), pa.int32()))
                   for b in batches]
    work = Path(tempfile.mkdtemp(prefix="maintd-bench-writer-"))
    try:
        if args.profile:
            import cProfile

            cProfile.runctx("maintd_sample(batches, uri, args.buckets)", globals(),
                            {"batches": batches, "uri": str(work / "prof"), "args": args}, args.profile)
            return
        print(f"workload: {args.batches} batches x {args.rows:,} rows, {batches[0].num_columns} columns, "
              f"{args.partitions} partitions x {args.buckets} buckets")
        med: dict[str, list[float]] = {"maintd": [], "delta-rs": []}
        totals: dict[str, list[float]] = {"maintd": [], "delta-rs": []}
        for s in range(args.samples):
            order = ["maintd", "delta-rs"] if s % 2 == 0 else ["delta-rs", "maintd"]
            for who in order:
                uri = str(work / f"{who}-{s}")
                times = maintd_sample(batches, uri, args.buckets) if who == "maintd" else deltars_sample(
                    with_bucket, uri)
                files = files_per_commit(uri) if who == "maintd" else len(
                    list(Path(uri).glob("part=*/bucket=*/*.parquet"))) // args.batches
                med[who].append(statistics.median(times))
                totals[who].append(sum(times))
                print(f"  sample {s + 1} {who:8s}: median commit {statistics.median(times) * 1000:7.1f} ms, "
                      f"total {sum(times):6.2f} s, {files} files per commit", flush=True)
                shutil.rmtree(uri, ignore_errors=True)
        for who in med:
            m = med[who]
            print(f"{who:8s}: median commit {statistics.median(m) * 1000:.1f} ms (samples {min(m) * 1000:.1f}-"
                  f"{max(m) * 1000:.1f} ms), total {statistics.median(totals[who]):.2f} s median")
        ratio = statistics.median(med["maintd"]) / statistics.median(med["delta-rs"])
        print(f"ratio maintd / delta-rs (median commit): {ratio:.2f}x; totals "
              f"{statistics.median(totals['maintd']) / statistics.median(totals['delta-rs']):.2f}x")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
