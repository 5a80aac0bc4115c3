"""Idle memory of ``maintd daemon`` in all its processes: over small tables (every plan in process), and after its
plans ran on a local SparkSession.

    .venv/bin/python bench/bench_daemon_footprint.py                       # both scenarios, 3 samples each
    .venv/bin/python bench/bench_daemon_footprint.py --scenarios small --samples 3 --tables 20

Each sample starts the real ``maintd daemon`` command (``spark.master`` ``local[2]``, SQLite store, default
settings otherwise) on a fresh copy of TABLES small tables that each need a clustering (6 upserts of 200 rows in
2 buckets; policy: cluster 4 level-0 files), waits until every table's maintenance has succeeded, then:

* ``small``: plans run in process (the default ``spark.maintd.inProcess.maxInputBytes``, 64 MiB); waits
  ``--settle`` seconds (checks go on, finding nothing) and measures, the runs' warm processes still up; then
  measures again once they have been idle for ``maintd.execution.local.IDLE_SECONDS`` and ended (15 s later);
* ``spark``: every plan runs on Spark (``maxInputBytes`` 0) with ``spark.idle_stop_seconds`` = ``--stop-after``;
  measures after ``--idle`` seconds without a run (Spark has closed its idle Python workers after a minute), and
  again once the daemon has stopped the idle session.

A measurement sums, over the daemon and every process below it (from ``/proc``), the proportional set size
(PSS: a page shared by N processes counts 1/N in each, so the sum is what the tree holds) and the resident set
size, and lists each process. Printed per scenario and point: every sample, the median and the spread. Figures
go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import sqlalchemy as sa
from bench_daemon_idle import free_port, memory

POLICY = "default:\n  clustering:\n    level1:\n      min_files: 4\n"


def make_tables(root: Path, n: int) -> None:
    from maintd import Table

    rng = np.random.default_rng(7)
    for i in range(n):
        table = Table.create(str(root / f"t{i:03d}"), "id:int64!,name:string,v:double", primary_key="id", buckets=2,
                             name=f"t{i:03d}")
        for _ in range(6):
            ids = rng.integers(0, 2000, 200)
            table.upsert(pa.table({"id": ids, "name": [f"n{k}" for k in ids], "v": rng.random(200)}))


def maintained(engine: sa.Engine) -> list[dict[str, object]]:
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT metrics FROM maintd_runs WHERE kind = 'maintenance' AND status = "
                                        "'succeeded'")).all()
    except sa.exc.SQLAlchemyError:
        return []
    return [json.loads(r[0]) if isinstance(r[0], str) else r[0] for r in rows]


def wait(what: str, probe, timeout: float, daemon: subprocess.Popen[bytes], log: Path):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            raise SystemExit(f"the daemon exited {daemon.returncode}; see {log}")
        got = probe()
        if got:
            return got
        time.sleep(2)
    raise SystemExit(f"timed out waiting for {what}; see {log}")


def show(label: str, mem: dict[str, object]) -> None:
    rows = mem["processes"]
    assert isinstance(rows, list)
    print(f"  {label}: PSS {int(mem['pss']) / 2**20:.0f} MiB, RSS {int(mem['rss']) / 2**20:.0f} MiB in "  # type: ignore[call-overload]
          f"{len(rows)} processes: " + ", ".join(f"{name} {p / 2**20:.0f}/{r / 2**20:.0f}" for _, name, p, r in rows),
          flush=True)


def sample(scenario: str, source: Path, args: argparse.Namespace) -> dict[str, int]:
    work = Path(tempfile.mkdtemp(prefix=f"maintd-footprint-{scenario}-"))
    shutil.copytree(source, work / "wh")
    (work / "policy.yaml").write_text(POLICY)
    conf = {"spark.maintd.inProcess.maxInputBytes": "0"} if scenario == "spark" else {}
    config = {
        "state_dir": str(work), "warehouse": {"roots": [str(work / "wh")]},
        "policy": {"path": str(work / "policy.yaml")},
        "scheduler": {"maintenance_interval_seconds": 10, "jitter_seconds": 0},
        "http": {"host": "127.0.0.1", "port": free_port()},
        "spark": {"master": "local[2]", "conf": conf,
                  **({"idle_stop_seconds": args.stop_after} if scenario == "spark" else {})},
        "logging": {"level": "INFO"},
    }
    (work / "maintd.yaml").write_text(json.dumps(config))
    log = work / "daemon.log"
    exe = str(Path(sys.executable).with_name("maintd"))
    with log.open("w") as out:
        daemon = subprocess.Popen([exe, "daemon", "--config", str(work / "maintd.yaml")], stdout=out,
                                  stderr=subprocess.STDOUT)
    engine = sa.create_engine(f"sqlite:///{work / 'maintd.db'}")
    figures: dict[str, int] = {}
    try:
        runs = wait("every table's maintenance", lambda: (r := maintained(engine)) and len(r) >= args.tables and r,
                    900, daemon, log)
        engines = sorted({str(r.get("engine")) for r in runs})
        began = time.monotonic()
        print(f"  {scenario}: {len(runs)} maintenance runs on {engines}", flush=True)
        if scenario == "small":
            from maintd.execution.local import IDLE_SECONDS

            time.sleep(args.settle)
            mem = memory(daemon.pid)
            show(f"{args.settle:.0f} s after the runs, their processes still warm", mem)
            figures["warm"] = int(mem["pss"])  # type: ignore[call-overload]
            time.sleep(max(0.0, IDLE_SECONDS + 15 - (time.monotonic() - began)))
            mem = memory(daemon.pid)
            show(f"idle {time.monotonic() - began:.0f} s after the runs, their processes ended", mem)
            figures["idle"] = int(mem["pss"])  # type: ignore[call-overload]
        else:
            time.sleep(max(0.0, args.idle - (time.monotonic() - began)))
            mem = memory(daemon.pid)
            show(f"idle {args.idle:.0f} s after the runs, session still up", mem)
            figures["idle"] = int(mem["pss"])  # type: ignore[call-overload]
            wait("the idle session to stop", lambda: "stopping the SparkSession: no run" in log.read_text(),
                 args.stop_after + 120, daemon, log)
            time.sleep(5)
            mem = memory(daemon.pid)
            show("after the idle session stopped", mem)
            figures["stopped"] = int(mem["pss"])  # type: ignore[call-overload]
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(120)
        except subprocess.TimeoutExpired:
            daemon.kill()
        engine.dispose()
    shutil.rmtree(work, ignore_errors=True)
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", default="small,spark")
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--tables", type=int, default=20)
    ap.add_argument("--settle", type=float, default=30.0, help="small: seconds after the runs before measuring")
    ap.add_argument("--idle", type=float, default=90.0, help="spark: seconds after the runs before measuring")
    ap.add_argument("--stop-after", type=float, default=150.0, help="spark: spark.idle_stop_seconds")
    args = ap.parse_args()
    source = Path(tempfile.mkdtemp(prefix="maintd-footprint-tables-"))
    make_tables(source, args.tables)
    results: dict[str, dict[str, list[int]]] = {}
    for scenario in args.scenarios.split(","):
        for i in range(args.samples):
            print(f"{scenario}, sample {i + 1}:", flush=True)
            for point, value in sample(scenario, source, args).items():
                results.setdefault(scenario, {}).setdefault(point, []).append(value)
    for scenario, points in results.items():
        for point, values in points.items():
            mib = [v / 2**20 for v in values]
            print(f"{scenario}, {point}: PSS of all processes, median {statistics.median(mib):.0f} MiB (min "
                  f"{min(mib):.0f}, max {max(mib):.0f}; samples {', '.join(f'{v:.0f}' for v in mib)})")
    shutil.rmtree(source, ignore_errors=True)


if __name__ == "__main__":
    main()
