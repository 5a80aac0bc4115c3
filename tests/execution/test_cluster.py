"""``maintd run`` and ``spark-submit`` on a real Spark standalone cluster (master and worker on 127.0.0.1).

The cluster is started once per test session from pyspark's own launcher (``tests/execution/cluster.py``);
each run is a separate process with its own driver, so it never meets the shared local SparkSession.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

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
    # the tables here are small: without maxInputBytes 0 their runs would execute in maintd's own process
    spark_conf = {"spark.executor.memory": "512m", "spark.cores.max": "2", "spark.executor.cores": "2",
                  "spark.executor.extraJavaOptions": QUICK_JVM, "spark.driver.extraJavaOptions": QUICK_JVM,
                  "spark.maintd.inProcess.maxInputBytes": "0", **conf}
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
        deadline = time.monotonic() + RUN_TIMEOUT
        while not (held.exists() and held.read_text()) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert held.exists(), "no task started on the cluster"
        worker = int(held.read_text())  # the Python worker running the held task, inside an executor
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


def test_spark_submit_runs_the_maintenance_job_on_the_cluster(tmp_path: Path, spark_cluster: Cluster) -> None:
    table, model = make_table(tmp_path, commits=8, buckets=2)
    (tmp_path / "policy.yaml").write_text(POLICY)
    env = {**_env(spark_cluster, tmp_path), "MAINTD_SPARK__MASTER": "local[1]"}  # the submission's master wins
    out = tmp_path / "summary.json"
    submit = Path(sys.executable).parent / "spark-submit"
    proc = subprocess.run([str(submit), "--master", spark_cluster.master_url, "--driver-memory", "512m",
                           "--executor-memory", "512m", "--total-executor-cores", "2",
                           "--conf", f"spark.pyspark.python={sys.executable}",
                           "--conf", f"spark.executor.extraJavaOptions={QUICK_JVM}",
                           "--driver-java-options", QUICK_JVM,
                           str(ROOT / "jobs" / "maintenance_job.py"), "--table", table.uri,
                           "--policy", str(tmp_path / "policy.yaml"), "--output", str(out), "--no-reclaim"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    [summary] = json.loads(out.read_text())
    assert summary["status"] == "ok" and summary["tasks_committed"] == 2
    assert summary["spark_master"] == spark_cluster.master_url and summary["spark_app_id"].startswith("app-")
    assert sorted_read(table).equals(model.table())
