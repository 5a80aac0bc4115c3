"""Benchmark of maintd maintenance against its peers, on the workload of ../shared/bench (same run, same machine).

    .venv/bin/python bench/bench_maintenance.py [--buckets 16 --commits 200 --rows 4000] [--layout partitioned|hashed]
    .venv/bin/python bench/bench_maintenance.py --workload wide [--text-columns 24 --buckets 8 --commits 60 --rows 1000]

1. generate the workload (gen_workload.py: BUCKETS x COMMITS small files). ``--workload wide`` instead
   writes COMMITS micro-batches of ROWS rows straight into a table hashed into BUCKETS buckets: keys drawn
   uniformly (every micro-batch touches every bucket, so every bucket gets one small file per commit),
   20% deletes, and ``--text-columns`` text columns, half of them high-cardinality tokens of 12 to 40
   characters, a quarter of a few thousand values, a quarter of a dozen (written as dictionaries), beside
   one integer and one float column: the wide, string-heavy shape where decoding and encoding text dominate;
2. ingest it through ``Table.write_changes`` as one commit per file (``__op`` is the op column, ``__seq``
   dropped: our row versions come from commits). ``partitioned`` (default) keeps the peers' layout: the
   workload's bucket becomes a partition column with one bucket each, so the input is the same 3,200
   files. ``hashed`` lets the table re-bucket by its own hash (16 buckets): each micro-batch then
   writes 16 files, 16x the peers' file count;
3. export the table's own level-0 files for the peers (same rows): a writer keeps one row per key of a
   micro-batch, so the table holds fewer row versions than the raw workload. Each level-0 file is copied
   to ``same/bucket=B/cVVVVVV.parquet`` with ``__seq`` = its version from the log (the version is in the
   log, not in the file) and ``__op`` = its op column; the peers read exactly these rows;
4. SAMPLES times each, in an order rotated by one each sample (:func:`rotated`; the seconds each contender was idle
   before its runs are printed): the DuckDB dedupe peer and the delta-rs optimize.compact peer on the exported files;
   maintd's clustering of every level-0 file and full compaction of the level-0 files, each on a fresh copy of the
   ingested table (plan + execute + commit, where the daemon would run it: in process when the plan's input is within
   ``spark.maintd.inProcess.maxInputBytes``, default 64 MiB (in the daemon's warm processes of the fork server, the
   server started before the samples as the daemon starts it; a step finds the processes the previous one left when
   they were idle for less than a minute, as the daemon's runs that follow each other do, and those it lacks (a
   delta-rs peer's untimed set-up can outlast a minute) are started before the step, untimed as each peer's process
   start is; ``--cold`` ends them before every step of ours, as a daemon whose runs are minutes apart starts new
   ones; ``--in-process-workers threads``: in threads of this process), else on a warm local SparkSession as in the
   daemon's long-lived session: workers started by ``warm_up``, then one untimed clustering of a copy: the JVM
   compiles the task path's hot methods then. Spark stops Python workers idle for a minute, and the peers' runs
   between two steps of ours can take longer, so ``warm_up`` runs again (untimed) before every step on Spark, as each
   peer's process start and imports are untimed; ``--in-process-max-bytes 0`` runs every step on Spark; no session is
   started when every step runs in process), and compaction after clustering;
5. every step's samples, median and spread (min-max), and the ratios of the medians; read time of the
   table before and after, peak memory (sum of RSS over this process and its descendants), and, when the
   steps ran on Spark, Spark's floor: runs of one empty job per core at once, which every maintd step on
   Spark pays before any work.

``--input-bytes``, ``--pack-threads``, ``--read-threads`` and ``--decode-threads`` override the execution options
(defaults: 256 MiB of input per Spark task and at least one per core, one plan task at a time in each, 4 fetch
threads and 1 decoding thread per task).
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
PEERS = Path(os.environ.get("MAINTD_PEERS_DIR", ROOT.parent / "shared" / "bench"))
SCHEMA_HASHED = "pk:int64!,name:string,amount:float64,qty:int32,note:string"
SCHEMA_PARTITIONED = "pk:int64!,wb:string,name:string,amount:float64,qty:int32,note:string"


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


def settle() -> None:
    """Write back every dirty page before a timed step (the table copied for it, the previous step's output),
    so that no contender pays for another's writeback."""
    os.sync()


def run_peer(script: str, *args: str) -> float:
    settle()
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


def ingest_wide(uri: str, buckets: int, commits: int, rows: int, text_columns: int) -> tuple[float, int]:
    """The wide workload (``--workload wide``): COMMITS upserts-and-deletes micro-batches of uniform keys."""
    import numpy as np

    from maintd import Table

    rng = np.random.default_rng(11)
    high, mid = text_columns // 2, text_columns // 4  # the rest: a dozen values
    cols = [f"t{i:02d}:string" for i in range(text_columns)]
    table = Table.create(uri, ",".join(["pk:int64!", "qty:int64", "amount:float64", *cols]), primary_key="pk",
                         buckets=buckets)
    keyspace = rows * commits // 3  # about 3 versions per key
    alphabet = np.array(list("abcdefghijklmnopqrstuvwxyz0123456789"))
    mids = [f"value-{i:05d}-{'x' * (i % 17)}" for i in range(3000)]
    lows = ["pending", "shipped", "delivered", "returned", "cancelled", "on-hold", "refunded", "lost", "unknown",
            "draft", "paid", "void"]

    def tokens(n: int) -> pa.Array:
        lengths = rng.integers(12, 41, n)
        chars = alphabet[rng.integers(0, len(alphabet), int(lengths.sum()))]
        text = "".join(chars.tolist())
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(text.encode()))

    t0 = time.monotonic()
    for c in range(commits):
        keys = np.unique(rng.integers(0, keyspace, rows))  # one row per key in a micro-batch, as writers keep
        n = len(keys)
        data = {"pk": pa.array(keys, pa.int64()), "qty": pa.array(rng.integers(0, 10_000, n)),
                "amount": pa.array(rng.random(n) * 1000),
                "__op": pa.array((rng.random(n) < 0.2).astype(np.int8))}
        for i in range(text_columns):
            if i < high:
                data[f"t{i:02d}"] = tokens(n)
            elif i < high + mid:
                data[f"t{i:02d}"] = pa.array(np.array(mids, dtype=object)[rng.integers(0, len(mids), n)], pa.string())
            else:
                data[f"t{i:02d}"] = pa.array(np.array(lows, dtype=object)[rng.integers(0, len(lows), n)], pa.string())
        table.write_changes(pa.table(data), "__op")
        if (c + 1) % 20 == 0:
            print(f"  ingested {c + 1}/{commits} commits, {time.monotonic() - t0:.0f} s", flush=True)
    return time.monotonic() - t0, commits


def export_level0(table, out: Path) -> tuple[int, int, int]:  # type: ignore[no-untyped-def]
    """The table's level-0 files in the peers' layout: ``__seq`` = the file's version (from the log), written
    as maintd writes its level-0 files (``write_parquet`` with ``level0_options``: the same codecs, packed
    columns and dictionaries, and uncompressed where LZ4 cannot shrink a column's values)."""
    from maintd.table.files.datafiles import level0_options, read_data_file, write_parquet
    from maintd.table.files.dictionaries import dictionary_types

    snap = table.snapshot()
    md = snap.metadata
    rows = nbytes = 0
    for f in sorted(snap.files.values(), key=lambda f: (f.min_version, f.path)):
        assert f.kind == "delta" and f.level == 0, f
        t = read_data_file(table.storage, md, f)
        bucket = t.column("wb")[0].as_py() if "wb" in t.column_names else str(f.bucket)
        data = [c for c in t.column_names if c not in ("pk", "wb") and not c.startswith("_maintd")]
        t = pa.table({"pk": t.column("pk"), "__seq": pa.repeat(pa.scalar(f.min_version, pa.int64()), t.num_rows),
                      "__op": t.column("_maintd_op"), **{c: t.column(c) for c in data}})
        (out / f"bucket={bucket}").mkdir(parents=True, exist_ok=True)
        path = out / f"bucket={bucket}" / f"c{f.min_version:06d}-{f.bucket:03d}.parquet"
        # encoded as maintd encodes its level-0 files, so that every contender decodes the same encoding
        write_parquet(t, str(path), level0_options(t.schema, ["pk", "__seq", "__op"], t),  # packed, with statistics,
                      dictionary_types(t.schema, ["pk"]))  # the text columns of few values as dictionaries
        rows += t.num_rows
        nbytes += path.stat().st_size
    return len(snap.files), rows, nbytes


PEERS_SCRIPTS = {"duckdb": "peer_duckdb_dedupe.py", "deltars": "peer_deltars_compact.py"}
CONTENDERS = ("duckdb", "deltars", "maintd")
"""What runs in each sample: a peer's script, or maintd's three steps (clustering, compaction after it, full
compaction)."""


def rotated(contenders: Sequence[str], sample: int) -> list[str]:
    """The order of ``contenders`` in sample ``sample``: rotated by one each sample, so over a multiple of their
    number of samples each contender runs first, in the middle and last equally often, and waits as long before
    its runs as the others (what an order alternating between two halves does not give: the half that runs last
    in one sample and first in the next waits for nothing, then for both of the other half's runs)."""
    k = sample % len(contenders)
    return [*contenders[k:], *contenders[:k]]


def stats_line(name: str, xs: list[float]) -> str:
    return (f"{name:44s} median {statistics.median(xs):7.2f} s  spread {min(xs):.2f}-{max(xs):.2f} s  "
            f"samples {', '.join(f'{x:.2f}' for x in xs)}")


def full_plan(table, kind: str):  # type: ignore[no-untyped-def]
    from maintd.execution import PlanDoc, PlanTaskDoc

    snap = table.snapshot()
    tasks = [PlanTaskDoc(task_id=f"{kind}-{i}", kind=kind, partition=dict(part), bucket=b,  # type: ignore[arg-type]
                         target_level=1 if kind == "cluster" else None, inputs=tuple(f.path for f in fs))
             for i, ((part, b), fs) in enumerate(sorted(snap.by_bucket().items(), key=lambda kv: str(kv[0])))]
    return PlanDoc(table_uri=table.uri, read_version=snap.version, tasks=tuple(tasks))


def timed_maintenance(table, kind: str, spark, options, cold: bool = False  # type: ignore[no-untyped-def]
                      ) -> tuple[float, dict[str, int]]:
    """One step as the daemon runs it: in its own process when the plan's input is within
    ``options.in_process_max_bytes`` (``--in-process-max-bytes``), else on the Spark session. ``cold``: after
    ending the warm processes of plans run in process (untimed)."""
    from maintd.execution import commit_rewrites, execute
    from maintd.execution.driver import runs_in_process
    from maintd.execution.local import end_lanes

    if cold:
        end_lanes()
    elif spark is not None:  # untimed, as the peers' process start and imports are
        from maintd.execution.spark import warm_up

        warm_up(spark, options)  # Spark stops Python workers idle for a minute: the peers' runs can last longer
    elif options.in_process_workers == "processes":
        start_lanes(table, options)  # so do the lanes
    t0 = time.monotonic()
    plan = full_plan(table, kind)
    local = runs_in_process(plan, table.snapshot(plan.read_version), options)
    t1 = time.monotonic()
    results = execute(plan, table, None if local else spark, options)
    t2 = time.monotonic()
    outcome = commit_rewrites(table, plan, results)
    dt = time.monotonic() - t0
    task_s = sum(r.seconds for r in results)
    phases = {p: sum(r.phases.get(p, 0.0) for r in results) for p in ("read", "merge", "write")}
    print(f"  {kind} ({'in process' if local else 'on Spark'}): plan {t1 - t0:.2f} s, execute {t2 - t1:.2f} s "
          f"(task time {task_s:.1f} s: "
          + ", ".join(f"{p} {v:.1f} s" for p, v in phases.items())
          + f"), commit {time.monotonic() - t2:.2f} s", flush=True)
    assert outcome.version is not None and not outcome.failed, outcome
    modes = {m: sum(1 for r in results if r.mode == m) for m in {r.mode for r in results}}
    return dt, {"engine": "in-process" if local else "spark", "tasks": len(results),  # type: ignore[dict-item]
                "in": sum(len(r.inputs) for r in results), "out": sum(len(r.adds) for r in results), **modes}


def start_lanes(table, options) -> None:  # type: ignore[no-untyped-def]
    """A lane for every process a step in process runs at once, each started (forked from the fork server) by an
    empty pack, or found warm. A lane idle for a minute ends, and one delta-rs peer's run (its table's 480 commits,
    untimed) can take about that."""
    from concurrent.futures import ThreadPoolExecutor

    from maintd.execution.driver import in_process_threads
    from maintd.execution.local import ProcessBackend

    n = in_process_threads(options)
    backend = ProcessBackend(n, table.uri, options)
    with ThreadPoolExecutor(n) as pool:  # at once: each takes a lane of its own
        list(pool.map(lambda _: backend.run([[]]), range(n)))


def spark_floor(spark, options, cores: int) -> list[float]:  # type: ignore[no-untyped-def]
    """Seconds of runs that do nothing, as maintd runs packs: one Spark job per core at once, each one task
    of one empty pack. What every maintd step on Spark pays before any work (median of 5)."""
    from maintd.execution.scheduler import SparkBackend

    backend = SparkBackend(spark, options, "maintd bench: empty jobs")
    from concurrent.futures import ThreadPoolExecutor

    out = []
    for _ in range(5):
        t0 = time.monotonic()
        with ThreadPoolExecutor(cores) as pool:
            list(pool.map(lambda _: backend.run([[]]), range(cores)))
        out.append(time.monotonic() - t0)
    return out


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
    ap.add_argument("--workload", choices=["narrow", "wide"], default="narrow",
                    help="narrow: ../shared/bench/gen_workload.py; wide: many text columns, uniform keys (hashed)")
    ap.add_argument("--text-columns", type=int, default=24, help="text columns of the wide workload")
    ap.add_argument("--master", default="local[*]")
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one, removed after)")
    ap.add_argument("--input-bytes", default="256m", help="input per Spark task (default 256m; at least one per core)")
    ap.add_argument("--pack-threads", type=int, default=1, help="plan tasks at once in one Spark task")
    ap.add_argument("--read-threads", type=int, default=4, help="file-fetching threads per plan task")
    ap.add_argument("--decode-threads", type=int, default=1, help="file-decoding threads per plan task")
    ap.add_argument("--samples", type=int, default=3, help="samples of every step (default 3)")
    ap.add_argument("--in-process-max-bytes", default=None,
                    help="plans up to this input run in this process, as in the daemon (default: the daemon's, "
                         "64m); 0 runs every step on Spark")
    ap.add_argument("--cold", action="store_true",
                    help="end the warm processes of plans run in process before every step of ours")
    ap.add_argument("--in-process-workers", choices=["processes", "threads"], default="processes",
                    help="what runs the units of a plan in process (default: the daemon's, child processes)")
    args = ap.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="maintd-bench-"))
    wl = work / "wl"
    if args.workload == "wide":
        args.layout = "hashed"
    elif not wl.exists():
        subprocess.run([sys.executable, str(PEERS / "gen_workload.py"), str(wl), str(args.buckets),
                        str(args.commits), str(args.rows)], check=True)
    nbytes = sum(os.path.getsize(f) for f in glob.glob(f"{wl}/bucket=*/*.parquet"))
    if args.workload == "narrow":
        print(f"workload: {nbytes / 1e6:.0f} MB in {args.buckets * args.commits} files at {wl}")

    from maintd import Table
    from maintd.execution import ExecutionOptions, spark_session, warm_up
    from maintd.execution.spark import parse_size

    local_bytes = {} if args.in_process_max_bytes is None else {
        "in_process_max_bytes": parse_size(args.in_process_max_bytes)}
    options = ExecutionOptions(task_input_bytes=parse_size(args.input_bytes), pack_threads=args.pack_threads,
                               read_threads=args.read_threads, decode_threads=args.decode_threads,
                               in_process_workers=args.in_process_workers, **local_bytes)

    base_uri = str(work / f"t_{args.workload}_{args.layout}")
    shutil.rmtree(base_uri, ignore_errors=True)
    if args.workload == "wide":
        ingest_s, commits = ingest_wide(base_uri, args.buckets, args.commits, args.rows, args.text_columns)
        nbytes = Table.open(base_uri).snapshot().total_bytes()
        print(f"workload: wide, {args.text_columns} text columns, {args.commits} micro-batches of {args.rows} rows "
              f"into {args.buckets} buckets, {nbytes / 1e6:.0f} MB")
    else:
        ingest_s, commits = ingest(wl, base_uri, args.layout)
    print(f"  ingest: {commits} commits in {ingest_s:.1f} s ({commits / ingest_s:.0f} commits/s)")
    base = Table.open(base_uri)
    same = work / "same"
    shutil.rmtree(same, ignore_errors=True)
    files0, versions0, bytes0 = export_level0(base, same)
    print(f"  same rows for every contender: {files0} level-0 files, {versions0:,} row versions, "
          f"{bytes0 / 1e6:.1f} MB exported for the peers at {same} (raw workload: {nbytes / 1e6:.1f} MB)")
    read_before, rows = timed_read(base)
    expected = base.read().sort_by("pk")

    def fresh(name: str) -> Table:
        uri = str(work / name)
        shutil.rmtree(uri, ignore_errors=True)
        shutil.copytree(base_uri, uri)
        settle()
        return Table.open(uri)

    times: dict[str, list[float]] = {k: [] for k in ("duckdb", "deltars", "cluster", "compact", "recompact")}
    idle: dict[str, list[float]] = {k: [] for k in CONTENDERS}
    from maintd.execution.driver import runs_in_process

    # the full plan reads every file: if it runs in process, so does every step, and no session is started
    on_spark = not runs_in_process(full_plan(base, "cluster"), base.snapshot(), options)
    with PeakRss() as rss:
        if not on_spark and options.in_process_workers == "processes":
            from maintd.execution.local import start_fork_server

            t0 = time.monotonic()  # the daemon starts it once, at its own start (untimed here too)
            start_fork_server()
            print(f"  fork server for plans run in process started in {time.monotonic() - t0:.2f} s (untimed: "
                  "the daemon starts it once)", flush=True)
        spark = None
        first_s, floor = 0.0, []
        if on_spark:
            spark = spark_session(None, conf={"spark.master": args.master, "spark.driver.memory": "1g"})
            # start the Python workers, import maintd in them and prepare them: a daemon's session is warm
            warm_up(spark, options)
            print(f"  Spark: {spark.sparkContext.master}, {args.input_bytes} of input per Spark task (at least "
                  f"{spark.sparkContext.defaultParallelism}), {options.pack_threads} plan task(s) at once in each, "
                  f"{options.read_threads} fetch and {options.decode_threads} decoding thread(s) per plan task",
                  flush=True)
            first_s, _ = timed_maintenance(fresh("warmup"), "cluster", spark, options)
            floor = spark_floor(spark, options, cores=spark.sparkContext.defaultParallelism)
        else:
            where = "child processes" if options.in_process_workers == "processes" else "threads of this process"
            print(f"  every step runs in process, in {where} (the plans are within the in-process limit): no Spark "
                  "session", flush=True)
        cstats = kstats = rstats = {}
        compacted = None
        last_end: dict[str, float] = {}
        for s in range(args.samples):
            order = rotated(CONTENDERS, s)
            print(f"sample {s + 1}/{args.samples}: {', '.join(order)}", flush=True)
            for name in order:
                began = time.monotonic()
                if name in last_end:
                    idle[name].append(began - last_end[name])
                if name in PEERS_SCRIPTS:
                    times[name].append(run_peer(PEERS_SCRIPTS[name], str(same), str(work / f"out_{name}")))
                else:
                    clustered = fresh("clustered")
                    dt, cstats = timed_maintenance(clustered, "cluster", spark, options, args.cold)
                    times["cluster"].append(dt)
                    settle()
                    dt, rstats = timed_maintenance(clustered, "compact", spark, options, args.cold)
                    times["recompact"].append(dt)
                    compacted = fresh("compacted")
                    dt, kstats = timed_maintenance(compacted, "compact", spark, options, args.cold)
                    times["compact"].append(dt)
                last_end[name] = time.monotonic()
        if spark is not None:
            spark.stop()
    assert compacted is not None
    read_after, rows_after = timed_read(compacted)
    assert rows_after == rows and compacted.read().sort_by("pk").equals(expected), "read after compaction differs"
    assert clustered.read().sort_by("pk").equals(expected), "read after clustering + compaction differs"

    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"\nmaintd ({args.workload}, {args.layout}, {files0} level-0 files, {versions0:,} row versions, "
          f"{rows:,} visible rows); {args.samples} samples per step, one run")
    print("  " + stats_line("DuckDB dedupe (same files)", times["duckdb"]))
    print("  " + stats_line("delta-rs optimize.compact (same files)", times["deltars"]))
    print("  " + stats_line(f"maintd clustering {cstats}", times["cluster"]))
    print(f"    ratio of medians: {med['cluster'] / med['deltars']:.2f}x delta-rs, "
          f"{med['cluster'] / med['duckdb']:.2f}x DuckDB")
    print("  " + stats_line(f"maintd full compaction {kstats}", times["compact"]))
    print(f"    ratio of medians: {med['compact'] / med['deltars']:.2f}x delta-rs, "
          f"{med['compact'] / med['duckdb']:.2f}x DuckDB")
    print("  " + stats_line(f"maintd compaction after clustering {rstats}", times["recompact"]))
    if floor:
        print(f"  first clustering of the session (untimed warm-up, a copy of the table): {first_s:.2f} s")
        print("  " + stats_line("Spark's floor (one empty job per core at once)", floor)
              + "  (every maintd step run on Spark includes it)")
    print("  seconds each contender was idle before its runs (from the end of its run in the previous sample to the "
          "start of this one's; a peer's includes its process start and untimed set-up): "
          + "; ".join(f"{k} {', '.join(f'{x:.0f}' for x in v)}" for k, v in idle.items()))
    print(f"  read: {read_before:.2f} s before, {read_after:.2f} s after ({read_before / read_after:.1f}x)")
    print(f"  peak memory ({'driver + JVM + Python workers' if floor else 'this process and the peers'}): "
          f"{rss.peak / 2**20:.0f} MiB")
    print(f"  ingest: {ingest_s:.1f} s for {commits} commits")
    if not args.dir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
