"""The SparkSession maintd runs on, and what its Python workers need (options, warm-up, zip caches, collector).

maintd runs on the session the user runs it with:

* **an existing session** (a notebook, an application embedding maintd, a test): used as it is.
* **under** ``spark-submit`` (``jobs/maintenance_job.py``): the session the submission configured,
  master and deploy settings included; maintd's own ``spark`` settings do not override any of them;
* **otherwise** maintd builds one from its ``spark`` settings (``master`` or ``remote``, ``app_name``,
  ``driver_memory``, ``conf``). A local master without a failure count gets ``spark.task.maxFailures``
  (default 4), since Spark retries nothing in plain local mode, and ``local[*]`` counts the CPUs of the
  container's quota (:func:`maintd.execution.cpus.usable_cpus`).

**Where work runs** (:func:`runs_small_plans_in_process`): only in a session maintd builds itself with a local
master may a plan of at most ``spark.maintd.inProcess.maxInputBytes`` run without a Spark job, in this process.
Every other session runs every plan as Spark jobs on its cluster, whatever the size.

**What executors are given.** The task specs and, by default, the table's storage options that are not
credentials: executors use their own. ``spark.ship_storage_options`` (or ``spark.maintd.storage.shipOptions``)
ships the driver's credentials in the tasks, hidden in every ``repr``; a local master's Python workers get them
without asking and run this interpreter, while a cluster's executors run the one ``PYSPARK_PYTHON`` names there.
Executors need maintd installed (the Docker image has it).

Execution options of maintd itself are read from ``spark.conf`` of the settings in every mode.
docs/architecture.md ("Spark modes") gives the reasons.
"""

from __future__ import annotations

import functools
import gc
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from loguru import logger

from maintd.errors import ConfigError
from maintd.execution import malloc
from maintd.execution.cpus import usable_cpus
from maintd.execution.rewrite import release_memory, run_pack_json, task_context
from maintd.execution.specs import ExecutionOptions
from maintd.redaction import withheld_from_children
from maintd.storage import SHIP_CONF, CarriedStorage

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TASK_MEMORY_CONF = "spark.maintd.task.memory"
"""Spark conf key (in ``spark.conf`` of the settings) for the per-task memory budget, e.g. ``512m``."""
READ_THREADS_CONF = "spark.maintd.task.readThreads"
"""Inputs of a unit fetched at once (default 4)."""
DECODE_THREADS_CONF = "spark.maintd.task.decodeThreads"
"""Threads that decode a unit's fetched inputs (default 1: every core already runs a unit)."""
INPUT_BYTES_CONF = "spark.maintd.task.inputBytes"
"""Input bytes of one Spark task, e.g. ``256m``: large compactions split into key ranges of this size, small
plan tasks packed up to it."""
PACK_THREADS_CONF = "spark.maintd.task.packThreads"
"""Plan tasks run at once inside one Spark task (default 1)."""
IN_PROCESS_BYTES_CONF = "spark.maintd.inProcess.maxInputBytes"
"""Input of a run up to which it executes in process (on the daemon's machine), not on Spark, e.g. ``64m`` (0:
always Spark)."""
IN_PROCESS_THREADS_CONF = "spark.maintd.inProcess.threads"
"""Units at once when a run executes in process (default 0: one per CPU the daemon may run on)."""
IN_PROCESS_WORKERS_CONF = "spark.maintd.inProcess.workers"
"""What runs them: ``processes`` (default, a child process per pack from the fork server) or ``threads``."""
TASK_TIMEOUT_CONF = "spark.maintd.task.timeout"
"""Seconds a pack (in process) or a Spark job of packs may take before it is killed and run again, e.g. ``600s``,
``10m`` (default: 300 s plus 1 s per MiB of its input)."""
FAULTS_CONF = "spark.maintd.faults"
"""Fault injection for tests: JSON object of plan task id (or ``*``) to fault (:class:`ExecutionOptions`)."""
SHIP_STORAGE_CONF = SHIP_CONF
"""``spark.maintd.storage.shipOptions``: ``true``: tasks carry the driver's storage credentials to the executors
(``spark.ship_storage_options`` sets it in sessions maintd builds; under ``spark-submit`` or in a session of your
own, set it in the Spark conf)."""
OWNER_CONF = "spark.maintd.session.owner"
"""``maintd`` in the sessions maintd builds itself: with a local master (and only then) they may run small plans
without a Spark job (:func:`runs_small_plans_in_process`)."""
PYSPARK_PYTHON_CONF = "spark.pyspark.python"
MAX_FAILURES_CONF = "spark.task.maxFailures"
DEFAULT_MAX_FAILURES = 4

_DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "16",
    "spark.python.worker.reuse": "true",
    # Arrow allocates from jemalloc in the Python workers: with the release after every merged chunk it
    # hands freed memory back promptly, where mimalloc (pyarrow's default) kept well above a small budget
    # (docs/architecture.md, "Memory"). The variable must be set before the worker first allocates.
    "spark.executorEnv.ARROW_DEFAULT_MEMORY_POOL": "jemalloc",
}
WORKER_PRELOAD_CONF = "spark.executorEnv.LD_PRELOAD"
"""A local master's Python workers preload the machine's jemalloc as their ``malloc``, as the lanes do
(:mod:`maintd.execution.malloc`): the units run on this machine. Arrow's buffers keep Arrow's own jemalloc, so the
task memory budget stands. A cluster master's executors get nothing: their images may lack the library."""
DAEMON_MODULE_CONF = "spark.python.daemon.module"
DAEMON_MODULE = "maintd.pyspark_daemon"
"""PySpark's daemon with workers that acknowledge the JVM's writes at once and freeze what their imports left
for the collector: tens of milliseconds less per Python task (:mod:`maintd.pyspark_daemon`). Off by default (it
replaces a private function of PySpark's). ``spark.worker_daemon: true`` sets it in sessions maintd builds, once
:func:`maintd.pyspark_daemon.incompatibility` finds the running pyspark as it expects, and unless the settings
name a daemon module themselves or ship code with ``spark.submit.pyFiles`` (the daemon starts before any shipped
file is on its path, so it needs maintd installed on the executors)."""
DRIVER_JAVA_OPTIONS_CONF = "spark.driver.extraJavaOptions"
DRIVER_JIT_OPTION = "-XX:TieredStopAtLevel=1"
"""The driver JVM of a session maintd builds compiles with the client compiler (C1) only. maintd's driver
schedules Python tasks and reads their small results; it runs no query of its own, so the server compiler's
faster code gains it little, while its compilations take CPU from the Python workers run after run
(docs/architecture.md, "Spark modes"). Options of the user's that choose a tiered level themselves are left
alone."""
_LOCAL = re.compile(r"local(?:\[(\*|\d+)\])?")
_ANY_LOCAL = re.compile(r"local(?:\[[^\]]*\])?")


def spark_session(spark_settings: Any = None, *, conf: Mapping[str, str] | None = None) -> SparkSession:
    """The session to run on: an existing one, the one ``spark-submit`` configured, or one built from the
    ``spark`` settings group (None: local defaults) with ``conf`` on top (:func:`session_conf`)."""
    from pyspark.sql import SparkSession

    existing = existing_session()
    if existing is not None:
        return existing
    if os.environ.get("PYSPARK_GATEWAY_PORT"):  # launched by spark-submit: its configuration stands
        logger.info("running under spark-submit: the submitted master and configuration are used as they are; "
                    "every plan runs as Spark jobs of it")
        return SparkSession.builder.getOrCreate()
    s = spark_settings
    remote = getattr(s, "remote", None)
    merged = session_conf(s, conf)
    if PYSPARK_PYTHON_CONF in merged and is_local_master(merged.get("spark.master", "")):
        os.environ.setdefault("PYSPARK_PYTHON", merged[PYSPARK_PYTHON_CONF])
    builder = SparkSession.builder.appName(getattr(s, "app_name", "maintd"))
    builder = builder.remote(remote) if remote else builder
    for k, v in merged.items():
        builder = builder.master(v) if k == "spark.master" else builder.config(k, v)
    with withheld_from_children():  # the JVM and its Python workers never need the state store's credentials
        session = builder.getOrCreate()
    from maintd.engines.spark import register  # spark.read/write/writeStream.format("maintd") works in it

    register(session)
    if not remote:
        session.sparkContext.setLogLevel("WARN")
    return session


def session_conf(spark_settings: Any = None, conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """The configuration of a session maintd builds from its ``spark`` settings (``spark.master`` included for a
    classic session): maintd's defaults, the settings' ``conf``, then ``conf``.

    A local master runs ``local[N,F]`` (:func:`with_task_retries`) and its Python workers with this interpreter
    (``PYSPARK_PYTHON`` or ``sys.executable``) and the machine's jemalloc (:data:`WORKER_PRELOAD_CONF`), unless the
    conf names them; a cluster master gets neither: what the driver's machine has means nothing on an executor's
    image.
    """
    s = spark_settings
    merged = {**_DEFAULT_CONF, **dict(getattr(s, "conf", {}) or {}), **dict(conf or {})}
    merged[OWNER_CONF] = "maintd"
    if getattr(s, "ship_storage_options", False):
        merged[SHIP_STORAGE_CONF] = "true"
    if getattr(s, "remote", None):
        return {k: v for k, v in merged.items() if not k.startswith("spark.ui") and k != "spark.master"}
    failures = int(merged.get(MAX_FAILURES_CONF, DEFAULT_MAX_FAILURES))
    master = with_task_retries(merged.pop("spark.master", None) or getattr(s, "master", "local[*]"), failures)
    merged = {"spark.master": master, "spark.driver.memory": getattr(s, "driver_memory", "2g"), **merged}
    if is_local_master(master):
        merged.setdefault(PYSPARK_PYTHON_CONF, os.environ.get("PYSPARK_PYTHON") or sys.executable)
        if (preload := malloc.preload()) is not None:
            merged.setdefault(WORKER_PRELOAD_CONF, preload)
    return with_driver_jit(with_daemon_module(merged, bool(getattr(s, "worker_daemon", False))))


def is_local_master(master: str) -> bool:
    """Whether ``master`` runs everything in the driver's JVM (``local``, ``local[4]``, ``local[*,4]``)."""
    return _ANY_LOCAL.fullmatch(master.strip()) is not None


def runs_small_plans_in_process(spark: Any = None, spark_settings: Any = None) -> bool:
    """Whether a small plan may run without a Spark job: only in a session maintd builds itself with a local master.

    ``spark``: the session the caller gave (None: the one maintd would use, :func:`spark_session`, found or
    foreseen without starting a JVM). Under ``spark-submit``, in a session the caller built (a notebook's, one
    passed to :class:`~maintd.execution.runner.Runner`), on a cluster master or Spark Connect: False, every plan
    runs on the session's cluster.
    """
    session = spark if spark is not None else _running_session()
    if session is not None:
        return is_own_local_session(session)
    if os.environ.get("PYSPARK_GATEWAY_PORT") or getattr(spark_settings, "remote", None):
        return False
    conf = dict(getattr(spark_settings, "conf", {}) or {})
    return is_local_master(str(conf.get("spark.master") or getattr(spark_settings, "master", "local[*]")))


def is_own_local_session(spark: Any) -> bool:
    """Whether ``spark`` is a session maintd built itself (:data:`OWNER_CONF`) with a local master."""
    if is_connect(spark):
        return False
    try:
        sc = spark.sparkContext
        return bool(sc.getConf().get(OWNER_CONF) == "maintd" and is_local_master(str(sc.master)))
    except Exception:  # a session going away: it runs nothing either way
        return False


def _running_session() -> Any:
    """The session this process runs, if any, without importing pyspark when nothing has."""
    if "pyspark" not in sys.modules:
        return None
    return existing_session()


def ships_storage_options(spark: Any, options: ExecutionOptions) -> bool:
    """Whether tasks carry the driver's storage credentials: ``options.ship_storage_options`` (the settings),
    :data:`SHIP_STORAGE_CONF` in the session's conf, or a local master (whose Python workers are this process's
    children on this machine: the credentials stay where they are)."""
    if options.ship_storage_options:
        return True
    try:
        if str(spark.conf.get(SHIP_STORAGE_CONF, "false")).strip().lower() == "true":
            return True
        return not is_connect(spark) and is_local_master(str(spark.sparkContext.master))
    except Exception:  # a session without that conf API (a stand-in): the default
        return False


def with_daemon_module(conf: Mapping[str, str], enabled: bool = False) -> dict[str, str]:
    """``conf`` with maintd's daemon module (:data:`DAEMON_MODULE`) when ``enabled``, unless it names one, ships code
    with ``spark.submit.pyFiles``, or the running pyspark is not the one the module was written for (then PySpark's
    own daemon runs, and a warning says why)."""
    out = dict(conf)
    if not enabled or "spark.submit.pyFiles" in out or DAEMON_MODULE_CONF in out:
        return out
    from maintd.pyspark_daemon import incompatibility

    reason = incompatibility()
    if reason is not None:
        logger.warning("spark.worker_daemon is on, but {}: PySpark's own worker daemon runs instead", reason)
        return out
    out[DAEMON_MODULE_CONF] = DAEMON_MODULE
    return out


def with_driver_jit(conf: Mapping[str, str]) -> dict[str, str]:
    """``conf`` with :data:`DRIVER_JIT_OPTION` added to the driver's Java options, unless they choose a tiered
    compilation level themselves."""
    out = dict(conf)
    given = out.get(DRIVER_JAVA_OPTIONS_CONF, "")
    if "TieredStopAtLevel" not in given and "TieredCompilation" not in given:
        out[DRIVER_JAVA_OPTIONS_CONF] = f"{given} {DRIVER_JIT_OPTION}".strip()
    return out


def existing_session() -> SparkSession | None:
    """The session this process already runs (in this thread or another), if any."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    if SparkContext._active_spark_context is not None:
        return SparkSession.builder.getOrCreate()
    return None


def with_task_retries(master: str, failures: int = DEFAULT_MAX_FAILURES) -> str:
    """``local[N]`` -> ``local[N,F]``: local mode retries a failed task only when told how often; ``local[*]`` ->
    ``local[C,F]`` with C the CPUs of the container's quota (Spark's own ``*`` counts the node's cores)."""
    m = _LOCAL.fullmatch(master.strip())
    if m is None:
        return master
    threads = m.group(1) or "1"
    return f"local[{usable_cpus() if threads == '*' else threads},{max(1, failures)}]"


def spark_info(spark: Any) -> tuple[str | None, str | None]:
    """(master URL, application id) of a session, for run summaries."""
    if spark is None:
        return None, None
    try:
        if is_connect(spark):
            return spark.conf.get("spark.master", None), spark.conf.get("spark.app.id", None)
        sc = spark.sparkContext
        return str(sc.master), str(sc.applicationId)
    except Exception:  # a session that is going away: the summary does without
        return None, None


def options_from_settings(spark_settings: Any = None, **overrides: Any) -> ExecutionOptions:
    """Execution options from ``spark.conf`` (``spark.maintd.task.memory``, ``...readThreads``,
    ``...decodeThreads``, ``...inputBytes``, ``...packThreads``, ``spark.maintd.inProcess.maxInputBytes``,
    ``...threads``, ``...workers``, ``spark.maintd.task.timeout``, ``spark.maintd.faults``)."""
    conf = dict(getattr(spark_settings, "conf", {}) or {})
    values: dict[str, Any] = {}
    if TASK_MEMORY_CONF in conf:
        values["task_memory_bytes"] = parse_size(conf[TASK_MEMORY_CONF])
    if READ_THREADS_CONF in conf:
        values["read_threads"] = int(conf[READ_THREADS_CONF])
    if DECODE_THREADS_CONF in conf:
        values["decode_threads"] = int(conf[DECODE_THREADS_CONF])
    if INPUT_BYTES_CONF in conf:
        values["task_input_bytes"] = parse_size(conf[INPUT_BYTES_CONF])
    if PACK_THREADS_CONF in conf:
        values["pack_threads"] = int(conf[PACK_THREADS_CONF])
    if IN_PROCESS_BYTES_CONF in conf:
        values["in_process_max_bytes"] = parse_size(conf[IN_PROCESS_BYTES_CONF])
    if IN_PROCESS_THREADS_CONF in conf:
        values["in_process_threads"] = int(conf[IN_PROCESS_THREADS_CONF])
    if IN_PROCESS_WORKERS_CONF in conf:
        workers = str(conf[IN_PROCESS_WORKERS_CONF]).strip().lower()
        if workers not in ("processes", "threads"):
            raise ConfigError(f"spark.conf {IN_PROCESS_WORKERS_CONF} is {conf[IN_PROCESS_WORKERS_CONF]!r}; "
                              "use 'processes' (a child process per pack, the default) or 'threads' (threads of "
                              "this process)")
        values["in_process_workers"] = workers
    if TASK_TIMEOUT_CONF in conf:
        values["unit_timeout_seconds"] = parse_duration(TASK_TIMEOUT_CONF, conf[TASK_TIMEOUT_CONF])
    if FAULTS_CONF in conf:
        values["faults"] = json.loads(conf[FAULTS_CONF])
    if getattr(spark_settings, "ship_storage_options", False) or str(conf.get(SHIP_STORAGE_CONF, "")).lower() == "true":
        values["ship_storage_options"] = True
    return ExecutionOptions(**(values | overrides))


def parse_duration(key: str, text: str) -> float:
    """``90``, ``90s``, ``10m``, ``1h`` -> seconds (above 0)."""
    t = str(text).strip().lower()
    mult = {"s": 1, "m": 60, "h": 3600}.get(t[-1:], 1)
    try:
        seconds = float(t[:-1] if t[-1:] in "smh" else t) * mult
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise ConfigError(f"spark.conf {key} is {text!r}; give a duration above 0 such as 600, 600s, 10m or 1h")
    return seconds


def parse_size(text: str) -> int:
    """``512m`` -> bytes (k, m, g, t suffixes as in JVM sizes; a bare number is bytes)."""
    t = text.strip().lower().rstrip("b")
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}.get(t[-1:], 1)
    return int(float(t[:-1] if mult > 1 else t) * mult)


def run_pack_in_worker(pack: Sequence[str], threads: int = 1, freeze: bool = True,
                       storage: CarriedStorage | None = None, attempt: int | None = None, release: bool = True
                       ) -> list[str]:
    """What one Spark task runs: a pack of task specs (JSON) in, one result JSON per task out.

    ``storage``: the table's storage options, carried from the driver, registered here before any spec runs.
    ``attempt``: the attempt at the pack (None: the Spark task's; a pack run in process is given it).
    ``release``: what Arrow freed goes back to the system at the end (:func:`~maintd.execution.rewrite.release_memory`):
    a worker forked after :func:`~maintd.worker_preload.preload_worker` has no allocator thread to do it while it
    idles. A lane of :mod:`maintd.execution.local` keeps it for its next pack instead.
    What the task's imports left is frozen for the collector (:func:`freeze_imports`).
    """
    if freeze:
        freeze_zip_caches()
    if storage is not None:
        storage.install()
    try:
        return run_pack_json(pack, threads, attempt)
    finally:
        if release:
            release_memory()
        freeze_imports()


def warm_up(spark: SparkSession, options: ExecutionOptions | None = None) -> None:
    """Start the Python workers of every core and prepare them (:func:`prepare_worker`).

    A long-lived session pays this once; call it after creating the session so the first run does not.
    """
    opts = options or ExecutionOptions()
    if is_connect(spark):
        return
    sc = spark.sparkContext
    n = sc.defaultParallelism
    run = functools.partial(prepare_worker, freeze=opts.freeze_zip_caches)
    sc.parallelize([[] for _ in range(n)], numSlices=n).flatMap(run).collect()


def prepare_worker(pack: Sequence[str], freeze: bool = True) -> list[str]:
    """What :func:`warm_up` runs in a Python worker: everything a unit imports (:func:`~maintd.worker_preload.
    preload_worker`, pandas included: pyarrow's first ``pa.array`` imports it, about half a second), then the pack
    as :func:`run_pack_in_worker` runs one (zip caches frozen, and what the imports left frozen for the collector).

    Without the pandas, a worker's first unit paid for it, in the middle of a run's reads."""
    from maintd.worker_preload import preload_worker

    preload_worker()
    return run_pack_in_worker(pack, threads=1, freeze=freeze)


_FROZEN_ATTR = "_maintd_frozen_archives"


def in_spark_task() -> bool:
    """Whether this code runs in a Spark task (a PySpark worker running a task's function); never imports pyspark
    to learn it (:func:`~maintd.execution.rewrite.task_context`), which would cost more than a small pack's work at
    the end of every pack run in process."""
    return task_context() is not None


def freeze_zip_caches() -> None:
    """Make the zip archives now on ``sys.path`` skip the directory re-read before every Spark task.

    A PySpark worker calls ``importlib.invalidate_caches()`` before each task, and on Python 3.11
    every ``zipimporter`` then re-reads its whole archive directory. A worker's path holds Spark's
    ``pyspark.zip`` (one importer per imported subpackage) and the spark-core jar (thousands of entries),
    more work than a small bucket's whole rewrite. These archives do not change while the worker lives;
    archives added later (``addPyFile``) keep the normal behaviour.
    Only done inside a Spark task (a no-op in the driver); idempotent.
    """
    import zipimport

    if getattr(zipimport.zipimporter.invalidate_caches, _FROZEN_ATTR, None) is not None or not in_spark_task():
        return
    frozen = frozenset(imp.archive for imp in list(sys.path_importer_cache.values())
                       if isinstance(imp, zipimport.zipimporter))
    original = zipimport.zipimporter.invalidate_caches

    def invalidate_caches(self: zipimport.zipimporter) -> None:
        if self.archive not in frozen:
            original(self)

    setattr(invalidate_caches, _FROZEN_ATTR, frozen)
    zipimport.zipimporter.invalidate_caches = invalidate_caches  # type: ignore[method-assign]


_modules_at_freeze = 0


def freeze_imports() -> None:
    """In a Spark task that imported modules since the last freeze: collect garbage, then freeze what survives
    (``gc.freeze``); a no-op outside a Spark task and in a task that imported nothing.

    PySpark's own daemon collects garbage after every task of a reused worker, and a worker that imported maintd,
    pyarrow and pandas holds tens of thousands of objects for that collection to walk each time. Frozen, they
    stay out of every later collection (a frozen object is still freed when nothing refers to it), and the
    collection after a task walks what the task allocated. Only the first
    tasks of a worker import anything. :mod:`maintd.pyspark_daemon`, when it runs, freezes after such tasks too.
    """
    global _modules_at_freeze
    if len(sys.modules) == _modules_at_freeze or not in_spark_task():
        return
    gc.collect()
    gc.freeze()
    _modules_at_freeze = len(sys.modules)


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (no SparkContext)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")
