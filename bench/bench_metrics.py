"""``/metrics`` of a daemon over many tables: size, wall and CPU time of one scrape, on SQLite and PostgreSQL.

    .venv/bin/python bench/bench_metrics.py [--tables 1000 10000] [--samples 20] [--postgres]

A state store holds TABLES registered tables as a daemon leaves them (each checked, with a layout of two levels;
three failing), and a daemon's metrics (default settings: per-table series for at most 500 tables, else the 50
unhealthiest) are exposed SAMPLES times in this process, the way the HTTP endpoint does at each scrape (the HTTP
round trip itself is left out: a few hundred microseconds on loopback). Printed per store and table count: the
size, the series, and the median and spread of the wall and CPU time (``time.process_time``) of a scrape, with
the load average, which inflates the wall time on a busy machine but barely the CPU time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from datetime import timedelta

from maintd.service.daemon import Daemon
from maintd.service.records import CheckRecord, RunKind, RunResult, RunStatus
from maintd.service.store import StateStore
from maintd.settings import Settings

LAYOUT = {"files": 4, "bytes": 4096, "pins": 0, "pinned_bytes": 0, "backlog_files": 0, "backlog_bytes": 0,
          "levels": {"L0": {"files": 3, "bytes": 3000}, "base": {"files": 1, "bytes": 1096}}}


def fill(store: StateStore, n: int) -> list[str]:
    uris = [f"s3://warehouse/db{i % 100}/table_{i:05d}" for i in range(n)]
    store.register_tables(uris)
    now = store.db_now()
    store.record_checks("bench", [CheckRecord(u, RunKind.MAINTENANCE, now, 1, 1, True, LAYOUT) for u in uris])
    store.acquire_leases("bench", uris[:2], 600, 2)
    for i in range(3):
        run = store.start_run(uris[i * (n // 3)], RunKind.MAINTENANCE)
        store.finish_run(run, RunStatus.FAILED, error="boom", retry_after=now + timedelta(hours=1))
    return uris


def measure(store: StateStore, uris: list[str], samples: int, state_dir: str) -> tuple[int, int, list[float],
                                                                                        list[float]]:
    daemon = Daemon(Settings.model_validate({"state_dir": state_dir}), store, lambda u: RunResult(),
                    lambda u: RunResult(), holder="bench")
    daemon.publish_tables(set(uris))
    daemon.metrics.expose()  # the first scrape compiles the statements
    walls, cpus = [], []
    for _ in range(samples):
        w0, c0 = time.perf_counter(), time.process_time()
        body = daemon.metrics.expose()
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
    series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    return len(body), series, walls, cpus


def fmt(xs: list[float]) -> str:
    return f"median {1000 * statistics.median(xs):.1f} ms (min {1000 * min(xs):.1f}, max {1000 * max(xs):.1f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--postgres", action="store_true", help="also on $MAINTD_TEST_POSTGRES_URL")
    args = ap.parse_args()
    print(f"load before: {os.getloadavg()}")
    for n in args.tables:
        targets = [("sqlite", None)]
        if args.postgres:
            targets.append(("postgresql", f"maintd_bench_{uuid.uuid4().hex[:8]}"))
        for backend, schema in targets:
            with tempfile.TemporaryDirectory() as tmp:
                url = f"sqlite:///{tmp}/maintd.db" if backend == "sqlite" else os.environ["MAINTD_TEST_POSTGRES_URL"]
                store = StateStore(url, db_schema=schema)
                try:
                    size, series, walls, cpus = measure(store, fill(store, n), args.samples, tmp)
                finally:
                    if schema:
                        store.drop_schema()
                    store.close()

            print(f"{n} tables, {backend}: {size} bytes, {series} series; wall {fmt(walls)}; CPU {fmt(cpus)}",
                  flush=True)
    print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
