"""New lanes against warm ones, by the allocator of Arrow's buffers in the lanes.

    .venv/bin/python bench/bench_lane_memory.py DIR/t_wide_hashed [--pools system,mimalloc] [--rounds 2]
        [--trials 3] [--pause 5] [--idle 30]

DIR is a ``bench_maintenance.py --workload wide ... --dir DIR`` work directory (its ingested table). For each pool,
``rounds`` times in alternation, a process of its own runs ``trials`` times each of three cases of one clustering
plan of every bucket (executed, not committed; each on a fresh copy of the table, untimed):

* ``new``: the lanes ended, new ones started (untimed), then ``pause`` seconds idle: a daemon's run that comes after
  its lanes ended, whose memory the machine has had time to take back (what a pause of a few seconds gives on a
  VM with free page reporting);
* ``warm``: right after the previous case, in the lanes it used;
* ``kept``: ``idle`` seconds after the previous case, in the same lanes (within their minute).

The pool is set as ``ARROW_DEFAULT_MEMORY_POOL`` in the process's environment, which the fork server inherits (a
variable the caller set is kept: ``LANE_ALLOCATORS`` in ``maintd/execution/local.py``). Printed: each execution,
then per pool and case the median and spread (min-max) of the execution's seconds, and per case the ratio of the
medians to the first pool's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

CASES = ("new", "warm", "kept")


def child(table: str, trials: int, pause: float, idle: float) -> None:
    from bench_maintenance import full_plan, settle, start_lanes

    from maintd import Table
    from maintd.execution import ExecutionOptions, execute
    from maintd.execution.local import end_lanes, start_fork_server

    options = ExecutionOptions()
    start_fork_server()
    work = Path(tempfile.mkdtemp(prefix="maintd-lanes-"))
    try:
        for _ in range(trials):
            for case in CASES:
                uri = str(work / "t")
                shutil.rmtree(uri, ignore_errors=True)
                shutil.copytree(table, uri)
                settle()
                t = Table.open(uri)
                if case == "new":
                    end_lanes()
                    start_lanes(t, options)
                    time.sleep(pause)
                elif case == "kept":
                    time.sleep(idle)
                plan = full_plan(t, "cluster")
                t0 = time.monotonic()
                results = execute(plan, t, None, options)
                dt = time.monotonic() - t0
                assert all(r.ok for r in results), [r.error for r in results if not r.ok]
                print(f"{case} {dt:.3f}", flush=True)
    finally:
        end_lanes()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("table", help="a bench_maintenance.py work directory's ingested table (DIR/t_wide_hashed)")
    ap.add_argument("--pools", default="system,mimalloc", help="Arrow memory pools to compare (the first is the base)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--pause", type=float, default=5.0, help="seconds idle after new lanes start")
    ap.add_argument("--idle", type=float, default=30.0, help="seconds idle before the kept case")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        child(args.table, args.trials, args.pause, args.idle)
        return
    pools = args.pools.split(",")
    times: dict[tuple[str, str], list[float]] = {}
    for r in range(args.rounds):
        for pool in pools:
            print(f"round {r + 1}/{args.rounds}: {pool}", flush=True)
            out = subprocess.run([sys.executable, __file__, args.table, "--child", pool, "--trials", str(args.trials),
                                  "--pause", str(args.pause), "--idle", str(args.idle)],
                                 env={**os.environ, "ARROW_DEFAULT_MEMORY_POOL": pool}, capture_output=True, text=True)
            if out.returncode:
                sys.exit(f"the {pool} run failed:\n{out.stderr}")
            for line in out.stdout.split("\n"):
                if line.split(" ")[0] in CASES:
                    case, seconds = line.split()
                    times.setdefault((pool, case), []).append(float(seconds))
                    print(f"  {pool} {case} {seconds} s", flush=True)
    print(f"\nexecution of one clustering plan, {args.rounds} rounds x {args.trials} trials per pool")
    for case in CASES:
        base = statistics.median(times[(pools[0], case)])
        for pool in pools:
            xs = times[(pool, case)]
            med = statistics.median(xs)
            print(f"  {case:5s} {pool:9s} median {med:.3f} s  spread {min(xs):.3f}-{max(xs):.3f} s  "
                  f"{med / base:.2f}x {pools[0]}")


if __name__ == "__main__":
    main()
