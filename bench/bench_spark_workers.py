"""One plan executed on a warm local Spark session under different worker settings, and in process.

    .venv/bin/python bench/bench_spark_workers.py TABLE [--kind cluster] [--runs 7] [--rounds 2] [--variants ...]
        [--input-bytes 256m] [--empty-tasks 8] [--idle 0]

``TABLE`` is a table to execute on, e.g. the one ``bench_maintenance.py --dir DIR`` ingests (``DIR/t_partitioned``).
Each variant runs in a process of its own on a copy of the table: a session with the variant's settings on
top of maintd's own (worker settings take effect when the Python workers start), ``warm_up``, one untimed
execution, then ``--runs`` timed executions of the plan that rewrites every file of each bucket in one task
(as ``bench_maintenance.py`` plans it). Nothing is committed; each execution's output files are deleted after
it. ``--rounds`` rounds run every variant in turn, so a drift of the machine's speed spreads over all of them.
``--idle SECONDS`` waits that long before every execution: well above Spark's one minute (``--idle 75``), Spark has
closed the idle Python workers (it looks every 10 s for workers idle over a minute; 75 is sure to pass a look),
and every execution starts new ones, as the daemon's runs minutes apart do.

``--sequential`` instead runs the plan's units one after another in this process, three times, and prints
the last pass: each unit's seconds, phases and minor page faults (``ARROW_DEFAULT_MEMORY_POOL`` and
``JE_ARROW_MALLOC_CONF`` in the environment choose and configure the allocator, as in a Spark worker).

Printed per variant: the median wall time of ``execute`` with its spread over all rounds, the medians of
the units' summed seconds and of their merge phase, and the median of an empty job of ``--empty-tasks``
tasks (default 8), each an empty pack run by maintd's Spark backend, after the plan's executions, the Python
workers then holding what a unit imports: the fixed cost of the Spark tasks of a plan. Variants
(``--variants``, comma-separated):

* ``default``: maintd's session settings (``maintd.execution.spark``) with its worker daemon turned on
  (``spark.worker_daemon: true``, as every variant but ``stock-daemon``);
* ``stock-daemon``: PySpark's own daemon (``spark.python.daemon.module=pyspark.daemon``, what sessions maintd
  builds run by default), without the quick acknowledgement and the freeze of maintd's
  (:mod:`maintd.pyspark_daemon`);
* ``preload``: maintd's daemon with its preload (``MAINTD_WORKER_PRELOAD=1``): a new worker starts with
  maintd, pyarrow and pandas imported, and without jemalloc's background thread (:mod:`maintd.pyspark_daemon`);
* ``no-bg-thread``: ``JE_ARROW_MALLOC_CONF=background_thread:false`` in the workers (jemalloc purges as it
  allocates, as in a preloaded worker, but the worker imports for itself);
* ``in-process``: the plan in process (``spark.maintd.inProcess.maxInputBytes`` above it), in child processes of
  the fork server (:mod:`maintd.execution.local`; the untimed first execution starts the server, as the daemon
  does at its start);
* ``in-process-glibc``: the same with glibc's malloc in the lanes (``LD_PRELOAD`` set empty before the fork server
  starts), where ``in-process`` has the machine's jemalloc where it has one (``lane_allocators``);
* ``in-process-threads``: the same in threads of this process (``spark.maintd.inProcess.workers=threads``);
* ``in-process-spawn``: the same in child processes of the ``spawn`` context instead of the fork server (each
  pack's process starts a new interpreter, which imports maintd, pyarrow and pandas);
* ``uds``: ``spark.python.unix.domain.socket.enabled=true`` (the JVM talks to its Python workers over Unix
  sockets, not loopback TCP);
* ``thp``: ``JE_ARROW_MALLOC_CONF=thp:always`` in the workers (Arrow's jemalloc maps transparent huge pages);
* ``keep``: ``JE_ARROW_MALLOC_CONF=oversize_threshold:0,dirty_decay_ms:-1,muzzy_decay_ms:-1`` in the workers
  (jemalloc keeps the pages it frees);
* ``glibc``: the workers keep glibc's ``malloc`` (``spark.executorEnv.LD_PRELOAD`` empty), where maintd's sessions
  with a local master preload the machine's jemalloc (``WORKER_PRELOAD_CONF`` in ``maintd.execution.spark``);
* ``c2``: the driver JVM compiles with the server compiler too (``-XX:TieredStopAtLevel=4``, the JVM's default),
  where maintd's sessions stop at the client compiler (``DRIVER_JIT_OPTION`` in ``maintd.execution.spark``).

Also printed per variant: the median CPU seconds the driver JVM spent per execution (from ``/proc``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

VARIANTS: dict[str, dict[str, str]] = {
    "default": {},
    "in-process": {},
    "in-process-glibc": {},
    "in-process-threads": {},
    "in-process-spawn": {},
    "stock-daemon": {"spark.python.daemon.module": "pyspark.daemon"},
    "preload": {"spark.executorEnv.MAINTD_WORKER_PRELOAD": "1"},
    "no-bg-thread": {"spark.executorEnv.JE_ARROW_MALLOC_CONF": "background_thread:false"},
    "uds": {"spark.python.unix.domain.socket.enabled": "true"},
    "thp": {"spark.executorEnv.JE_ARROW_MALLOC_CONF": "thp:always"},
    "keep": {"spark.executorEnv.JE_ARROW_MALLOC_CONF": "oversize_threshold:0,dirty_decay_ms:-1,muzzy_decay_ms:-1"},
    "c2": {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=4"},
    "glibc": {"spark.executorEnv.LD_PRELOAD": ""},
}


@contextlib.contextmanager
def copied_table(table_uri: str) -> Iterator[Any]:
    """A copy of the table in a temporary directory, removed afterwards."""
    from maintd import Table

    work = Path(tempfile.mkdtemp(prefix="maintd-bench-workers-"))
    try:
        shutil.copytree(table_uri, work / "t")
        yield Table.open(str(work / "t"))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def empty_jobs(spark: Any, options: Any, tasks: int, runs: int = 15) -> list[float]:
    """Seconds of ``runs`` jobs of ``tasks`` empty packs, run by maintd's Spark backend."""
    from maintd.execution.scheduler import SparkBackend

    backend = SparkBackend(spark, options, "maintd bench: empty jobs")
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        backend.run([[] for _ in range(tasks)])
        out.append(time.perf_counter() - t0)
    return out


def child(table_uri: str, variant: str, kind: str, runs: int, tasks: int, input_bytes: str,
          idle: float = 0.0) -> dict[str, object]:
    """Executions of one variant, in this process: wall seconds, summed unit seconds, summed merge seconds,
    and empty jobs' seconds (none in process)."""
    from bench_maintenance import full_plan

    from maintd.execution import ExecutionOptions, execute, spark_session, warm_up
    from maintd.execution.spark import parse_size
    from maintd.settings import SparkSettings

    with copied_table(table_uri) as table:
        plan = full_plan(table, kind)
        if variant == "in-process-spawn":
            from maintd.execution import local

            local.CONTEXT = "spawn"
        if variant == "in-process-glibc":  # a preload of the caller's own (none) stays the lanes' (lane_allocators)
            os.environ["LD_PRELOAD"] = ""
        if variant.startswith("in-process"):
            spark, options = None, ExecutionOptions(in_process_max_bytes=1 << 50, in_process_workers=(
                "threads" if variant == "in-process-threads" else "processes"))
        else:
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
            spark = spark_session(SparkSettings(worker_daemon=True),
                                  conf={"spark.master": "local[*]", "spark.driver.memory": "1g", **VARIANTS[variant]})
            options = ExecutionOptions(in_process_max_bytes=0, task_input_bytes=parse_size(input_bytes))
            warm_up(spark, options)
        walls: list[float] = []
        units: list[float] = []
        merges: list[float] = []
        jvm: list[float] = []
        for i in range(runs + 1):
            if i and idle:
                time.sleep(idle)
            cpu0 = jvm_cpu()
            t0 = time.perf_counter()
            results = execute(plan, table, spark, options)
            wall = time.perf_counter() - t0
            cpu = jvm_cpu() - cpu0
            assert all(r.ok for r in results), [r.error for r in results if not r.ok]
            for r in results:
                for a in r.adds:
                    table.storage.delete(a.path)
            if i:  # the first execution is untimed: the JVM compiles the task path's hot methods then
                walls.append(wall)
                units.append(sum(r.seconds for r in results))
                merges.append(sum(r.phases.get("merge", 0.0) for r in results))
                jvm.append(cpu)
        empty: list[float] = []
        if spark is not None and not idle:
            empty = empty_jobs(spark, options, tasks)
            spark.stop()
        return {"variant": variant, "walls": walls, "units": units, "merges": merges, "empty": empty, "jvm": jvm}


def jvm_cpu() -> float:
    """CPU seconds (user and system) of the JVMs this process started (the local session's driver), 0 without."""
    total = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as fh:
                stat = fh.read()
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                java = b"java" in fh.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if java and int(fields[1]) == os.getpid():  # its parent is this process
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def sequential(table_uri: str, kind: str) -> None:
    """The plan's units one after another in this process: seconds, phases and minor page faults of each."""
    import resource

    import pyarrow as pa
    from bench_maintenance import full_plan

    from maintd.execution import ExecutionOptions, run_task, task_specs

    with copied_table(table_uri) as table:
        plan = full_plan(table, kind)
        specs = task_specs(plan, table.snapshot(plan.read_version), ExecutionOptions(), storage=table.storage)
        pool = pa.default_memory_pool().backend_name
        print(f"{kind}: {len(specs)} units, one after another; Arrow allocator {pool}, "
              f"JE_ARROW_MALLOC_CONF={os.environ.get('JE_ARROW_MALLOC_CONF', '')!r}")
        for rep in range(3):
            total = 0.0
            for spec in specs:
                faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                t0 = time.perf_counter()
                r = run_task(spec)
                dt = time.perf_counter() - t0
                faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
                assert r.ok, r.error
                for a in r.adds:
                    table.storage.delete(a.path)
                total += dt
                if rep == 2:
                    print(f"  unit {dt * 1000:5.0f} ms  page faults {faults:6d}  "
                          + "  ".join(f"{k} {v * 1000:.0f} ms" for k, v in r.phases.items()))
            print(f"pass {rep + 1}: {total:.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("table", help="the table to execute on (copied; nothing is committed)")
    ap.add_argument("--kind", choices=["cluster", "compact"], default="cluster")
    ap.add_argument("--runs", type=int, default=7, help="timed executions per variant and round (default 7)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds over all variants (default 2)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of: {', '.join(VARIANTS)}")
    ap.add_argument("--input-bytes", default="256m",
                    help="input per Spark task (default 256m, maintd's; smaller: more Spark tasks per plan)")
    ap.add_argument("--empty-tasks", type=int, default=8, help="tasks of the empty jobs timed (default 8)")
    ap.add_argument("--idle", type=float, default=0.0,
                    help="seconds to wait before every timed execution (75: Spark has closed the idle workers)")
    ap.add_argument("--sequential", action="store_true", help="the units one after another in this process")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.sequential:
        sequential(args.table, args.kind)
        return
    if args.child:
        print(json.dumps(child(args.table, args.child, args.kind, args.runs, args.empty_tasks, args.input_bytes,
                               args.idle)))
        return
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variant(s) {', '.join(unknown)}: choose from {', '.join(VARIANTS)}")
    from maintd import Table
    from maintd.errors import TableNotFoundError

    try:
        Table.open(args.table)
    except TableNotFoundError as exc:
        raise SystemExit(f"{exc}: give the path of a maintd table, e.g. DIR/t_partitioned after "
                         "bench_maintenance.py --dir DIR") from exc
    got: dict[str, dict[str, list[float]]] = {v: {"walls": [], "units": [], "merges": [], "empty": [], "jvm": []}
                                              for v in variants}
    for r in range(args.rounds):
        for v in variants:
            out = subprocess.run([sys.executable, __file__, args.table, "--kind", args.kind, "--runs", str(args.runs),
                                  "--empty-tasks", str(args.empty_tasks), "--input-bytes", args.input_bytes,
                                  "--idle", str(args.idle), "--child", v],
                                 capture_output=True, text=True, check=True)
            res = json.loads(out.stdout.strip().splitlines()[-1])
            for k in got[v]:
                got[v][k] += res[k]
            print(f"round {r + 1}/{args.rounds} {v:11s} wall median {statistics.median(res['walls']):.3f} s "
                  f"(samples {', '.join(f'{x:.2f}' for x in res['walls'])})", flush=True)
    print(f"\n{args.kind} of {args.table}: {args.rounds} rounds x {args.runs} runs per variant, "
          f"{args.input_bytes} of input per Spark task" + (f", {args.idle:g} s idle before each" if args.idle else ""))
    for v in variants:
        g = got[v]
        print(f"  {v:11s} wall median {statistics.median(g['walls']):.3f} s (spread {min(g['walls']):.2f}-"
              f"{max(g['walls']):.2f})  units {statistics.median(g['units']):.2f} s  "
              f"merge {statistics.median(g['merges']):.2f} s"
              + (f"  JVM CPU {statistics.median(g['jvm']):.3f} s per execution" if any(g["jvm"]) else "")
              + (f"  empty job of {args.empty_tasks} tasks {statistics.median(g['empty']) * 1000:.0f} ms "
                 f"({min(g['empty']) * 1000:.0f}-{max(g['empty']) * 1000:.0f})" if g["empty"] else ""))


if __name__ == "__main__":
    main()
