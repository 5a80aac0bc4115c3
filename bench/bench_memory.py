"""Memory and scaling of one rewrite task: peak RSS per worker against the budget, and time against the file count.

    .venv/bin/python bench/bench_memory.py [--budget 512m] [--factors 1,4,16] [--files 100,200,400] [--samples 3]
        [--forked]

1. **Peak memory.** A compaction of one bucket whose rows take ``factor`` x the task memory budget in Arrow
   (``--factors``; 8 level-1 files per budget's worth, random overlapping keys, 10% deletes), each run in a
   fresh process that does what a Spark Python worker does (``maintd.execution.rewrite.run_task`` of the
   unit's spec), after one small task (so every module a worker loads, pyspark included, is loaded). The
   process reports its peak RSS (``VmHWM``), its RSS before the task (the interpreter and the imported
   libraries: the worker's own footprint), and the peak of Arrow's memory pool. The task's memory is the
   peak RSS above that footprint; the goal is at most the budget + 20% whatever the factor. The process
   allocates Arrow memory from jemalloc, as maintd configures its Spark workers to
   (``spark.executorEnv.ARROW_DEFAULT_MEMORY_POOL``; set ``ARROW_DEFAULT_MEMORY_POOL`` to compare others).
   With ``--forked`` the task runs in a process forked after maintd's worker preload, as the workers of its
   daemon module are (:mod:`maintd.pyspark_daemon`: their jemalloc has no background thread).
2. **Time against the file count.** A compaction of one bucket of N small level-0 files (``--files``,
   ``--rows`` each, keys drawn from one key space), streamed (a budget of the bucket's Arrow size, a third of
   what reading it whole takes) and read whole (budget above it), ``--samples`` runs each in the same
   process; medians and spread. A merge linear in the rows takes twice the time for twice the files.

Files are generated once under ``--workdir`` (default a temporary directory) and reused by every run.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from maintd import Table  # noqa: E402
from maintd.execution.rewrite import run_task  # noqa: E402
from maintd.execution.spark import parse_size  # noqa: E402
from maintd.execution.specs import TaskSpec  # noqa: E402
from maintd.table.log.actions import AddFile  # noqa: E402

SCHEMA = "id:int64!,name:string,amount:float64,qty:int32,note:string"
ROW_BYTES = 80
"""Approximate Arrow bytes of one generated row (measured on the first file and printed)."""
FILES_PER_BUDGET = 8


def _rows(rng: np.random.Generator, n: int, keyspace: int, version: int | None) -> pa.Table:
    ids = np.unique(rng.integers(0, keyspace, int(n * 1.02)))[:n]
    ids_a = pa.array(ids, pa.int64())
    name = pc.binary_join_element_wise("n", pc.cast(pc.bit_wise_and(ids_a, 0xFFFFF), pa.string()), "")
    note = pc.binary_join_element_wise("note ", pc.cast(pa.array(rng.integers(0, 999, len(ids))), pa.string()),
                                       " abcdef", "")
    cols: dict[str, Any] = {"id": ids_a, "name": name, "amount": rng.random(len(ids)),
                            "qty": pa.array(rng.integers(0, 100, len(ids)), pa.int32()), "note": note,
                            "_maintd_op": pa.array((rng.random(len(ids)) < 0.1).astype(np.int8))}
    if version is not None:
        cols["_maintd_version"] = pa.array(np.full(len(ids), version), pa.int64())
    return pa.table(cols)


def _add(table: Table, path: str, t: pa.Table, version: int, level: int) -> AddFile:
    size = os.path.getsize(table.storage.full_path(path))
    ids = t.column("id")
    deletes = int(pc.sum(t.column("_maintd_op")).as_py() or 0)
    return AddFile(path=path, bucket=0, kind="delta", level=level, rows=t.num_rows, bytes=size, min_version=version,
                   max_version=version, min_commit_time=version, max_commit_time=version, delete_rows=deletes,
                   key_min=(ids[0].as_py(),), key_max=(ids[len(ids) - 1].as_py(),))


def _generate(table: Table, count: int, rows: int, keyspace: int, level: int, seed: int) -> list[AddFile]:
    """``count`` files of ``rows`` rows (level 1: written as clustering writes; level 0: as writers do)."""
    from maintd.execution.output import OUTPUT_OPTIONS
    from maintd.table.files.datafiles import WRITE_OPTIONS

    index = Path(table.uri) / f"files-L{level}-{count}-{rows}-{seed}.json"
    if index.exists():
        return [AddFile.model_validate(a) for a in json.loads(index.read_text())]
    (Path(table.uri) / "bucket-00000").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    adds = []
    for i in range(count):
        t = _rows(rng, rows, keyspace, i + 1 if level else None)
        path = f"bucket-00000/delta-L{level}-{seed:08x}{level:04x}{i:020x}.parquet"
        opts = OUTPUT_OPTIONS if level else WRITE_OPTIONS
        pq.write_table(t, table.storage.full_path(path), row_group_size=1 << 17 if level else None, **opts)
        adds.append(_add(table, path, t, i + 1, level))
        if i == 0:
            print(f"  generated rows take {t.nbytes / t.num_rows:.0f} B each in Arrow", flush=True)
    index.write_text(json.dumps([a.model_dump(mode="json") for a in adds]))
    return adds


def _spec(table: Table, inputs: list[AddFile], budget: int) -> TaskSpec:
    return TaskSpec(table_uri=table.uri, task_id="bench", kind="compact", partition={}, bucket=0, target_level=None,
                    metadata=table.metadata, inputs=tuple(inputs), task_memory_bytes=budget,
                    target_file_bytes=128 << 20)


def _child(spec_file: str, forked: bool = False) -> None:
    """One task in a fresh process, as a Python worker runs it; prints its memory figures as JSON.

    ``forked``: the task runs in a process forked after :func:`maintd.pyspark_daemon.preload`, as a worker of
    maintd's daemon module is (its jemalloc then has no background thread)."""
    if forked:
        from maintd.pyspark_daemon import PRELOAD_ENV, preload

        os.environ[PRELOAD_ENV] = "1"
        assert preload(), "the preload failed"
        pid = os.fork()
        if pid:
            _, status = os.waitpid(pid, 0)
            sys.exit(os.waitstatus_to_exitcode(status))
    def status(key: str) -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
        return 0

    import pyspark.daemon  # noqa: F401  (a Spark Python worker has pyspark loaded)

    spec = TaskSpec.model_validate_json(Path(spec_file).read_text())
    warm = run_task(spec.model_copy(update={"inputs": spec.inputs[:1], "task_memory_bytes": 1 << 30}))
    for a in warm.adds:  # one small task first, as a worker that has run one: every module imported
        os.unlink(str(Path(spec.table_uri) / a.path))
    del warm
    gc.collect()
    pa.default_memory_pool().release_unused()  # what the warm-up freed is not part of the footprint
    baseline = status("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM: the peak from here on is the task's
    started = time.monotonic()
    r = run_task(spec)
    out = {"ok": r.ok, "error": r.error, "mode": r.mode, "rows_read": r.rows_read, "rows_written": r.rows_written,
           "files": len(r.adds), "seconds": time.monotonic() - started, "baseline": baseline,
           "peak": status("VmHWM"), "arrow_peak": pa.default_memory_pool().max_memory(),
           "outputs": [a.path for a in r.adds]}
    print(json.dumps(out), flush=True)
    if forked:
        os._exit(0)


def peak_memory(table: Table, budget: int, factors: list[int], forked: bool = False) -> None:
    per_file = budget // FILES_PER_BUDGET // ROW_BYTES
    files = _generate(table, FILES_PER_BUDGET * max(factors), per_file, 2 * FILES_PER_BUDGET * per_file, 1, seed=7)
    mib = 1 << 20
    print("\n| bucket | files | input (Parquet) | rows | mode | peak RSS | worker footprint | task memory "
          "(peak - footprint) | Arrow pool peak | task memory / budget | time |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for f in factors:
        inputs = files[: FILES_PER_BUDGET * f]
        spec_file = Path(table.uri) / "spec.json"
        spec_file.write_text(_spec(table, inputs, budget).model_dump_json())
        env = {**os.environ, "ARROW_DEFAULT_MEMORY_POOL": os.environ.get("ARROW_DEFAULT_MEMORY_POOL", "jemalloc")}
        proc = subprocess.run([sys.executable, __file__, "--child", str(spec_file), *(["--forked"] if forked else [])],
                              capture_output=True, text=True, check=True, env=env)
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        assert r["ok"], r["error"]
        for p in r["outputs"]:
            table.storage.delete(p)
        task = r["peak"] - r["baseline"]
        print(f"| {f}x budget | {len(inputs)} | {sum(a.bytes for a in inputs) / mib:,.0f} MiB | "
              f"{sum(a.rows for a in inputs):,} | {r['mode']} | {r['peak'] / mib:,.0f} MiB | "
              f"{r['baseline'] / mib:,.0f} MiB | {task / mib:,.0f} MiB | {r['arrow_peak'] / mib:,.0f} MiB | "
              f"{task / budget:.2f} | {r['seconds']:.1f} s |", flush=True)


def scaling(table: Table, counts: list[int], rows: int, samples: int) -> None:
    files = _generate(table, max(counts), rows, rows * 20, 0, seed=11)
    first = pq.read_table(table.storage.full_path(files[0].path))
    row_bytes = first.nbytes / first.num_rows
    print("\n| files | rows | streamed: median (min-max) | read whole: median (min-max) | streamed per file | "
          "ratio streamed / whole |")
    print("|---|---|---|---|---|---|")
    for n in counts:
        inputs = files[:n]
        times: dict[str, list[float]] = {"stream": [], "memory": []}
        written: set[int] = set()
        small = int(sum(a.rows for a in inputs) * row_bytes)  # the bucket's Arrow size: too small to read it whole
        for _ in range(samples):
            for mode, budget in (("stream", small), ("memory", 1 << 34)):
                r = run_task(_spec(table, inputs, budget))
                assert r.ok and r.mode in ((mode,) if mode == "memory" else ("stream", "spill")), (r.mode, r.error)
                times[mode].append(r.seconds)
                written.add(r.rows_written)
                for a in r.adds:
                    table.storage.delete(a.path)
        assert len(written) == 1, f"the streamed and whole merges wrote different row counts: {written}"
        s, m = statistics.median(times["stream"]), statistics.median(times["memory"])
        print(f"| {n} | {sum(a.rows for a in inputs):,} | {s:.2f} s ({min(times['stream']):.2f}-"
              f"{max(times['stream']):.2f}) | {m:.2f} s ({min(times['memory']):.2f}-{max(times['memory']):.2f}) | "
              f"{s / n * 1000:.1f} ms | {s / m:.1f}x |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", default="512m", help="task memory budget (default 512m)")
    ap.add_argument("--factors", default="1,4,16", help="bucket sizes, in budgets of Arrow rows")
    ap.add_argument("--files", default="100,200,400", help="file counts of the scaling runs")
    ap.add_argument("--rows", type=int, default=2000, help="rows per file of the scaling runs")
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--workdir", default=None, help="where the generated files stay (default: a temporary dir)")
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--skip-scaling", action="store_true")
    ap.add_argument("--forked", action="store_true",
                    help="run each task in a process forked after maintd's worker preload, as Spark's workers are")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.child, args.forked)
        return
    work = Path(args.workdir or tempfile.mkdtemp(prefix="maintd-bench-memory-"))
    uri = str(work / "t")
    table = Table.open(uri) if (work / "t" / "_log").exists() else Table.create(uri, SCHEMA, primary_key="id",
                                                                                buckets=1)
    print(f"workdir {work}, pyarrow {pa.__version__}, memory pool {pa.default_memory_pool().backend_name}")
    try:
        if not args.skip_memory:
            budget = parse_size(args.budget)
            print(f"\nPeak memory of one compaction task, budget {budget >> 20} MiB"
                  + (", forked after the worker preload:" if args.forked else ":"))
            peak_memory(table, budget, [int(x) for x in args.factors.split(",")], args.forked)
        if not args.skip_scaling:
            print(f"\nCompaction time against the number of level-0 files ({args.rows} rows each), "
                  f"{args.samples} samples:")
            scaling(table, [int(x) for x in args.files.split(",")], args.rows, args.samples)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
