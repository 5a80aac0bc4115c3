"""Benchmark of maintd maintenance against its peers, on the workload of ../shared/bench (same run, same machine).

    .venv/bin/python bench/bench_maintenance.py [--buckets 16 --commits 200 --rows 4000] [--layout partitioned|hashed]

1. generate the workload (gen_workload.py: BUCKETS x COMMITS small files);
2. ingest it through ``Table.write_changes`` as one commit per file (``__op`` is the op column, ``__seq``
   dropped: our row versions come from commits). ``partitioned`` (default) keeps the peers' layout: the
   workload's bucket becomes a partition column with one bucket each, so the input is the same 3,200
   files. ``hashed`` lets the table re-bucket by its own hash (16 buckets): each micro-batch then
   writes 16 files, 16x the peers' file count;
3. run the DuckDB dedupe peer and the delta-rs optimize.compact peer on the workload (right before
   maintd's steps, so that all timed steps see about the same machine);
4. time clustering of every level-0 file (one plan task per bucket, packed into one Spark task per
   core) and a full compaction of the same level-0 files (a copy of the table), each plan + execute +
   commit, on a warm local SparkSession as in the daemon's long-lived session: workers started and
   prepared by ``warm_up``, then one untimed clustering of a third copy of the table (its time is
   printed as the first run of the session: the JVM compiles the task path's hot methods then);
5. read time of the table before and after, peak memory (sum of RSS over this process and its
   descendants: the JVM and the Python workers), and the ratios to the peers.

``--input-bytes``, ``--pack-threads`` and ``--read-threads`` override the execution options (defaults: 256 MiB
of input per Spark task and at least one per core, one plan task at a time in each, 4 read threads per task).
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
PEERS = Path(os.environ.get("MAINTD_PEERS_DIR", ROOT.parent / "shared" / "bench"))
SCHEMA_HASHED = "pk:int64,name:string,amount:float64,qty:int32,note:string"
SCHEMA_PARTITIONED = "pk:int64,wb:string,name:string,amount:float64,qty:int32,note:string"


class PeakRss:
    """Samples the summed RSS of this process and all its descendants every ``interval`` seconds."""

    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, tree_rss(os.getpid()))
            self._stop.wait(self.interval)


def tree_rss(pid: int) -> int:
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    page = os.sysconf("SC_PAGE_SIZE")
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
            fields = stat.rsplit(")", 1)[1].split()
            parents[int(d)] = int(fields[1])
            rss[int(d)] = int(fields[21]) * page
        except (OSError, IndexError, ValueError):
            continue
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo += [c for c, pp in parents.items() if pp == p]
    return total


def run_peer(script: str, *args: str) -> float:
    out = subprocess.run([sys.executable, str(PEERS / script), *args], capture_output=True, text=True, check=True)
    line = out.stdout.strip().splitlines()[-1]
    print(f"  peer: {line}")
    m = re.search(r" ([\d.]+)s", line)
    assert m, line
    return float(m.group(1))


def ingest(wl: Path, uri: str, layout: str) -> tuple[float, int]:
    from maintd import Table

    if layout == "hashed":
        table = Table.create(uri, SCHEMA_HASHED, primary_key="pk", buckets=16)
    else:
        table = Table.create(uri, SCHEMA_PARTITIONED, primary_key="pk", partition_by="wb", buckets=1)
    files = sorted(glob.glob(f"{wl}/bucket=*/*.parquet"), key=lambda f: (Path(f).name, f))
    t0 = time.monotonic()
    for i, f in enumerate(files):
        t = pq.read_table(f).drop_columns(["__seq"])
        if layout != "hashed":
            t = t.append_column("wb", pa.array([f.split("bucket=")[1].split("/")[0]] * t.num_rows))
        table.write_changes(t, "__op")
        if (i + 1) % 800 == 0:
            print(f"  ingested {i + 1}/{len(files)} commits, {time.monotonic() - t0:.0f} s", flush=True)
    return time.monotonic() - t0, len(files)


def full_plan(table, kind: str):  # type: ignore[no-untyped-def]
    from maintd.execution import PlanDoc, PlanTaskDoc

    snap = table.snapshot()
    tasks = [PlanTaskDoc(task_id=f"{kind}-{i}", kind=kind, partition=dict(part), bucket=b,  # type: ignore[arg-type]
                         target_level=1 if kind == "cluster" else None, inputs=tuple(f.path for f in fs))
             for i, ((part, b), fs) in enumerate(sorted(snap.by_bucket().items(), key=lambda kv: str(kv[0])))]
    return PlanDoc(table_uri=table.uri, read_version=snap.version, tasks=tuple(tasks))


def timed_maintenance(table, kind: str, spark, options) -> tuple[float, dict[str, int]]:  # type: ignore[no-untyped-def]
    from maintd.execution import commit_rewrites, execute

    t0 = time.monotonic()
    plan = full_plan(table, kind)
    t1 = time.monotonic()
    results = execute(plan, table, spark, options)
    t2 = time.monotonic()
    outcome = commit_rewrites(table, plan, results)
    dt = time.monotonic() - t0
    task_s = sum(r.seconds for r in results)
    phases = {p: sum(r.phases.get(p, 0.0) for r in results) for p in ("read", "merge", "write")}
    print(f"  {kind}: plan {t1 - t0:.2f} s, execute {t2 - t1:.2f} s (task time {task_s:.1f} s: "
          + ", ".join(f"{p} {v:.1f} s" for p, v in phases.items())
          + f"), commit {time.monotonic() - t2:.2f} s", flush=True)
    assert outcome.version is not None and not outcome.failed, outcome
    modes = {m: sum(1 for r in results if r.mode == m) for m in {r.mode for r in results}}
    return dt, {"tasks": len(results), "in": sum(len(r.inputs) for r in results),
                "out": sum(len(r.adds) for r in results), **modes}


def timed_read(table) -> tuple[float, int]:  # type: ignore[no-untyped-def]
    best, rows = float("inf"), 0
    for _ in range(2):
        t0 = time.monotonic()
        rows = table.read().num_rows
        best = min(best, time.monotonic() - t0)
    return best, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--buckets", type=int, default=16)
    ap.add_argument("--commits", type=int, default=200)
    ap.add_argument("--rows", type=int, default=4000)
    ap.add_argument("--layout", choices=["partitioned", "hashed"], default="partitioned")
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one, removed after)")
    ap.add_argument("--input-bytes", default="256m", help="input per Spark task (default 256m; at least one per core)")
    ap.add_argument("--pack-threads", type=int, default=1, help="plan tasks at once in one Spark task")
    ap.add_argument("--read-threads", type=int, default=4, help="file-decoding threads per plan task")
    args = ap.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="maintd-bench-"))
    wl = work / "wl"
    if not wl.exists():
        subprocess.run([sys.executable, str(PEERS / "gen_workload.py"), str(wl), str(args.buckets),
                        str(args.commits), str(args.rows)], check=True)
    nbytes = sum(os.path.getsize(f) for f in glob.glob(f"{wl}/bucket=*/*.parquet"))
    print(f"workload: {nbytes / 1e6:.0f} MB in {args.buckets * args.commits} files at {wl}")

    from maintd import Table
    from maintd.execution import ExecutionOptions, spark_session, warm_up
    from maintd.execution.spark import parse_size

    options = ExecutionOptions(task_input_bytes=parse_size(args.input_bytes), pack_threads=args.pack_threads,
                               read_threads=args.read_threads)

    a_uri, b_uri = str(work / f"t_{args.layout}"), str(work / f"t_{args.layout}_copy")
    c_uri = str(work / f"t_{args.layout}_warmup")
    for uri in (a_uri, b_uri, c_uri):
        shutil.rmtree(uri, ignore_errors=True)
    ingest_s, commits = ingest(wl, a_uri, args.layout)
    print(f"  ingest: {commits} commits in {ingest_s:.1f} s ({commits / ingest_s:.0f} commits/s)")
    shutil.copytree(a_uri, b_uri)
    shutil.copytree(a_uri, c_uri)
    a, b, c = Table.open(a_uri), Table.open(b_uri), Table.open(c_uri)
    files0 = len(a.snapshot().files)
    read_before, rows = timed_read(a)
    expected = a.read().sort_by("pk")
    duck = run_peer("peer_duckdb_dedupe.py", str(wl), str(work / "out_duckdb"))
    delta = run_peer("peer_deltars_compact.py", str(wl), str(work / "out_deltars"))

    with PeakRss() as rss:
        spark = spark_session(None, conf={"spark.master": args.master, "spark.driver.memory": "1g"})
        # start the Python workers, import maintd in them and prepare them: a daemon's session is warm
        warm_up(spark, options)
        print(f"  Spark: {spark.sparkContext.master}, {args.input_bytes} of input per Spark task (at least "
              f"{spark.sparkContext.defaultParallelism}), {options.pack_threads} plan task(s) at once in each, "
              f"{options.read_threads} read threads per plan task", flush=True)
        first_s, _ = timed_maintenance(c, "cluster", spark, options)
        shutil.rmtree(c_uri, ignore_errors=True)
        cluster_s, cstats = timed_maintenance(a, "cluster", spark, options)
        compact_s, kstats = timed_maintenance(b, "compact", spark, options)
        recompact_s, rstats = timed_maintenance(a, "compact", spark, options)
        spark.stop()
    read_after, rows_after = timed_read(b)
    assert rows_after == rows and b.read().sort_by("pk").equals(expected), "read after compaction differs"
    assert a.read().sort_by("pk").equals(expected), "read after clustering + compaction differs"

    print(f"\nmaintd ({args.layout}, {files0} level-0 files, {rows:,} visible rows)")
    print(f"  clustering of all level-0 files: {cluster_s:.2f} s  {cstats}")
    print(f"    vs delta-rs compact {cluster_s / delta:.2f}x, vs DuckDB dedupe {cluster_s / duck:.2f}x")
    print(f"  full compaction of the level-0 files: {compact_s:.2f} s  {kstats}")
    print(f"    vs delta-rs compact {compact_s / delta:.2f}x, vs DuckDB dedupe {compact_s / duck:.2f}x")
    print(f"  compaction after clustering (L1 -> base): {recompact_s:.2f} s  {rstats}")
    print(f"  first clustering of the session (untimed warm-up, a copy of the table): {first_s:.2f} s")
    print(f"  read: {read_before:.2f} s before, {read_after:.2f} s after ({read_before / read_after:.1f}x)")
    print(f"  peak memory (driver + JVM + Python workers): {rss.peak / 2**20:.0f} MiB")
    print(f"  ingest: {ingest_s:.1f} s for {commits} commits")
    if not args.dir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
