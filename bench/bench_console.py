"""The web console's fleet page over 10,000 tables: server time of one page, on SQLite and PostgreSQL.

    .venv/bin/python bench/bench_console.py [--tables 10000] [--samples 15] [--postgres]

A state store holds TABLES registered tables as a daemon leaves them (each checked, with a layout of two levels,
read amplification, oldest level-0 commit and history bytes; one in a hundred failing; a lease on every tenth;
every tenth declaring targets, with measured figures and gaps, half of them missing one, and re-tuned),
and the daemon's HTTP endpoint with its console runs on a loopback port. Each page is requested SAMPLES times
over HTTP (after one request that compiles the statements); printed per store and page: the size of the page
and the median and spread of the wall time of a request (the server's work plus a loopback round trip of a few
hundred microseconds), and the CPU time of this process, which serves it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import urllib.request
import uuid
from datetime import timedelta

from maintd.service.console import Console
from maintd.service.http import HealthServer
from maintd.service.metrics import Metrics
from maintd.service.records import CheckRecord, RunKind, RunStatus
from maintd.service.store import StateStore

LAYOUT = {"files": 4, "bytes": 4096, "pins": 0, "pinned_bytes": 0, "backlog_files": 2, "backlog_bytes": 2048,
          "read_amplification": 4, "mean_files_per_bucket": 2.0, "oldest_l0_ms": 1_700_000_000_000,
          "history_bytes": 8192, "levels": {"L0": {"files": 3, "bytes": 3000}, "base": {"files": 1, "bytes": 1096}}}
PAGES = {
    "fleet, default (unhealthiest first, 50 a page)": "/",
    "fleet, page 100 by name": "/?sort=name&page=100",
    "fleet, filtered by name": "/?q=table_09",
    "fleet, failing only": "/?state=failing",
    "fleet, by backlog (from the layouts)": "/?sort=backlog",
    "fleet, 500 a page": "/?per=500",
}


def fill(store: StateStore, n: int) -> None:
    uris = [f"s3://warehouse/db{i % 100}/table_{i:05d}" for i in range(n)]
    store.register_tables(uris)
    now = store.db_now()
    store.record_checks("bench", [CheckRecord(u, RunKind.MAINTENANCE, now, 1, 1, True, LAYOUT) for u in uris])
    leased = uris[::10]
    store.acquire_leases("bench", leased, 600, len(leased))
    tuned = uris[5::10]
    store.set_targets({u: {"read_files_per_bucket": 4.0, "merge_delay_minutes": 30.0} for u in tuned})
    store.record_measured({u: ({"read_files_per_bucket": 6.0 if i % 2 else 3.0, "merge_delay_minutes": 12.0},
                               {"read_files_per_bucket": 0.5 if i % 2 else -0.25, "merge_delay_minutes": -0.6})
                           for i, u in enumerate(tuned)})
    for uri in tuned[:200]:
        store.record_tuning(uri, overrides={"compaction": {"max_delta_files": 9}}, interval_seconds=600.0,
                            reason="bench", predicted={}, measured={})
    for uri in uris[::100]:
        run = store.start_run(uri, RunKind.MAINTENANCE)
        store.finish_run(run, RunStatus.FAILED, error="boom", retry_after=now + timedelta(hours=1))


def measure(url: str, samples: int) -> tuple[int, list[float], list[float]]:
    with urllib.request.urlopen(url, timeout=30) as response:  # compiles the statements
        response.read()
    walls, cpus = [], []
    size = 0
    for _ in range(samples):
        w0, c0 = time.perf_counter(), time.process_time()
        with urllib.request.urlopen(url, timeout=30) as response:
            size = len(response.read())
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
    return size, walls, cpus


def fmt(xs: list[float]) -> str:
    return f"median {1000 * statistics.median(xs):.1f} ms (min {1000 * min(xs):.1f}, max {1000 * max(xs):.1f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", type=int, nargs="+", default=[10000])
    ap.add_argument("--samples", type=int, default=15)
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
                    fill(store, n)
                    with HealthServer(Metrics(), host="127.0.0.1", port=0, console=Console(store)) as server:
                        for name, path in PAGES.items():
                            size, walls, cpus = measure(server.url + path, args.samples)
                            print(f"{n} tables, {backend}, {name}: {size} bytes; wall {fmt(walls)}; "
                                  f"CPU {fmt(cpus)}", flush=True)
                finally:
                    if schema:
                        store.drop_schema()
                    store.close()
    print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
