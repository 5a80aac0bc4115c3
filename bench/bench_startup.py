"""Start-up time of the commands people type most: ``--help``, ``status``, ``plan`` and ``table describe``.

    .venv/bin/python bench/bench_startup.py [--samples 7]

Each command runs in a fresh interpreter (the installed ``maintd`` script of this environment) on a small
table (4 buckets, 20 commits, a checkpoint) and a fresh SQLite state store; wall time per run, median and
spread (min-max) of SAMPLES runs, and the CPU time (user + system) of each run, which the machine's other
work inflates far less than the wall time (on a shared machine, compare CPU times across runs). Bytecode
is compiled first and the runs may write it, as after ``pip install`` (an environment that forbids ``.pyc``
files, ``PYTHONDONTWRITEBYTECODE=1``, recompiles every module on every start and measures that instead).
Also printed: the load average before and after, since the machine's other work shows in these figures.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from maintd import Table


def run(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Run ``argv``; its wall time and CPU time (user + system, of the process and its children), seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=7)
    args = ap.parse_args()
    exe = str(Path(sys.executable).with_name("maintd"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    site = [p for p in sys.path if p.endswith("site-packages")]
    root = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", *site, str(root / "maintd")], env=env,
                   stdout=subprocess.DEVNULL, check=False)
    with tempfile.TemporaryDirectory() as tmp:
        table = Table.create(f"{tmp}/t", "id:int64!,name:string", primary_key="id", buckets=4,
                             properties={"log.checkpoint.interval": 10})
        for i in range(20):
            table.upsert(pa.table({"id": [i, i + 100], "name": ["a", "b"]}))
        env["MAINTD_STORE__URL"] = f"sqlite:///{tmp}/state.db"
        commands = {"--help": [exe, "--help"], "status": [exe, "status"], "plan": [exe, "plan", table.uri],
                    "table describe": [exe, "table", "describe", table.uri]}
        run([exe, "store", "upgrade"], env)  # the store the daemon would have made
        for argv in commands.values():
            run(argv, env)  # warm: the file cache, the .pyc files, the store's schema
        print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}; {args.samples} samples, seconds")
        for name, argv in commands.items():
            walls, cpus = zip(*(run(argv, env) for _ in range(args.samples)), strict=True)
            print(f"  {name:16} median {statistics.median(walls):.3f}  spread {min(walls):.3f}-{max(walls):.3f}"
                  f"   cpu median {statistics.median(cpus):.3f}  spread {min(cpus):.3f}-{max(cpus):.3f}")
        print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} at the end")


if __name__ == "__main__":
    main()
