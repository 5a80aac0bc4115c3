"""Execution on Spark: the shared local SparkSession, a concurrent writer process, and spark-submit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from waiting import wait_until

from maintd.execution import ExecutionOptions, commit_rewrites, discard_outputs, execute, malloc, run_plan

from .helpers import batch, make_table, plan_all, sorted_read

pytestmark = pytest.mark.spark


def _rows(table, result) -> pa.Table:  # type: ignore[no-untyped-def]
    """Every row a task wrote, in key order (its files hold consecutive key ranges)."""
    adds = sorted(result.adds, key=lambda a: a.key_min)
    return pa.concat_tables([pq.read_table(table.storage.full_path(a.path)) for a in adds])
HERE = Path(__file__).parent
ROOT = HERE.parent.parent


def test_spark_tasks_write_what_local_tasks_write(tmp_path: Path, spark: Any) -> None:
    table, model = make_table(tmp_path, commits=15)
    before = {v: sorted_read(table, v) for v in range(1, table.version + 1)}
    plan = plan_all(table, "cluster", level=1)
    results = execute(plan, table, spark)
    assert [r.task_id for r in results] == [t.task_id for t in plan.tasks] and all(r.ok for r in results)
    assert commit_rewrites(table, plan, results).committed
    plan = plan_all(table, "compact")
    assert commit_rewrites(table, plan, execute(plan, table, spark)).version == table.version
    assert sorted_read(table).equals(model.table())
    for v, expected in before.items():
        assert sorted_read(table, v).equals(expected)


def test_spark_tasks_store_prior_rows_that_the_change_feed_reads(tmp_path: Path, spark: Any) -> None:
    table, _ = make_table(tmp_path, commits=10)
    table.set_properties({"changes.prior.rows": "true"})
    plan = plan_all(table, "compact")
    assert commit_rewrites(table, plan, execute(plan, table, spark)).committed
    start = table.version
    rng = np.random.default_rng(2)
    for _ in range(4):
        table.write_changes(batch(rng, 60, 800), "op")
    plan = plan_all(table, "compact")
    results = execute(plan, table, spark)
    assert all(r.ok and len(r.priors) == 1 for r in results), [(r.ok, r.error, r.priors, r.mode) for r in results]
    assert commit_rewrites(table, plan, results).committed
    assert set(table.snapshot().priors) == {r.priors[0].path for r in results}
    got, want = table.changes(start), table.full_changes(start)
    assert got.num_rows and got.sort_by([("id", "ascending"), ("_change", "ascending")]).equals(
        want.sort_by([("id", "ascending"), ("_change", "ascending")]))


def test_spark_clusterings_look_up_prior_rows_that_the_change_feed_reads(tmp_path: Path, spark: Any) -> None:
    table, _ = make_table(tmp_path, commits=10)
    table.set_properties({"changes.prior.rows": "lookup"})
    plan = plan_all(table, "compact")
    assert commit_rewrites(table, plan, execute(plan, table, spark)).committed
    start = table.version
    rng = np.random.default_rng(3)
    for _ in range(4):
        table.write_changes(batch(rng, 60, 800), "op")
    want = table.full_changes(start)
    plan = plan_all(table, "cluster", level=1, only_level0=True)
    results = execute(plan, table, spark)
    assert all(r.ok and len(r.priors) == 1 and r.priors[0].lookup for r in results), [
        (r.ok, r.error, r.priors) for r in results]
    assert commit_rewrites(table, plan, results).committed
    assert all(p.attached for p in table.snapshot().priors.values()) and len(table.snapshot().priors) == len(results)
    got = table.changes(start, start + 4)
    assert got.num_rows and got.sort_by([("id", "ascending"), ("_change", "ascending")]).equals(
        want.sort_by([("id", "ascending"), ("_change", "ascending")]))


def test_spark_key_range_units_below_every_base_file_store_prior_rows_too(tmp_path: Path, spark: Any) -> None:
    """A compaction in key ranges on Spark, one range below every BaseFile: that unit answers for the task's
    BaseFiles (its spec carries them to the worker), so the task's files form a whole record."""
    from maintd import Table

    table = Table.create(str(tmp_path / "t"), "id:int64!,v:float64", primary_key="id", buckets=1,
                         properties={"changes.prior.rows": "true"})
    rng = np.random.default_rng(6)
    table.upsert(pa.table({"id": pa.array(np.arange(1000, 6000), pa.int64()), "v": rng.random(5000)}))
    plan = plan_all(table, "compact")
    plan = plan.model_copy(update={"tasks": tuple(t.model_copy(update={"target_file_bytes": 8000})
                                                  for t in plan.tasks)})
    assert commit_rewrites(table, plan, execute(plan, table, spark)).committed
    start = table.version
    table.upsert(pa.table({"id": pa.array([5, 7, 1500, 4500], pa.int64()), "v": rng.random(4)}))
    table.delete(pa.table({"id": pa.array([6, 2500], pa.int64())}))
    end = table.version
    plan = plan_all(table, "compact")
    results = execute(plan, table, spark, ExecutionOptions(task_input_bytes=12_000))
    (result,) = results
    assert result.ok and result.units > 2 and len(result.priors) == result.units, (result.error, result.priors)
    low = min(result.priors, key=lambda p: p.unit)
    assert low.key_lo is None and low.keys == 3 and low.rows == 0 and len(low.of) > 1
    assert commit_rewrites(table, plan, results).committed
    got, want = table.changes(start, end), table.full_changes(start, end)
    assert got.num_rows == 5 and got.sort_by("id").equals(want.sort_by("id"))


@pytest.mark.slow
def test_a_writer_in_another_process_and_maintenance_both_land(tmp_path: Path, spark: Any) -> None:
    table, model = make_table(tmp_path, commits=15)
    plan = plan_all(table, "compact")
    out = tmp_path / "writer.parquet"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    writer = subprocess.Popen([sys.executable, str(HERE / "writer_process.py"), table.uri, "25", "5", str(out)],
                              env=env)
    try:
        results = execute(plan, table, spark)
        # commit only once the writer has landed after the read version
        wait_until(lambda: table.version != plan.read_version, "the writer to land after the read version")
        landed_before_commit = table.version - plan.read_version
        outcome = commit_rewrites(table, plan, results)
    finally:
        assert writer.wait(timeout=120) == 0
    assert landed_before_commit >= 1, "the writer never landed between the plan and the commit"
    assert outcome.retries >= 1, "the maintenance commit must have had to get past the writer's commits"
    assert outcome.version is not None and outcome.version > plan.read_version + landed_before_commit
    assert not outcome.dropped
    model.apply(pq.read_table(out))
    assert sorted_read(table).equals(model.table())
    ops = [c.operation for c in table.history()]
    assert ops.count("WRITE") == 15 + 25 and ops.count("OPTIMIZE") == 1


@pytest.mark.slow
def test_the_spark_submit_job_runs_a_plan_from_json_and_commits(tmp_path: Path) -> None:
    table, model = make_table(tmp_path, commits=8, buckets=2)
    plan = plan_all(table, "compact")
    plan_file, out_file = tmp_path / "plan.json", tmp_path / "results.json"
    plan_file.write_text(plan.model_dump_json())
    submit = Path(sys.executable).parent / "spark-submit"
    # maintd's own settings name another master: under spark-submit, the submitted one must stand
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "MAINTD_SPARK__MASTER": "spark://127.0.0.1:9",
           "MAINTD_SPARK__DRIVER_MEMORY": "512m", "MAINTD_STATE_DIR": str(tmp_path / "state"),
           "MAINTD_COMMIT__GROUP_INTERVAL_SECONDS": "3600"}
    started = time.monotonic()
    proc = subprocess.run([str(submit), "--master", "local[1]", "--conf", "spark.ui.enabled=false",
                           str(ROOT / "jobs" / "maintenance_job.py"),
                           "--plan", str(plan_file), "--output", str(out_file), "--commit"],
                          env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(out_file.read_text())
    assert out["spark_master"] == "local[1]" and out["spark_app_id"].startswith("local-")
    assert [r["ok"] for r in out["results"]] == [True, True]
    assert out["commit"]["versions"] == [plan.read_version + 1], time.monotonic() - started
    assert sorted_read(table).equals(model.table())


def test_a_killed_python_worker_costs_one_retry_not_the_run(tmp_path: Path, spark: Any) -> None:
    """Local mode retries (local[N,F]); the killed attempt's partial output, prior-rows files too, is deleted by
    the driver."""
    assert spark.sparkContext.master == "local[2,4]"
    table, model = make_table(tmp_path, commits=10, buckets=4)
    table.set_properties({"changes.prior.rows": "true"})
    first = plan_all(table, "compact")
    assert commit_rewrites(table, first, execute(first, table)).committed  # BaseFiles, in process
    rng = np.random.default_rng(3)
    for _ in range(3):
        b = batch(rng, 60, 600)
        table.write_changes(b, "op")
        model.apply(b)
    plan = plan_all(table, "compact")
    markers = tmp_path / "markers"
    report = run_plan(plan, table, spark, ExecutionOptions(faults={"*": f"kill_once:{markers}"}), commit=True)
    assert (markers / "killed").exists(), "no worker was killed"
    assert [r.ok for r in report.results] == [True] * 4 and max(r.attempt for r in report.results) == 1
    assert report.outcome is not None and len(report.outcome.committed) == 4
    assert report.master == "local[2,4]" and report.app_id == spark.sparkContext.applicationId
    assert report.retried >= 1
    snap = table.snapshot()
    on_disk = {f.path for f in table.storage.walk() if f.path.startswith("bucket-")}
    assert len(snap.priors) == 4 and all(Path(p).name.startswith("prior-") for p in snap.priors)
    assert on_disk == set(snap.files) | set(snap.tombstones) | set(snap.priors), \
        "the killed attempt's output was left behind"
    assert sorted_read(table).equals(model.table())


@pytest.mark.parametrize("options", [ExecutionOptions(), ExecutionOptions(pack_threads=2)],
                         ids=["packs", "packs-threads"])
def test_packed_spark_tasks_write_what_one_spark_task_per_task_writes(tmp_path: Path, spark: Any,
                                                                       options: ExecutionOptions) -> None:
    table, model = make_table(tmp_path, commits=12, buckets=4)
    plan = plan_all(table, "compact")
    one_each = execute(plan, table, spark, ExecutionOptions(task_input_bytes=1))
    packed = execute(plan, table, spark, options)
    assert [r.task_id for r in packed] == [t.task_id for t in plan.tasks] and all(r.ok for r in packed)
    for a, b in zip(one_each, packed, strict=True):  # one split into key ranges, one Spark task per range
        assert a.units > 1 and len(a.adds) > 1 and b.units == 1
        assert _rows(table, a).equals(_rows(table, b))
    discard_outputs(table, one_each)
    assert commit_rewrites(table, plan, packed).committed
    assert sorted_read(table).equals(model.table())


def test_a_failing_task_fails_alone_in_its_spark_pack(tmp_path: Path, spark: Any) -> None:
    table, model = make_table(tmp_path, commits=10, buckets=4)
    plan = plan_all(table, "compact")
    victim = plan.tasks[2].task_id
    results = execute(plan, table, spark, ExecutionOptions(task_input_bytes=1 << 40,
                                                            faults={victim: "after_first_chunk"}))
    assert [r.task_id for r in results if not r.ok] == [victim]
    outcome = commit_rewrites(table, plan, results)
    assert outcome.failed == [victim] and len(outcome.committed) == len(plan.tasks) - 1
    assert set(plan.tasks[2].inputs) <= set(table.snapshot().files)
    assert sorted_read(table).equals(model.table())


def test_spark_workers_freeze_their_zip_caches(spark: Any) -> None:
    import functools

    from maintd.execution.spark import _FROZEN_ATTR, run_pack_in_worker

    run = functools.partial(run_pack_in_worker, threads=1)

    def probe(pack: list[str]) -> list[str]:
        import zipimport

        assert run(pack) == []
        frozen = getattr(zipimport.zipimporter.invalidate_caches, _FROZEN_ATTR, None)
        return sorted(frozen or ["<not frozen>"])

    archives = spark.sparkContext.parallelize([[]], 1).flatMap(probe).collect()
    assert any(a.endswith("pyspark.zip") for a in archives), archives


def test_a_spark_task_that_imported_modules_freezes_them_for_the_collector(spark: Any) -> None:
    import functools

    from maintd.execution.spark import run_pack_in_worker

    run = functools.partial(run_pack_in_worker, threads=1)

    def probe(pack: list[str]) -> list[bool]:
        import gc
        import sys

        import maintd.execution.spark as module

        module._modules_at_freeze = 0  # as if modules were imported since the last freeze
        gc.unfreeze()
        assert run(pack) == []
        return [gc.get_freeze_count() > 1000, module._modules_at_freeze == len(sys.modules)]

    assert spark.sparkContext.parallelize([[]], 1).flatMap(probe).collect() == [True, True]


def test_freezing_is_for_spark_tasks_only() -> None:
    import gc

    import maintd.execution.spark as module

    before = gc.get_freeze_count()
    module._modules_at_freeze = 0
    module.freeze_imports()  # no Spark task here: this process's objects stay where they are
    assert gc.get_freeze_count() == before and module._modules_at_freeze == 0


def test_spark_workers_allocate_arrow_memory_from_jemalloc(spark: Any) -> None:
    def pool(_: Any) -> list[str]:
        import pyarrow as pa

        return [pa.default_memory_pool().backend_name]

    assert spark.sparkContext.parallelize([0], 1).flatMap(pool).collect() == ["jemalloc"]


def test_the_workers_of_a_local_session_maintd_builds_use_the_machines_jemalloc(spark: Any) -> None:
    """Their ``malloc`` (maintd.execution.malloc); Arrow's buffers keep Arrow's own jemalloc (the test above)."""
    def maps(_: Any) -> list[bool]:
        with open("/proc/self/maps") as fh:
            return ["libjemalloc" in fh.read()]

    found = malloc.preload()
    assert spark.sparkContext.parallelize([0], 1).flatMap(maps).collect() == [found is not None]
    assert found is not None or os.environ.get("MAINTD_TEST_REQUIRE_JEMALLOC") != "1", \
        "no libjemalloc on this machine (Debian: apt-get install libjemalloc2)"


def test_the_driver_jvm_of_a_session_maintd_builds_compiles_with_the_client_compiler_only(spark: Any) -> None:
    """``-XX:TieredStopAtLevel=1`` (maintd.execution.spark.DRIVER_JIT_OPTION) reaches the running JVM."""
    from maintd.execution.spark import DRIVER_JIT_OPTION

    jvm = spark.sparkContext._jvm
    arguments = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert DRIVER_JIT_OPTION in arguments, arguments


def test_the_driver_jit_option_joins_the_users_java_options_unless_they_choose_a_tiered_level() -> None:
    from maintd.execution.spark import DRIVER_JIT_OPTION, with_driver_jit

    key = "spark.driver.extraJavaOptions"
    assert with_driver_jit({})[key] == DRIVER_JIT_OPTION
    assert with_driver_jit({key: "-Dx=1"})[key] == f"-Dx=1 {DRIVER_JIT_OPTION}"
    for theirs in ("-XX:TieredStopAtLevel=4", "-XX:-TieredCompilation -Dx=1"):
        assert with_driver_jit({key: theirs, "a": "b"}) == {key: theirs, "a": "b"}


def test_spark_workers_read_their_tasks_through_the_quick_ack_reader(spark: Any) -> None:
    """maintd's daemon module runs the workers (the shared session opts in: tests/conftest.py), and a task's input
    stream is its QuickAckReader."""

    def inputs(_: Any) -> list[str]:
        import gc
        import io

        return sorted({type(o.raw).__name__ for o in gc.get_objects()
                       if isinstance(o, io.BufferedReader) and not o.closed})

    assert spark.sparkContext.getConf().get("spark.python.daemon.module") == "maintd.pyspark_daemon"
    assert "QuickAckReader" in spark.sparkContext.parallelize([0], 1).flatMap(inputs).collect()


def test_spark_workers_import_maintd_themselves_unless_the_preload_is_asked_for(spark: Any) -> None:
    """By default the session's daemon preloads nothing (:func:`maintd.pyspark_daemon.preload` is opt-in)."""

    def worker_env(_: Any) -> list[str]:
        import os

        return [os.environ.get("MAINTD_WORKER_PRELOADED", "none")]

    assert spark.sparkContext.parallelize([0], 1).flatMap(worker_env).collect() == ["none"]


_PRELOADED_SESSION = """
import json, os, sys
os.environ["PYSPARK_PYTHON"] = sys.executable
from maintd.execution import spark_session
from maintd.settings import SparkSettings
spark = spark_session(SparkSettings(worker_daemon=True),
                      conf={"spark.master": "local[1]", "spark.driver.memory": "512m",
                            "spark.executorEnv.MAINTD_WORKER_PRELOAD": "1"})
def probe(_):
    import os, sys
    return [[os.environ.get("MAINTD_WORKER_PRELOADED", "none"), "pandas" in sys.modules]]
print(json.dumps(spark.sparkContext.parallelize([0], 1).flatMap(probe).collect()))
spark.stop()
"""


@pytest.mark.slow
def test_a_session_asked_to_preload_forks_workers_with_maintd_and_pandas_loaded() -> None:
    """``spark.executorEnv.MAINTD_WORKER_PRELOAD=1`` reaches the daemon, which preloads before it forks."""
    env = {k: v for k, v in os.environ.items() if k != "MAINTD_WORKER_PRELOAD"}
    out = subprocess.run([sys.executable, "-c", _PRELOADED_SESSION], capture_output=True, text=True, timeout=180,
                         check=True, env=env)
    ((loaded, pandas),) = json.loads(out.stdout.strip().splitlines()[-1])
    assert int(loaded) > 500 and pandas is True


_SESSION_START = """
import json, os, sys, warnings
os.environ["PYSPARK_PYTHON"] = sys.executable
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    from maintd.execution import spark_session
    spark = spark_session(conf={"spark.master": "local[1]", "spark.driver.memory": "512m"})
    spark.createDataFrame([(1, "a")], "id long, s string").toPandas()  # the pandas conversion path as well
    spark.stop()
print(json.dumps([str(w.message) for w in caught]))
"""


@pytest.mark.slow
def test_a_session_starts_without_a_pandas_warning() -> None:
    """The locked pandas is one PySpark supports fully (PySpark's own check, and a session's start and first
    pandas conversion, warn of nothing about it)."""
    import warnings

    from pyspark.sql.pandas.utils import require_minimum_pandas_version

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        require_minimum_pandas_version()
    out = subprocess.run([sys.executable, "-c", _SESSION_START], capture_output=True, text=True, timeout=180,
                         check=True)
    caught = json.loads(out.stdout.strip().splitlines()[-1])
    assert not [w for w in caught if "pandas" in w.lower()], caught
    assert "pandas" not in out.stderr.lower(), out.stderr[-2000:]


@pytest.mark.slow
def test_a_python_worker_stopped_with_sigstop_is_killed_at_the_timeout_and_its_job_runs_again(
        tmp_path: Path, spark: Any) -> None:
    table, model = make_table(tmp_path, commits=8, buckets=2)
    markers = tmp_path / "markers"
    options = ExecutionOptions(unit_timeout_seconds=8, faults={"*": f"stop_once:{markers}"})
    report = run_plan(plan_all(table, "compact"), table, spark, options, commit=True)
    pid = int((markers / "stopped").read_text())
    assert report.engine == "spark" and [r.ok for r in report.results] == [True] * 2 and report.retried >= 1

    def gone() -> bool:  # dead, or a zombie
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        except (FileNotFoundError, ProcessLookupError):  # reaped between open and read
            return True

    # Spark kills the cancelled task's worker (spark.python.task.killTimeout)
    wait_until(gone, "Spark to kill the stopped Python worker", poll=0.2)
    snap = table.snapshot()
    on_disk = {f.path for f in table.storage.walk() if f.path.startswith("bucket-")}
    assert on_disk == set(snap.files) | set(snap.tombstones), "the stopped attempt's output was left behind"
    assert sorted_read(table).equals(model.table())


@pytest.mark.slow
def test_a_spark_job_that_hangs_twice_fails_its_units_and_commits_nothing(tmp_path: Path, spark: Any) -> None:
    table, _ = make_table(tmp_path, commits=6, buckets=1)
    before = table.snapshot()
    options = ExecutionOptions(unit_timeout_seconds=6, faults={"*": f"stop:{tmp_path / 'markers'}"})
    report = run_plan(plan_all(table, "compact"), table, spark, options, commit=True)
    assert [r.ok for r in report.results] == [False]
    assert "did not finish within 6 s on Spark" in (report.results[0].error or "")
    assert len(list((tmp_path / "markers").glob("stopped-*"))) == 2, "one try and one retry"
    assert table.snapshot().version == before.version
    assert {f.path for f in table.storage.walk() if f.path.startswith("bucket-")} == set(before.files)


_PREPARE = """
import sys
from maintd.execution.spark import prepare_worker
before = "pandas" in sys.modules
print(before, prepare_worker([], freeze=False), "pandas" in sys.modules)
"""


def test_a_worker_that_warm_up_prepares_has_imported_what_a_units_first_conversion_would() -> None:
    """``warm_up`` runs :func:`prepare_worker` in each Python worker: without it a worker's first unit imports
    pandas (pyarrow's first ``pa.array`` does, about half a second) in the middle of a run's reads. A process
    of its own, so that nothing imported pandas before."""
    out = subprocess.run([sys.executable, "-c", _PREPARE], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["False", "[]", "True"], out.stdout + out.stderr
