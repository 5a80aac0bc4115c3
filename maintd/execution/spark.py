"""The SparkSession from maintd's settings, and running a plan's tasks on it.

A plan's tasks are packed into a few Spark tasks (``numSlices`` = Spark's default parallelism, one
per core, balanced by input size): a Python Spark task has a fixed cost (scheduling, the worker's
per-task set-up), so it is paid once per core rather than once per bucket, while the buckets still
run in parallel on every core. Inside a Spark task the pack's tasks run one after the other (or
``pack_threads`` at a time), each reading, merging, writing and reporting on its own. A task receives
its spec (input ``add`` actions and the table metadata, so no schema inference and no listing) and
returns only the ``add`` action of the file it wrote: the rows never travel through the driver.

Three ways to reach Spark, from the ``spark`` settings group:

* ``master: local[*]`` (default), ``spark://host:7077`` or ``k8s://https://...``: a classic session;
  packs run through ``SparkContext.parallelize(packs).flatMap(run_pack_json)``.
* ``remote: sc://host:15002`` (Spark Connect): there is no SparkContext, so the same function runs in
  ``spark.range(n).mapInArrow(...)``, one partition per pack.

Executors need maintd installed (the Docker image has it; elsewhere ship it with ``--py-files``).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from maintd.execution.rewrite import run_pack_json, run_task
from maintd.execution.specs import ExecutionOptions, PlanDoc, TaskResult, TaskSpec, task_specs

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from maintd.table import Table

TASK_MEMORY_CONF = "spark.maintd.task.memory"
"""Spark conf key (in ``spark.conf`` of the settings) for the per-task memory budget, e.g. ``512m``."""
READ_THREADS_CONF = "spark.maintd.task.readThreads"
SLICES_CONF = "spark.maintd.task.slices"
"""Spark tasks per run (packs of plan tasks); default: Spark's default parallelism (one per core)."""
PACK_THREADS_CONF = "spark.maintd.task.packThreads"
"""Plan tasks run at once inside one Spark task (default 1)."""
FILE_COST_BYTES = 64 << 10
"""Fixed cost of one input file, in bytes of input, when balancing packs (opening and decoding a small
file costs about as much as reading 64 KiB)."""

_DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "16",
    "spark.python.worker.reuse": "true",
}


def spark_session(spark_settings: Any = None, *, conf: Mapping[str, str] | None = None) -> SparkSession:
    """Get or create the SparkSession described by the ``spark`` settings group (None: local defaults)."""
    from pyspark.sql import SparkSession

    s = spark_settings
    builder = SparkSession.builder.appName(getattr(s, "app_name", "maintd"))
    remote = getattr(s, "remote", None)
    if remote:
        builder = builder.remote(remote)
    else:
        builder = builder.master(getattr(s, "master", "local[*]"))
        builder = builder.config("spark.driver.memory", getattr(s, "driver_memory", "2g"))
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        builder = builder.config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
    for k, v in {**_DEFAULT_CONF, **dict(getattr(s, "conf", {}) or {}), **dict(conf or {})}.items():
        if not remote or not k.startswith("spark.ui"):
            builder = builder.config(k, v)
    session = builder.getOrCreate()
    from maintd.engines.spark import register  # spark.read/write/writeStream.format("maintd") works in it

    register(session)
    if not remote:
        session.sparkContext.setLogLevel("WARN")
    return session


def options_from_settings(spark_settings: Any = None, **overrides: Any) -> ExecutionOptions:
    """Execution options from ``spark.conf`` (``spark.maintd.task.memory``, ``...readThreads``, ``...slices``,
    ``...packThreads``)."""
    conf = dict(getattr(spark_settings, "conf", {}) or {})
    values: dict[str, Any] = {}
    if TASK_MEMORY_CONF in conf:
        values["task_memory_bytes"] = parse_size(conf[TASK_MEMORY_CONF])
    if READ_THREADS_CONF in conf:
        values["read_threads"] = int(conf[READ_THREADS_CONF])
    if SLICES_CONF in conf:
        values["slices"] = int(conf[SLICES_CONF])
    if PACK_THREADS_CONF in conf:
        values["pack_threads"] = int(conf[PACK_THREADS_CONF])
    return ExecutionOptions(**(values | overrides))


def parse_size(text: str) -> int:
    """``512m`` -> bytes (k, m, g, t suffixes as in JVM sizes; a bare number is bytes)."""
    t = text.strip().lower().rstrip("b")
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}.get(t[-1:], 1)
    return int(float(t[:-1] if mult > 1 else t) * mult)


def execute(plan: Any, table: Table, spark: SparkSession | None = None,
            options: ExecutionOptions | None = None) -> list[TaskResult]:
    """Run every task of ``plan`` (on Spark, or in local threads when ``spark`` is None).

    Returns one result per task, in plan order. A task that fails is reported (``ok=False``) and its
    partial output deleted; the other tasks are unaffected.
    """
    doc = PlanDoc.of(plan)
    if not doc.tasks:
        return []
    specs = task_specs(doc, table.snapshot(doc.read_version), options)
    if spark is None:
        return run_local(specs)
    return run_on_spark(spark, specs, options)


def run_local(specs: Sequence[TaskSpec], threads: int = 2) -> list[TaskResult]:
    """Run tasks in this process (tests, and tables too small to be worth a Spark job)."""
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(run_task, specs))


def task_cost(spec: TaskSpec) -> int:
    """The relative cost of a task, for balancing packs: input bytes plus a fixed cost per file."""
    return sum(f.bytes for f in spec.inputs) + FILE_COST_BYTES * len(spec.inputs)


def pack_tasks(specs: Sequence[TaskSpec], slices: int) -> list[list[int]]:
    """Split tasks (by index) into at most ``slices`` packs of about equal cost, biggest tasks first.

    Longest-processing-time-first: each task, from the costliest, goes to the pack with the least cost
    so far. Deterministic; packs are never empty.
    """
    n = max(1, min(slices, len(specs)))
    costs = [task_cost(s) for s in specs]
    packs: list[list[int]] = [[] for _ in range(n)]
    loads = [0] * n
    for i in sorted(range(len(specs)), key=lambda i: (-costs[i], i)):
        j = min(range(n), key=lambda j: (loads[j], j))
        packs[j].append(i)
        loads[j] += costs[i]
    return [p for p in packs if p]


def run_on_spark(spark: SparkSession, specs: Sequence[TaskSpec],
                 options: ExecutionOptions | None = None) -> list[TaskResult]:
    """Run tasks as packs, one Spark task per pack; results in the order of ``specs``."""
    if not specs:
        return []
    opts = options or ExecutionOptions()
    connect = _is_connect(spark)
    slices = opts.slices or (len(specs) if connect else spark.sparkContext.defaultParallelism)
    packs = [[specs[i].model_dump_json() for i in p] for p in pack_tasks(specs, slices)]
    run = functools.partial(run_pack_in_worker, threads=opts.pack_threads, freeze=opts.freeze_zip_caches)
    if connect:
        out = _run_connect(spark, packs, run)
    else:
        sc = spark.sparkContext
        sc.setJobDescription(f"maintd: {len(specs)} rewrite task(s) in {len(packs)} Spark task(s) of "
                             f"{specs[0].table_uri}")
        out = sc.parallelize(packs, numSlices=len(packs)).flatMap(run).collect()
    by_id = {r.task_id: r for r in (TaskResult.model_validate_json(x) for x in out)}
    return [by_id.get(s.task_id) or _lost(s) for s in specs]


def _lost(spec: TaskSpec) -> TaskResult:
    return TaskResult(task_id=spec.task_id, kind=spec.kind, ok=False, inputs=tuple(f.path for f in spec.inputs),
                      error="no result came back for this task")


def run_pack_in_worker(pack: Sequence[str], threads: int = 1, freeze: bool = True) -> list[str]:
    """What one Spark task runs: a pack of task specs (JSON) in, one result JSON per task out."""
    if freeze:
        freeze_zip_caches()
    return run_pack_json(pack, threads)


def warm_up(spark: SparkSession, options: ExecutionOptions | None = None) -> None:
    """Start the Python workers of every slice and prepare them (import maintd, freeze zip caches).

    A long-lived session pays this once; call it after creating the session so the first run does not.
    """
    opts = options or ExecutionOptions()
    if _is_connect(spark):
        return
    sc = spark.sparkContext
    n = opts.slices or sc.defaultParallelism
    run = functools.partial(run_pack_in_worker, threads=1, freeze=opts.freeze_zip_caches)
    sc.parallelize([[] for _ in range(n)], numSlices=n).flatMap(run).collect()


_FROZEN_ATTR = "_maintd_frozen_archives"


def freeze_zip_caches() -> None:
    """Make the zip archives now on ``sys.path`` skip the directory re-read before every Spark task.

    A PySpark worker calls ``importlib.invalidate_caches()`` before each task, and on Python 3.11
    every ``zipimporter`` then re-reads its whole archive directory. A worker's path holds Spark's
    ``pyspark.zip`` (one importer per imported subpackage) and the spark-core jar (5,000 entries):
    about 0.2 s of CPU per Spark task, more than a small bucket's whole rewrite. These archives do
    not change while the worker lives; archives added later (``addPyFile``) keep the normal behaviour.
    Only done inside a Spark task (a no-op in the driver); idempotent.
    """
    import zipimport

    if getattr(zipimport.zipimporter.invalidate_caches, _FROZEN_ATTR, None) is not None:
        return
    try:
        from pyspark import TaskContext
    except ImportError:  # pragma: no cover - pyspark is a dependency
        return
    if TaskContext.get() is None:
        return
    frozen = frozenset(imp.archive for imp in list(sys.path_importer_cache.values())
                       if isinstance(imp, zipimport.zipimporter))
    original = zipimport.zipimporter.invalidate_caches

    def invalidate_caches(self: zipimport.zipimporter) -> None:
        if self.archive not in frozen:
            original(self)

    setattr(invalidate_caches, _FROZEN_ATTR, frozen)
    zipimport.zipimporter.invalidate_caches = invalidate_caches  # type: ignore[method-assign]


def _is_connect(spark: Any) -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _run_connect(spark: Any, packs: list[list[str]], run: Any) -> list[str]:
    import pyarrow as pa

    def run_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            ids = b.column(0).to_pylist()
            yield pa.RecordBatch.from_pydict({"result": [r for i in ids for r in run(packs[i])]})

    n = len(packs)
    df = spark.range(0, n, 1, numPartitions=n).mapInArrow(run_batches, "result string")
    return [row[0] for row in df.collect()]
