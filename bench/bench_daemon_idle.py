"""Idle cost of ``maintd daemon`` over many healthy tables: CPU of the daemon and all its children, memory,
check lag, state-store growth, and ``/metrics`` size and time.

    .venv/bin/python bench/bench_daemon_idle.py --tables 1000 --interval 300 --store sqlite
    .venv/bin/python bench/bench_daemon_idle.py --tables 1000 --interval 60 --store postgresql
    .venv/bin/python bench/bench_daemon_idle.py --tables 10000 --interval 300 --store sqlite

To measure an older maintd, run the bench with ``PYTHONPATH`` pointing at its checkout: on a store without
``checked_at`` (before revision 0004) the last successful maintenance stands for the last check, since each
check was then a recorded run.

The bench creates TABLES small healthy tables under one root on local disk (2 buckets, one upsert of 20
rows each: a plan finds nothing to do; kept under ``--root`` between runs), starts the real ``maintd daemon``
command on them (discovery, the default policy, jitter and lease settings; the state store is a fresh
SQLite file, or a fresh schema of ``$MAINTD_TEST_POSTGRES_URL``), waits until its first maintenance and
reclamation passes are over (every table's row says it was maintained and reclaimed), then takes SAMPLES
consecutive windows of WINDOW seconds. For each window it reads, from ``/proc``, the CPU time (user +
system) of the daemon and of every process below it (the fork server of plans run in process and its
children, a Spark driver's JVM if a plan needed one; children that exited are counted through the daemon's
``cutime``), and prints the share of one core, with the daemon's own Python process apart. Also printed:
peak RSS and PSS of the daemon process and of the whole tree (PSS counts a page shared by N processes 1/N in
each, so the tree's sum is what it holds), each process's memory at the end, the longest time any table went
without a check (from the ``checked_at`` the daemon writes on each table's row, sampled every 15 s), the rows
of each store table before and after, the size and server time of ``/metrics``, and the load average before
and after. Figures go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import sqlalchemy as sa

TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def _make(batch: tuple[str, int, int]) -> int:
    from maintd import Table

    root, start, stop = batch
    made = 0
    for i in range(start, stop):
        uri = f"{root}/db{i % 10}/t{i:05d}"
        if Path(uri, "_log").exists():
            continue
        table = Table.create(uri, "id:int64!,name:string", primary_key="id", buckets=2, name=f"t{i:05d}")
        table.upsert(pa.table({"id": list(range(20)), "name": [f"n{k}" for k in range(20)]}))
        made += 1
    return made


def make_tables(root: Path, n: int) -> float:
    """Create the tables not there yet (two processes); returns seconds."""
    began = time.perf_counter()
    step = 250
    with ProcessPoolExecutor(2) as pool:
        made = sum(pool.map(_make, [(str(root), s, min(n, s + step)) for s in range(0, n, step)]))
    seconds = time.perf_counter() - began
    print(f"tables: {n} under {root} ({made} created in {seconds:.1f} s)", flush=True)
    return seconds


def _stat(pid: int) -> tuple[int, float, float, int] | None:
    """(ppid, own CPU seconds, reaped children's CPU seconds, RSS bytes) of ``pid``."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    ppid, utime, stime, cutime, cstime, rss = (int(fields[1]), int(fields[11]), int(fields[12]), int(fields[13]),
                                               int(fields[14]), int(fields[21]))
    return ppid, (utime + stime) / TICKS, (cutime + cstime) / TICKS, rss * PAGE


def tree(root: int) -> dict[int, tuple[int, float, float, int]]:
    """Every live process at or below ``root``, with :func:`_stat`."""
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            found = _stat(int(entry))
            if found is not None:
                stats[int(entry)] = found
    below: dict[int, tuple[int, float, float, int]] = {}
    frontier = [root]
    while frontier:
        pid = frontier.pop()
        if pid in stats:
            below[pid] = stats[pid]
            frontier.extend(p for p, s in stats.items() if s[0] == pid)
    return below


def cpu(root: int) -> tuple[float, float, int, int]:
    """(CPU seconds of the tree, of the root process alone, RSS of the root, RSS of the tree)."""
    procs = tree(root)
    total = sum(own + reaped for _, own, reaped, _ in procs.values())
    mine = procs[root][1] if root in procs else 0.0
    return total, mine, procs.get(root, (0, 0, 0, 0))[3], sum(p[3] for p in procs.values())


def pss(pid: int) -> int:
    """Proportional set size of ``pid`` in bytes (pages shared with N processes count 1/N each), 0 if it is gone."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def memory(root: int) -> dict[str, object]:
    """Memory of the tree below ``root``: summed PSS and RSS, and each process's (pid, name, PSS, RSS)."""
    procs = tree(root)
    rows = []
    for pid, (_, _, _, rss) in procs.items():
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        rows.append((pid, name, pss(pid), rss))
    return {"pss": sum(r[2] for r in rows), "rss": sum(r[3] for r in rows), "processes": rows}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def store_rows(engine: sa.Engine, schema: str | None) -> dict[str, int]:
    with engine.connect() as conn:
        present = set(sa.inspect(conn).get_table_names(schema=schema))
        names = [n for n in ("maintd_tables", "maintd_runs", "maintd_decisions", "maintd_leases", "maintd_replicas")
                 if n in present]
        prefix = f'"{schema}".' if schema else ""
        return {n: int(conn.execute(sa.text(f"SELECT count(*) FROM {prefix}{n}")).scalar_one()) for n in names}


def checked(engine: sa.Engine, schema: str | None) -> dict[str, tuple[str | None, str | None, str | None]]:
    """Per table: when it was last checked, and when maintenance and reclamation last succeeded. A store of a
    maintd before revision 0004 has no ``checked_at``: each of its checks was a run that set the last success."""
    prefix = f'"{schema}".' if schema else ""
    with engine.connect() as conn:
        columns = {c["name"] for c in sa.inspect(conn).get_columns("maintd_tables", schema=schema)}
        check = "checked_at" if "checked_at" in columns else "maintenance_succeeded_at"
        rows = conn.execute(sa.text(f"SELECT uri, {check}, maintenance_succeeded_at, reclaim_succeeded_at "
                                    f"FROM {prefix}maintd_tables"))
        return {r[0]: (_text(r[1]), _text(r[2]), _text(r[3])) for r in rows}


def _text(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.astimezone(UTC).replace(tzinfo=None).isoformat(sep=" ")
    return str(value)


def _seconds(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def scrape(port: int) -> tuple[int, float, dict[str, float]]:
    """Size and wall time of one ``/metrics`` scrape, and the check counters it holds."""
    from prometheus_client.parser import text_string_to_metric_families

    began = time.perf_counter()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        body = response.read()
    seconds = time.perf_counter() - began
    wanted = {"maintd_checks_total", "maintd_check_duration_seconds_sum", "maintd_check_duration_seconds_count"}
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            if sample.name in wanted:
                found[sample.name] = found.get(sample.name, 0.0) + sample.value
    return len(body), seconds, found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", type=int, default=1000)
    ap.add_argument("--interval", type=float, default=300.0, help="scheduler.maintenance_interval_seconds")
    ap.add_argument("--store", choices=["sqlite", "postgresql"], default="sqlite")
    ap.add_argument("--window", type=float, default=300.0, help="seconds of one sample")
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--root", default=None, help="where the tables live (default: /tmp/maintd-bench-daemon/N)")
    ap.add_argument("--first-pass-timeout", type=float, default=3600.0)
    args = ap.parse_args()

    root = Path(args.root or f"/tmp/maintd-bench-daemon/{args.tables}")
    root.mkdir(parents=True, exist_ok=True)
    make_tables(root, args.tables)
    work = Path(tempfile.mkdtemp(prefix="maintd-bench-daemon-"))
    schema = None
    if args.store == "sqlite":
        url = f"sqlite:///{work / 'maintd.db'}"
    else:
        url = os.environ.get("MAINTD_TEST_POSTGRES_URL") or "postgresql+psycopg://postgres@127.0.0.1:5432/test"
        schema = f"maintd_bench_{uuid.uuid4().hex[:10]}"
    port = free_port()
    config = {
        "state_dir": str(work),
        "warehouse": {"roots": [str(root)], "discovery": True, "discovery_max_depth": 4},
        "scheduler": {"maintenance_interval_seconds": args.interval},
        "store": {"url": url, **({"db_schema": schema} if schema else {})},
        "http": {"host": "127.0.0.1", "port": port},
        "spark": {"master": "local[2]"},
        "logging": {"level": "INFO"},
    }
    (work / "maintd.yaml").write_text(json.dumps(config))
    log = (work / "daemon.log").open("w")
    exe = str(Path(sys.executable).with_name("maintd"))
    print(f"load before: {os.getloadavg()}", flush=True)
    daemon = subprocess.Popen([exe, "daemon", "--config", str(work / "maintd.yaml")], stdout=log,
                              stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    engine = sa.create_engine(url, connect_args={"options": f"-c search_path={schema}"} if schema else {})
    started = time.monotonic()
    try:
        last: dict[str, tuple[str | None, str | None, str | None]] = {}
        while True:
            time.sleep(5)
            if daemon.poll() is not None:
                raise SystemExit(f"the daemon exited {daemon.returncode}; see {work / 'daemon.log'}")
            try:
                last = checked(engine, schema)
            except sa.exc.SQLAlchemyError:
                continue
            done = [u for u, (_, m, r) in last.items() if m is not None and r is not None]
            if len(last) >= args.tables and len(done) >= args.tables:
                break
            if time.monotonic() - started > args.first_pass_timeout:
                raise SystemExit(f"first pass not over after {args.first_pass_timeout} s ({len(done)} done)")
        first = time.monotonic() - started
        total0, own0, _, _ = cpu(daemon.pid)
        print(f"first passes (maintenance and reclamation) over after {first:.0f} s; CPU so far {total0:.1f} s "
              f"(daemon process {own0:.1f} s)", flush=True)
        rows_before = store_rows(engine, schema)
        size, seconds, counters = scrape(port)
        print(f"/metrics: {size} bytes, {seconds * 1000:.1f} ms (first scrape)", flush=True)
        shares, own_shares, gaps, rss_own, rss_tree, scrapes = [], [], [], 0, 0, []
        pss_tree, pss_own = 0, 0
        per_check, look = [], []
        seen = {u: c for u, (c, _, _) in last.items()}
        for sample in range(args.samples):
            t0, (c0, o0, _, _) = time.monotonic(), cpu(daemon.pid)
            while time.monotonic() - t0 < args.window:
                time.sleep(15)
                _, _, r_own, r_tree = cpu(daemon.pid)
                rss_own, rss_tree = max(rss_own, r_own), max(rss_tree, r_tree)
                pss_tree, pss_own = max(pss_tree, int(memory(daemon.pid)["pss"])), max(pss_own, pss(daemon.pid))
                try:
                    now = checked(engine, schema)
                except sa.exc.SQLAlchemyError:
                    continue
                for uri, (at, _, _) in now.items():
                    before = seen.get(uri)
                    if at is not None and before is not None and at != before:
                        gaps.append(_seconds(at) - _seconds(before))
                    if at is not None:
                        seen[uri] = at
            elapsed, (c1, o1, _, _) = time.monotonic() - t0, cpu(daemon.pid)
            shares.append((c1 - c0) / elapsed)
            own_shares.append((o1 - o0) / elapsed)
            size, seconds, after = scrape(port)
            scrapes.append((size, seconds))
            checks = after.get("maintd_checks_total", 0) - counters.get("maintd_checks_total", 0)
            looks = after.get("maintd_check_duration_seconds_count", 0) - counters.get(
                "maintd_check_duration_seconds_count", 0)
            look_s = after.get("maintd_check_duration_seconds_sum", 0) - counters.get(
                "maintd_check_duration_seconds_sum", 0)
            counters = after
            per_check.append((o1 - o0) / checks if checks else float("nan"))
            look.append(look_s / looks if looks else float("nan"))
            print(f"sample {sample + 1}: {elapsed:.0f} s, CPU {c1 - c0:.2f} s = {100 * shares[-1]:.2f}% of a core "
                  f"(daemon process {100 * own_shares[-1]:.2f}%); {checks:.0f} checks, daemon process CPU "
                  f"{1000 * per_check[-1]:.3f} ms per check, look at the log {1e6 * look[-1]:.0f} us (wall); "
                  f"load {os.getloadavg()}", flush=True)
        rows_after = store_rows(engine, schema)
        timed = []
        for _ in range(10):  # wall time of a scrape, and the daemon process's CPU meanwhile (load inflates the first)
            o0 = cpu(daemon.pid)[1]
            size, seconds, _ = scrape(port)
            timed.append((seconds, cpu(daemon.pid)[1] - o0))
            time.sleep(1)
        stale = max(time.time() - _seconds(at) for at in seen.values() if at is not None)
        print(f"CPU share of one core: median {100 * statistics.median(shares):.2f}% (min {100 * min(shares):.2f}%, "
              f"max {100 * max(shares):.2f}%); daemon process alone median {100 * statistics.median(own_shares):.2f}%")
        print(f"daemon process CPU per check (all its work over the window / checks): median "
              f"{1000 * statistics.median(per_check):.3f} ms (min {1000 * min(per_check):.3f}, max "
              f"{1000 * max(per_check):.3f}); the look at the log alone: median {1e6 * statistics.median(look):.0f} us")
        print(f"peak RSS: daemon process {rss_own / 2**20:.0f} MiB, whole tree {rss_tree / 2**20:.0f} MiB; peak PSS: "
              f"daemon process {pss_own / 2**20:.0f} MiB, whole tree {pss_tree / 2**20:.0f} MiB")
        at_end = memory(daemon.pid)
        print("processes at the end (pid, name, PSS MiB, RSS MiB): " + ", ".join(
            f"{pid} {name} {p / 2**20:.0f} {r / 2**20:.0f}" for pid, name, p, r in at_end["processes"]))
        print(f"longest gap between two checks of a table: {max(gaps) if gaps else float('nan'):.1f} s over "
              f"{len(gaps)} gaps (interval {args.interval:.0f} s); oldest check at the end: {stale:.0f} s ago")
        print(f"store rows before the windows: {rows_before}; after: {rows_after}")
        print("/metrics: " + ", ".join(f"{n} bytes in {1000 * t:.1f} ms" for n, t in scrapes))
        walls, cpus = [t for t, _ in timed], [c for _, c in timed]
        print(f"/metrics, 10 scrapes of {size} bytes: wall median {1000 * statistics.median(walls):.1f} ms (min "
              f"{1000 * min(walls):.1f}, max {1000 * max(walls):.1f}); daemon CPU median "
              f"{1000 * statistics.median(cpus):.0f} ms (clock ticks of {1000 / TICKS:.0f} ms)")
        print(f"load after: {os.getloadavg()}")
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(120)
        except subprocess.TimeoutExpired:
            daemon.kill()
        log.close()
        if schema:
            with engine.begin() as conn:
                conn.execute(sa.text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        engine.dispose()
        print(f"daemon log: {work / 'daemon.log'}")


if __name__ == "__main__":
    main()
