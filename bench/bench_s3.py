"""maintd against delta-rs on the same local S3 server (moto): commits per second, latest-version lookup by
history length, and maintenance of a 1,000-file table.

Run: ``nice .venv/bin/python bench/bench_s3.py [--samples 3] [--commits 40] [--versions 10,10000]
[--files 1000]``. Figures are recorded in docs/benchmarks.md ("Object storage").

Both contenders talk to one moto server on 127.0.0.1 (``tests/s3app.py``: moto's application with
conditional creates made atomic, and ListObjectsV2 answered from a sorted key index as S3 does, where moto
itself sorts every key of the bucket per listing; started here, stopped at the end), in separate
buckets, with the same credentials. delta-rs commits with S3 conditional put (``conditional_put: etag``,
i.e. ``If-None-Match: *``; no ``AWS_S3_ALLOW_UNSAFE_RENAME``, no lock table).

* Commits/s: P processes (spawned; the clock starts when all have opened the table) each commit C writes
  of the same 10 rows (fresh keys) to one table, one data file per commit (maintd: 1 bucket): maintd
  ``Table.upsert``, delta-rs ``write_deltalake(dt, mode="append")`` on a table object opened once per
  process (its cheapest path). One sample is one table.
* Lookup: a table whose newest checkpoint is at N and whose latest version is N + 5 (the versions between
  are property changes, written as each format's own log files); timed: maintd ``TableLog.latest_version()``
  (one LIST of ``_log/``) and ``Table.open(uri).snapshot()`` (lookup, then the checkpoint and the commits
  after it); delta-rs ``DeltaTable(uri)`` (reads ``_last_checkpoint``,
  the checkpoint, and lists the commits after it); and, for scale, the server's own time to answer the
  lookup's request (boto3 ``ListObjectsV2`` with ``MaxKeys=8``). Medians of 20 calls per sample.
* Maintenance: the same 250 micro-batches of 400 rows, each split by maintd's own bucket function over 4
  buckets, so both tables hold the same 1,000 files of the same rows (delta-rs partitioned by that
  bucket). Timed: ``maintd run`` (Spark ``local[2]``, compaction of every bucket, then reclamation) and
  delta-rs ``optimize.compact()``. Each sample runs on a fresh server-side copy of the table.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import obstore
import pyarrow as pa
import pyarrow.compute as pc
from obstore.store import S3Store

KEY, SECRET, REGION = "bench", "bench-secret", "us-east-1"


# -- the server ------------------------------------------------------------------------------------------------------


class Moto:
    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        # moto's application with conditional creates made atomic, as on S3 (tests/s3app.py says why)
        launcher = Path(__file__).resolve().parents[1] / "tests" / "s3app.py"
        self.proc = subprocess.Popen([sys.executable, str(launcher), "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(300):
            try:
                urllib.request.urlopen(f"{self.endpoint}/moto-api/", timeout=2).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("moto_server did not start")

    def bucket(self) -> str:
        name = f"b-{uuid.uuid4().hex[:16]}"
        urllib.request.urlopen(urllib.request.Request(f"{self.endpoint}/{name}", method="PUT"), timeout=10).close()
        return name

    @property
    def maintd_options(self) -> dict[str, str]:
        return {"aws_endpoint": self.endpoint, "aws_access_key_id": KEY, "aws_secret_access_key": SECRET,
                "aws_region": REGION, "aws_allow_http": "true"}

    @property
    def delta_options(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET,
                "AWS_REGION": REGION, "AWS_ALLOW_HTTP": "true", "conditional_put": "etag"}

    def store(self, bucket: str) -> S3Store:
        return S3Store(bucket, config={"endpoint": self.endpoint, "access_key_id": KEY, "secret_access_key": SECRET,
                                       "region": REGION}, client_options={"allow_http": True})

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:  # a request thread still busy: the figures are in, do not lose them
            self.proc.kill()
            self.proc.wait(10)


def spread(xs: list[float]) -> str:
    return f"{statistics.median(xs):.3g} ({min(xs):.3g}-{max(xs):.3g})"


def configure(moto_env: dict[str, str]) -> None:
    from maintd.storage import configure_storage

    configure_storage("s3://", json.loads(moto_env["MAINTD_BENCH_OPTIONS"]))


# -- commits per second -------------------------------------------------------------------------------------------


def _writer(engine: str, uri: str, worker: int, commits: int, env: dict[str, str], go: Any, ready: Any,
            results: Any) -> None:
    configure(env)
    options = json.loads(env["MAINTD_BENCH_DELTA"])
    if engine == "maintd":
        from maintd import Table

        table = Table.open(uri)
        table.snapshot()

        def commit(t: pa.Table) -> None:
            table.upsert(t)
    else:
        from deltalake import CommitProperties, DeltaTable, write_deltalake

        dt = DeltaTable(uri, storage_options=options)
        # the same budget of attempts per commit as maintd's default RetryPolicy (40; delta-rs's default is 15,
        # which 4 writers on one table exhaust)
        from maintd.table import RetryPolicy

        props = CommitProperties(max_commit_retries=RetryPolicy().max_attempts)

        def commit(t: pa.Table) -> None:
            # 4 writers on one table can starve a delta-rs writer past its attempts; as an application would,
            # write the batch again (each time counted, and reported with the figures)
            from deltalake.exceptions import CommitFailedError

            for _ in range(100):
                try:
                    write_deltalake(dt, t, mode="append", commit_properties=props)
                    return
                except CommitFailedError:
                    gave_up.append(1)
            raise RuntimeError("delta-rs gave up 100 times on one batch")
    gave_up: list[int] = []
    ready.put(worker)
    go.wait()
    t0 = time.perf_counter()
    try:
        for i in range(commits):
            ids = np.arange(10, dtype=np.int64) + (worker * commits + i) * 10
            commit(pa.table({"id": ids, "name": [f"w{worker}"] * 10}))
    except Exception as exc:  # reported to the parent, which stops the bench with it instead of waiting
        results.put(f"{engine} writer {worker}: {type(exc).__name__}: {exc}")
        return
    results.put((time.perf_counter() - t0, len(gave_up) if engine != "maintd" else 0))


def create(engine: str, uri: str, delta: dict[str, str]) -> None:
    if engine == "maintd":
        from maintd import Table

        Table.create(uri, "id:int64!,name:string", primary_key="id", buckets=1)  # one data file per commit
    else:
        from deltalake import write_deltalake

        write_deltalake(uri, pa.table({"id": pa.array([], pa.int64()), "name": pa.array([], pa.string())}),
                        storage_options=delta)


def versions_of(engine: str, uri: str, delta: dict[str, str]) -> tuple[int, int]:
    if engine == "maintd":
        from maintd import Table

        t = Table.open(uri)
        return t.version, t.read().num_rows
    from deltalake import DeltaTable

    dt = DeltaTable(uri, storage_options=delta)
    return dt.version(), dt.to_pyarrow_table().num_rows


def bench_commits(moto: Moto, env: dict[str, str], processes: list[int], commits: int,
                  samples: int) -> list[dict[str, Any]]:
    ctx = mp.get_context("spawn")
    delta = moto.delta_options
    out = []
    for n in processes:
        for engine in ("maintd", "delta-rs"):
            rates, rewrites = [], 0
            for _ in range(samples):
                uri = f"s3://{moto.bucket()}/t"
                create(engine, uri, delta)
                go, ready, results = ctx.Event(), ctx.Queue(), ctx.Queue()
                procs = [ctx.Process(target=_writer, args=(engine, uri, w, commits, env, go, ready, results))
                         for w in range(n)]
                for p in procs:
                    p.start()
                for _ in procs:
                    ready.get(timeout=300)
                t0 = time.perf_counter()
                go.set()
                answers = [results.get(timeout=900) for _ in procs]
                failures = [r for r in answers if isinstance(r, str)]
                if failures:
                    raise SystemExit("a writer failed: " + "; ".join(failures))
                rewrites += sum(r[1] for r in answers)
                wall = time.perf_counter() - t0
                for p in procs:
                    p.join()
                version, rows = versions_of(engine, uri, delta)
                assert version == n * commits and rows == n * commits * 10, (engine, version, rows)
                rates.append(n * commits / wall)
            out.append({"step": f"commits/s, {n} process(es)", "engine": engine, "samples": rates,
                        "batches_written_again": rewrites})
            again = f", {rewrites} batch(es) written again after the writer gave up" if rewrites else ""
            print(f"  {engine} {n} proc: {spread(rates)} commits/s{again}", file=sys.stderr)
    return out


# -- latest-version lookup -----------------------------------------------------------------------------------------


def build_maintd_history(uri: str, history: int) -> None:
    from maintd import Table
    from maintd.table.log.actions import CommitInfo
    from maintd.table.log.snapshot import SnapshotBuilder
    from maintd.table.log.tablelog import TableLog

    table = Table.create(uri, "id:int64!,name:string", primary_key="id", buckets=4)
    log = TableLog(table.storage)
    base = table.snapshot(0)
    md, ts = base.metadata, base.timestamp

    def actions(v: int) -> list[Any]:
        info = CommitInfo(operation="SET PROPERTIES", timestamp=ts + v * 60_000, txn_id=uuid.uuid4().hex,
                          read_version=v - 1)
        return [info, md.model_copy(update={"properties": {**md.properties, "maintd.bench.seq": str(v)}})]

    acts = {v: actions(v) for v in range(1, history + 6)}
    with ThreadPoolExecutor(16) as pool:
        assert all(pool.map(lambda v: log.try_commit(v, acts[v]), range(1, history + 1)))
    builder = SnapshotBuilder.from_snapshot(base)
    for v in range(1, history + 1):
        builder.apply(v, acts[v])
    log.write_checkpoint(builder.build())
    for v in range(history + 1, history + 6):
        assert log.try_commit(v, acts[v])


def build_delta_history(moto: Moto, bucket: str, history: int) -> str:
    from deltalake import DeltaTable, write_deltalake

    uri = f"s3://{bucket}/t"
    delta = moto.delta_options
    write_deltalake(uri, pa.table({"id": pa.array([], pa.int64()), "name": pa.array([], pa.string())}),
                    storage_options=delta)
    store = moto.store(bucket)
    lines = bytes(obstore.get(store, "t/_delta_log/00000000000000000000.json").bytes()).decode().splitlines()
    meta = next(json.loads(x)["metaData"] for x in lines if "metaData" in x)

    def commit(v: int) -> None:
        m = dict(meta, configuration={**meta.get("configuration", {}), "bench.seq": str(v)})
        body = json.dumps({"commitInfo": {"timestamp": 1_700_000_000_000 + v, "operation": "SET TBLPROPERTIES"}})
        body += "\n" + json.dumps({"metaData": m}) + "\n"
        obstore.put(store, f"t/_delta_log/{v:020d}.json", body.encode(), mode="create")

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(commit, range(1, history + 1)))
    DeltaTable(uri, storage_options=delta).create_checkpoint()
    for v in range(history + 1, history + 6):
        commit(v)
    return uri


def _list8(moto: Moto, uri: str) -> None:
    """The server's own cost of the lookup's request (boto3, outside maintd): what moto takes to answer it."""
    import boto3

    bucket, prefix = uri[len("s3://"):].split("/", 1)
    client = getattr(moto, "_boto", None) or boto3.client("s3", endpoint_url=moto.endpoint, aws_access_key_id=KEY,
                                                          aws_secret_access_key=SECRET, region_name=REGION)
    moto._boto = client  # type: ignore[attr-defined]
    client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/_log/", MaxKeys=8)


def median_call(fn: Any, n: int = 20) -> float:
    fn()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_lookup(moto: Moto, sizes: list[int], samples: int) -> list[dict[str, Any]]:
    from deltalake import DeltaTable

    from maintd import Table
    from maintd.storage import storage_for_uri
    from maintd.table.log.tablelog import TableLog

    delta = moto.delta_options
    out = []
    for n in sizes:
        m_uri = f"s3://{moto.bucket()}/t"
        build_maintd_history(m_uri, n)
        d_uri = build_delta_history(moto, moto.bucket(), n)
        storage = storage_for_uri(m_uri)
        assert TableLog(storage).latest_version() == n + 5
        assert DeltaTable(d_uri, storage_options=delta).version() == n + 5
        steps = {
            ("maintd", "lookup (TableLog.latest_version)"): lambda s=storage: TableLog(s).latest_version(),
            ("maintd", "open + latest snapshot (Table.open().snapshot())"): lambda u=m_uri: Table.open(u).snapshot(),
            ("delta-rs", "open (DeltaTable)"): lambda u=d_uri: DeltaTable(u, storage_options=delta).version(),
            ("moto", "LIST of 8 keys (boto3, MaxKeys=8)"): lambda u=m_uri: _list8(moto, u),
        }
        for (engine, what), fn in steps.items():
            xs = [median_call(fn) for _ in range(samples)]
            out.append({"step": f"{what} at {n:,} versions", "engine": engine, "samples": xs, "versions": n,
                        "what": what})
            print(f"  {engine} {what} at {n}: {spread([x * 1000 for x in xs])} ms", file=sys.stderr)
    return out


# -- maintenance of a 1,000-file table ---------------------------------------------------------------------------------


def bench_maintenance(moto: Moto, files: int, samples: int, workdir: Path) -> list[dict[str, Any]]:
    from deltalake import DeltaTable, write_deltalake

    from maintd import Table
    from maintd.execution.runner import Runner
    from maintd.table.files.bucketing import bucket_of

    delta = moto.delta_options
    buckets, rows = 4, 400
    batches = files // buckets
    rng = np.random.default_rng(7)
    m_bucket, d_bucket = moto.bucket(), moto.bucket()
    m_src, d_src = f"s3://{m_bucket}/src", f"s3://{d_bucket}/src"
    Table.create(m_src, "id:int64!,name:string,amount:float64", primary_key="id", buckets=buckets)
    src = Table.open(m_src)
    keyspace = batches * rows // 2
    for _ in range(batches):
        ids = rng.choice(keyspace, rows, replace=False).astype(np.int64)
        t = pa.table({"id": ids, "name": [f"n{k}" for k in ids], "amount": rng.random(rows)})
        src.upsert(t)
        b = pa.array(bucket_of(t, ["id"], buckets))
        for k in range(buckets):  # the same rows in the same files: one append per bucket
            piece = t.filter(pc.equal(b, k))
            piece = piece.append_column("bucket", pa.array(np.full(piece.num_rows, k, dtype=np.int32)))
            write_deltalake(d_src, piece, mode="append", partition_by=["bucket"], storage_options=delta)
    m_files = len(Table.open(m_src).snapshot().files)
    d_files = len(DeltaTable(d_src, storage_options=delta).file_uris())
    print(f"  built {m_files} maintd files, {d_files} delta-rs files", file=sys.stderr)
    policy = workdir / "policy.yaml"
    policy.write_text("default:\n  compaction:\n    max_delta_files: 2\n    min_interval_hours: 0\n")
    from maintd.execution import spark_session

    spark = spark_session(conf={"spark.master": "local[2]", "spark.driver.memory": "1g",
                                "spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"})
    runner = Runner(None, policy_path=policy, spark=spark, reclaim=True)
    m_times, d_times, m_out, d_out = [], [], 0, 0
    for i in range(samples):
        m_uri, d_uri = f"s3://{m_bucket}/copy-{i}", f"s3://{d_bucket}/copy-{i}"
        for bucket, src_prefix, dst in ((m_bucket, "src", f"copy-{i}"), (d_bucket, "src", f"copy-{i}")):
            store = moto.store(bucket)
            keys = [m["path"] for chunk in obstore.list(store, f"{src_prefix}/", chunk_size=1000) for m in chunk]
            with ThreadPoolExecutor(16) as pool:
                list(pool.map(lambda k, s=store, d=dst, p=src_prefix: obstore.copy(s, k, d + k[len(p):]), keys))
        t0 = time.perf_counter()
        [summary] = runner.run([m_uri])
        m_times.append(time.perf_counter() - t0)
        assert summary.status == "ok", summary.error
        m_out = len(Table.open(m_uri).snapshot().files)
        dt = DeltaTable(d_uri, storage_options=delta)
        t0 = time.perf_counter()
        dt.optimize.compact()
        d_times.append(time.perf_counter() - t0)
        d_out = len(DeltaTable(d_uri, storage_options=delta).file_uris())
    assert Table.open(f"s3://{m_bucket}/copy-0").read().num_rows == Table.open(m_src).read().num_rows
    spark.stop()
    return [{"step": f"maintenance of {m_files} files -> {m_out}", "engine": "maintd", "samples": m_times},
            {"step": f"optimize.compact of {d_files} files -> {d_out}", "engine": "delta-rs", "samples": d_times}]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--commits", type=int, default=40, help="commits per writer process")
    ap.add_argument("--processes", default="1,4")
    ap.add_argument("--versions", default="10,10000")
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--only", default="commits,lookup,maintenance")
    args = ap.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    load_before = os.getloadavg()
    moto = Moto()
    env = {"MAINTD_BENCH_OPTIONS": json.dumps(moto.maintd_options),
           "MAINTD_BENCH_DELTA": json.dumps(moto.delta_options)}
    configure(env)
    only = set(args.only.split(","))
    results: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            if "commits" in only:
                results += bench_commits(moto, env, [int(x) for x in args.processes.split(",")], args.commits,
                                         args.samples)
            if "lookup" in only:
                results += bench_lookup(moto, [int(x) for x in args.versions.split(",")], args.samples)
            if "maintenance" in only:
                results += bench_maintenance(moto, args.files, args.samples, Path(tmp))
    finally:
        moto.stop()
    import deltalake
    import obstore as ob

    print(f"\n{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"obstore {ob.__version__}, deltalake {deltalake.__version__}; moto on 127.0.0.1 (tests/s3app.py); "
          f"{args.samples} samples per step, median (min-max)\n")
    print("| step | engine | median (min-max) |\n|---|---|---|")
    for r in results:
        unit = "commits/s" if r["step"].startswith("commits") else ("ms" if "versions" in r else "s")
        xs = [x * 1000 for x in r["samples"]] if unit == "ms" else r["samples"]
        print(f"| {r['step']} | {r['engine']} | {spread(xs)} {unit} |")
    print("\n| ratio of medians | value |\n|---|---|")
    for line in ratios(results):
        print(f"| {line[0]} | {line[1]:.2f}x |")
    load_after = os.getloadavg()
    print(f"\nload average (1, 5, 15 min): before {' '.join(f'{x:.2f}' for x in load_before)}, "
          f"after {' '.join(f'{x:.2f}' for x in load_after)}")
    print(json.dumps(results))


def ratios(results: list[dict[str, Any]]) -> list[tuple[str, float]]:
    """maintd against delta-rs on each step they share, and each lookup at the longest history against the
    shortest (from this run's medians)."""
    med = {(r["engine"], r["step"]): statistics.median(r["samples"]) for r in results}
    out = []
    for r in results:
        if r["engine"] == "maintd" and r["step"].startswith("commits") and ("delta-rs", r["step"]) in med:
            out.append((f"maintd / delta-rs, {r['step']}", med[("maintd", r["step"])] / med[("delta-rs", r["step"])]))
    maint = [r for r in results if r["step"].startswith(("maintenance", "optimize"))]
    if len(maint) == 2:
        m, d = (statistics.median(r["samples"]) for r in maint)
        out.append(("maintd run / delta-rs optimize.compact, time", m / d))
    lookups = [r for r in results if "versions" in r]
    sizes = sorted({r["versions"] for r in lookups})
    if len(sizes) >= 2:
        for r in lookups:
            if r["versions"] == sizes[-1]:
                short = next(x for x in lookups if x["versions"] == sizes[0] and x["what"] == r["what"])
                out.append((f"{r['engine']} {r['what']}: {sizes[-1]:,} / {sizes[0]:,} versions, time",
                            statistics.median(r["samples"]) / statistics.median(short["samples"])))
    return out


if __name__ == "__main__":
    main()
