"""``maintd run``, ``spark-submit`` and a caller's session on a real Spark standalone cluster (127.0.0.1).

The cluster is started once per test session from pyspark's own launcher (``tests/execution/cluster.py``);
each run is a separate process with its own driver, so it never meets the shared local SparkSession. The
tables are small, well within ``spark.maintd.inProcess.maxInputBytes``: on a cluster every plan still runs
as Spark tasks on the worker's executor, which the application's event log shows.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from waiting import wait_until

from maintd import Table
from maintd.service.store import StateStore

from .cluster import QUICK_JVM, Cluster, descendants, parent_of, standalone_cluster
from .helpers import make_table, sorted_read

pytestmark = [pytest.mark.spark, pytest.mark.slow]
ROOT = Path(__file__).parent.parent.parent
POLICY = "default:\n  compaction:\n    max_delta_files: 4\n    min_interval_hours: 0\n"
RUN_TIMEOUT = 300


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with standalone_cluster(tmp_path_factory.mktemp("spark-cluster")) as cluster:
        yield cluster


def _env(cluster: Cluster, tmp: Path, **conf: str) -> dict[str, str]:
    spark_conf = {"spark.executor.memory": "512m", "spark.cores.max": "2", "spark.executor.cores": "2",
                  "spark.executor.extraJavaOptions": QUICK_JVM, "spark.driver.extraJavaOptions": QUICK_JVM,
                  **conf}
    return {**os.environ, "PYSPARK_PYTHON": sys.executable, "MAINTD_SPARK__MASTER": cluster.master_url,
            "MAINTD_SPARK__DRIVER_MEMORY": "512m", "MAINTD_SPARK__CONF": json.dumps(spark_conf),
            "MAINTD_STATE_DIR": str(tmp / "state"), "MAINTD_COMMIT__GROUP_INTERVAL_SECONDS": "0"}


def _maintd_run(table: Table, tmp: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    policy = tmp / "policy.yaml"
    policy.write_text(POLICY)
    return subprocess.Popen([sys.executable, "-m", "maintd", "run", table.uri, "--policy", str(policy), "--json",
                             "--no-reclaim"], env=env, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _summary(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=RUN_TIMEOUT)
    assert proc.returncode == 0, err[-4000:]
    [summary] = json.loads(out)
    return summary  # type: ignore[no-any-return]


def _no_stray_files(table: Table) -> bool:
    snap = table.snapshot()
    on_disk = {f.path for f in table.storage.walk() if f.path.startswith("bucket-")}
    return on_disk == set(snap.files) | set(snap.tombstones)


def test_maintd_run_on_a_standalone_cluster_completes_when_an_executor_is_killed_mid_run(
        tmp_path: Path, spark_cluster: Cluster) -> None:
    table, model = make_table(tmp_path, commits=8, buckets=4)
    markers = tmp_path / "markers"
    env = _env(spark_cluster, tmp_path, **{"spark.maintd.faults": json.dumps({"*": f"hold_once:{markers}"})})
    store_url = f"sqlite:///{tmp_path / 'store.db'}"
    env["MAINTD_STORE__URL"] = store_url
    proc = _maintd_run(table, tmp_path, env)
    try:
        held = markers / "held"

        def held_pid() -> str:
            assert proc.poll() is None, "maintd run ended before a task started on the cluster"
            return held.read_text() if held.exists() else ""

        # the Python worker running the held task, inside an executor
        worker = int(wait_until(held_pid, "a task to start on the cluster", timeout=RUN_TIMEOUT, poll=0.2))
        executor = worker
        while executor > 1 and executor not in spark_cluster.executor_pids():
            executor = parent_of(executor)
        assert executor in spark_cluster.executor_pids(), "the held task does not run in an executor"
        for pid in [executor, *descendants(executor)]:  # the executor dies with its Python workers, as a pod does
            with contextlib.suppress(ProcessLookupError):  # a worker may exit on its own once the executor is gone
                os.kill(pid, signal.SIGKILL)
        summary = _summary(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert summary["status"] == "ok" and summary["tasks_committed"] == summary["tasks_planned"] == 4
    assert summary["spark_master"] == spark_cluster.master_url and summary["spark_app_id"].startswith("app-")
    assert summary["spark_retries"] >= 1
    app = next(a for a in spark_cluster.state()["completedapps"] if a["id"] == summary["spark_app_id"])
    assert app["state"] == "FINISHED", app
    assert sorted_read(table).equals(model.table())
    assert _no_stray_files(table), "the killed attempt's output was left behind"
    store = StateStore(store_url)
    try:  # the state store's record of the run names the cluster and the application too
        [run] = store.history(table.uri, kind="maintenance")
    finally:
        store.close()
    assert run.metrics["spark_master"] == spark_cluster.master_url
    assert run.metrics["spark_app_id"] == summary["spark_app_id"] and run.metrics["spark_retries"] >= 1


def _event_log_conf(tmp: Path) -> dict[str, str]:
    events = tmp / "events"
    events.mkdir(exist_ok=True)
    return {"spark.eventLog.enabled": "true", "spark.eventLog.dir": events.as_uri(),
            "spark.eventLog.compress": "false", "spark.eventLog.rolling.enabled": "false"}


def _events(tmp: Path, app_id: str) -> list[dict[str, Any]]:
    logs = sorted(p for p in (tmp / "events").rglob("*") if p.is_file() and app_id in str(p))
    assert logs, f"no event log of {app_id}"
    return [json.loads(line) for log in logs for line in log.read_text().splitlines() if line.strip()]


def _tasks_on_executors(events: list[dict[str, Any]]) -> list[str]:
    """The executor ids of the application's successful tasks (``driver`` would be the driver's own JVM)."""
    return [e["Task Info"]["Executor ID"] for e in events if e["Event"] == "SparkListenerTaskEnd"
            and e["Task End Reason"]["Reason"] == "Success"]


def _spark_submit(cluster: Cluster, tmp: Path, job_args: list[str], env: dict[str, str],
                  conf: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``spark-submit`` of the maintenance job to ``cluster``: no interpreter path in the conf (the executors run
    the ``PYSPARK_PYTHON`` of the environment, as a user's documented setting)."""
    submit = Path(sys.executable).parent / "spark-submit"
    confs = [a for k, v in conf.items() for a in ("--conf", f"{k}={v}")]
    return subprocess.run([str(submit), "--master", cluster.master_url, "--driver-memory", "512m",
                           "--executor-memory", "512m", "--total-executor-cores", "2",
                           "--conf", f"spark.executor.extraJavaOptions={QUICK_JVM}", *confs,
                           "--driver-java-options", QUICK_JVM, str(ROOT / "jobs" / "maintenance_job.py"), *job_args],
                          env=env, cwd=tmp, capture_output=True, text=True, timeout=RUN_TIMEOUT)


def test_spark_submit_runs_a_small_tables_tasks_on_the_clusters_worker(tmp_path: Path,
                                                                       spark_cluster: Cluster) -> None:
    table, model = make_table(tmp_path, commits=8, buckets=2)
    (tmp_path / "policy.yaml").write_text(POLICY)
    env = {**_env(spark_cluster, tmp_path), "MAINTD_SPARK__MASTER": "local[1]"}  # the submission's master wins
    out = tmp_path / "summary.json"
    proc = _spark_submit(spark_cluster, tmp_path, ["--table", table.uri, "--policy", str(tmp_path / "policy.yaml"),
                                                   "--output", str(out), "--no-reclaim"],
                         env, _event_log_conf(tmp_path))
    assert proc.returncode == 0, proc.stderr[-4000:]
    [summary] = json.loads(out.read_text())
    assert summary["status"] == "ok" and summary["tasks_committed"] == 2
    assert summary["before"]["bytes"] < 64 << 20, "a table within spark.maintd.inProcess.maxInputBytes"
    assert summary["engine"] == "spark", "under spark-submit every plan runs on the submitted session's cluster"
    assert summary["spark_master"] == spark_cluster.master_url and summary["spark_app_id"].startswith("app-")
    executors = _tasks_on_executors(_events(tmp_path, summary["spark_app_id"]))
    assert len(executors) >= summary["spark_tasks"] >= 1 and "driver" not in executors, executors
    app = next(a for a in spark_cluster.state()["completedapps"] if a["id"] == summary["spark_app_id"])
    assert app["state"] == "FINISHED", app
    assert sorted_read(table).equals(model.table())


CALLER = """
import json, sys
from pyspark.sql import SparkSession
from maintd.execution.runner import Runner

master, uri, policy, events = sys.argv[1:5]
spark = (SparkSession.builder.master(master).appName("a caller's own session")
         .config("spark.executor.memory", "512m").config("spark.cores.max", "2")
         .config("spark.eventLog.enabled", "true").config("spark.eventLog.dir", events)
         .config("spark.eventLog.compress", "false").config("spark.eventLog.rolling.enabled", "false")
         .getOrCreate())
[summary] = Runner(None, policy_path=policy, spark=spark).run([uri])
print(json.dumps(summary.to_dict(), default=str))
spark.stop()
"""


def test_a_session_the_caller_gives_runs_a_small_plan_on_its_cluster(tmp_path: Path, spark_cluster: Cluster) -> None:
    table, model = make_table(tmp_path, commits=8, buckets=2)
    (tmp_path / "policy.yaml").write_text(POLICY)
    (tmp_path / "caller.py").write_text(CALLER)
    events = _event_log_conf(tmp_path)["spark.eventLog.dir"]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "MAINTD_STATE_DIR": str(tmp_path / "state"),
           "MAINTD_COMMIT__GROUP_INTERVAL_SECONDS": "0"}
    proc = subprocess.run([sys.executable, str(tmp_path / "caller.py"), spark_cluster.master_url, table.uri,
                           str(tmp_path / "policy.yaml"), events], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=RUN_TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["status"] == "ok" and summary["tasks_committed"] == 2
    assert summary["engine"] == "spark" and summary["spark_master"] == spark_cluster.master_url
    executors = _tasks_on_executors(_events(tmp_path, summary["spark_app_id"]))
    assert executors and "driver" not in executors, executors
    assert sorted_read(table).equals(model.table())


@pytest.mark.parametrize(("ship", "own"), [(True, False), (False, False), (False, True)],
                         ids=["credentials-shipped", "default", "executors-own-credentials"])
def test_spark_submit_reads_its_plan_and_writes_its_output_on_s3_shipping_credentials_only_when_asked(
        tmp_path: Path, spark_cluster: Cluster, s3_server: Any, ship: bool, own: bool) -> None:
    """The worker's executors have no credentials of their own here, unless given some in their environment
    (``own``). By default the driver's stay with the driver (without their own the executors' reads are refused
    and nothing is committed; with their own they succeed); asked to, the driver ships them. The driver's secret
    appears in no log, no event log, no output. Every time the job reads its plan from S3 and writes its output
    there."""
    from s3server import SECRET_KEY

    from maintd.storage import clear_storage_options, configure_storage
    from maintd.storage.documents import read_document, write_document

    from .helpers import plan_all
    from .test_run_stores import written_table

    bucket = s3_server.create_bucket()
    env = {**_env(spark_cluster, tmp_path), **s3_server.env}
    assert not any(k in os.environ for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")), \
        "the worker must not have credentials of its own"
    configure_storage(f"s3://{bucket}", s3_server.options)
    try:
        table, model = written_table(f"s3://{bucket}/wh/t")
        version = table.snapshot().version
        write_document(f"s3://{bucket}/jobs/plan.json", plan_all(table, "compact").model_dump_json().encode())
        args = ["--plan", f"s3://{bucket}/jobs/plan.json", "--output", f"s3://{bucket}/jobs/out/result.json",
                "--commit"]
        conf = {**_event_log_conf(tmp_path), "spark.executorEnv.AWS_EC2_METADATA_DISABLED": "true",  # no role either
                **({"spark.maintd.storage.shipOptions": "true"} if ship else {}),
                **({"spark.executorEnv.AWS_ACCESS_KEY_ID": "executor-own-key",
                    "spark.executorEnv.AWS_SECRET_ACCESS_KEY": "executor-own-secret"} if own else {})}
        proc = _spark_submit(spark_cluster, tmp_path, args, env, conf)
        out = json.loads(read_document(f"s3://{bucket}/jobs/out/result.json"))
        assert out["engine"] == "spark" and out["spark_master"] == spark_cluster.master_url
        events = _events(tmp_path, out["spark_app_id"])
        if ship or own:
            assert proc.returncode == 0, proc.stderr[-4000:]
            assert all(r["ok"] for r in out["results"]) and out["commit"]["error"] is None, out
            assert sorted_read(Table.open(table.uri)).equals(model.table())
            assert _tasks_on_executors(events) and "driver" not in _tasks_on_executors(events)
        else:
            assert proc.returncode == 1
            assert not any(r["ok"] for r in out["results"]) and out["results"], out
            assert all("StorageCredentialsError" in (r["error"] or "") for r in out["results"]), out["results"]
            assert Table.open(table.uri).snapshot().version == version, "nothing committed"
        logs = [p.read_text(errors="replace") for p in (spark_cluster.workdir / "work").rglob("std*")]
        seen = [proc.stdout, proc.stderr, json.dumps(out), json.dumps(events), *logs]
        assert not any(SECRET_KEY in text for text in seen), "the driver's secret reached a log or the event log"
    finally:
        clear_storage_options()
