"""The daemon as it is deployed: real processes, a real warehouse, a writer, Spark, signals and HTTP.

``maintd daemon`` runs in a subprocess (local[1] Spark, short intervals from its config file) against a
temporary warehouse while another process writes; the test watches it through its state store and
``/metrics`` only, as an operator would. Replicas are tested with the real daemon loop and a stand-in
job (``daemon_worker.py``), so that two of them fit on a small machine next to each other.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pyarrow.parquet as pq
import pytest
from prometheus_client.parser import text_string_to_metric_families
from waiting import wait_until

from maintd.service.records import RunKind, RunRecord
from maintd.service.store import StateStore

from .conftest import StoreTarget
from .warehouse import Model, create, read_sorted, write

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent

POLICY = """
default:
  clustering:
    level1:
      min_files: 4
  compaction:
    max_delta_files: 10
    min_interval_hours: 0
tables:
  - match: "broken"
    overrides:
      compaction:
        max_delta_files: 0
"""

CONFIG = """
state_dir: {state}
warehouse:
  roots: ["{warehouse}"]
  discovery_interval_seconds: 1
spark:
  master: "local[1]"
  driver_memory: 512m
  conf:
    spark.sql.shuffle.partitions: "1"
    spark.default.parallelism: "1"
scheduler:
  maintenance_interval_seconds: 1
  reclamation_interval_seconds: 2
  jitter_seconds: 0
  max_concurrent_tables: 2
  retry_backoff_base_seconds: 300
  retry_backoff_max_seconds: 600
  shutdown_grace_seconds: 20
store:
  lease_duration_seconds: 20
  lease_renew_interval_seconds: 2
http:
  host: 127.0.0.1
  port: 0
reclaim:
  orphan_grace_hours: 0.002   # 7 s: far longer than the writer takes from writing a file to committing it
  force_short_grace: true
policy:
  path: {policy}
"""


class Daemon:
    """``maintd daemon`` in a subprocess, its log in a file, its HTTP endpoint found from the log."""

    def __init__(self, config: Path, log: Path) -> None:
        self.log = log
        env = {k: v for k, v in os.environ.items() if not k.startswith("MAINTD_")}
        env["PYSPARK_PYTHON"] = sys.executable
        with log.open("a") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "maintd", "daemon", "--config", str(config)],
                stdout=out, stderr=subprocess.STDOUT, cwd=config.parent, env=env,
            )
        self.url = wait_until(self._endpoint, "the HTTP endpoint to be up", timeout=30)

    def _endpoint(self) -> str | None:
        assert self.proc.poll() is None, f"the daemon exited early:\n{self.log.read_text()}"
        found = re.findall(r"HTTP endpoint on (http://\S+)", self.log.read_text())
        return found[-1] if found else None

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the samples of ``name`` whose labels include ``labels``."""
        total = 0.0
        for family in text_string_to_metric_families(self.get("/metrics")[1]):
            for s in family.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                    total += s.value
        return total

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"the daemon did not exit after SIGTERM:\n{self.log.read_text()}") from None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


class _NONE:
    reclaim_succeeded_at = None


def runs(store: StateStore, uri: str, kind: RunKind = RunKind.MAINTENANCE) -> list[RunRecord]:
    return store.history(uri, kind=kind, limit=1000)


def rewrote(store: StateStore, uri: str, after_id: int = 0) -> RunRecord | None:
    """The first succeeded maintenance run of ``uri`` (newer than ``after_id``) that committed a rewrite."""
    done = [r for r in runs(store, uri) if r.id > after_id and r.status == "succeeded" and r.metrics
            and r.metrics.get("tasks_committed")]
    return done[-1] if done else None


@pytest.fixture
def warehouse(tmp_path: Path) -> Iterator[dict[str, Any]]:
    root = tmp_path / "wh"
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    config = tmp_path / "maintd.yaml"
    config.write_text(CONFIG.format(state=tmp_path / "state", warehouse=root, policy=policy))
    orders = create(root / "orders", properties={"acid.data.retain.hours": "0"})
    model = Model()
    write(orders, model, commits=12, seed=1)
    for name in ("broken", "other"):
        write(create(root / name), Model(), commits=12, seed=2)
    store = StateStore(f"sqlite:///{tmp_path / 'state' / 'maintd.db'}")
    daemons: list[Daemon] = []
    yield {"root": root, "config": config, "orders": orders, "model": model, "store": store, "daemons": daemons,
           "tmp": tmp_path}
    for d in daemons:
        d.kill()
    store.close()


def test_the_daemon_maintains_and_reclaims_under_a_writer_stops_on_sigterm_and_resumes_after_a_restart(
    warehouse: dict[str, Any],
) -> None:
    store: StateStore = warehouse["store"]
    orders, model, root, tmp = warehouse["orders"], warehouse["model"], warehouse["root"], warehouse["tmp"]
    broken, other = str(root / "broken"), str(root / "other")

    daemon = Daemon(warehouse["config"], tmp / "daemon.log")
    warehouse["daemons"].append(daemon)
    writer = subprocess.Popen([sys.executable, str(HERE / "warehouse.py"), orders.uri, "30", "7", "0.1",
                               str(tmp / "written.parquet")], stderr=subprocess.PIPE, text=True)

    # Maintenance and reclamation happen while the writer writes, within a bounded time.
    first = wait_until(lambda: rewrote(store, orders.uri), "maintenance of the written table", timeout=180)
    wait_until(lambda: rewrote(store, other), "maintenance of the other table", timeout=180)
    wait_until(lambda: daemon.metric("maintd_files_reclaimed_total", table=orders.uri), "reclamation of the table",
               timeout=180)
    assert writer.wait(timeout=60) == 0, writer.stderr.read() if writer.stderr else ""

    # The broken policy is reported for its table only: a failed run naming the error, a metric, a backoff.
    [failed] = runs(store, broken)
    assert failed.status == "failed" and failed.error and failed.error.startswith("PolicyError")
    assert "max_delta_files" in failed.error
    assert daemon.metric("maintd_run_failures_total", kind="maintenance", error="PolicyError") == 1

    # /metrics shows what happened, filled from the real runs; /readyz sees the store and Spark.
    assert daemon.metric("maintd_commits_total", operation="OPTIMIZE") >= 2
    assert daemon.metric("maintd_bytes_rewritten_total", table=orders.uri) >= first.metrics["bytes_written"] > 0
    assert daemon.metric("maintd_table_files", table=orders.uri) > 0
    assert daemon.metric("maintd_runs_total", kind="reclaim", status="succeeded") >= 1
    wait_until(lambda: daemon.metric("maintd_tables", state="failing") == 1, "the broken table counted as failing",
               timeout=180)
    wait_until(lambda: runs(store, broken, RunKind.RECLAIM) or (store.get_table(broken) or _NONE).reclaim_succeeded_at,
               "a failing maintenance does not hold reclamation back (one that deleted nothing is no run)", timeout=180)
    assert daemon.get("/readyz")[0] == 200 and daemon.get("/healthz") == (200, "ok\n")

    # The web console of the daemon (on a loopback address: served without credentials) shows the same runs:
    # the failing table first, a run of the written table on its page, the queue of this replica.
    status, fleet = daemon.get("/")
    assert status == 200 and fleet.index(f">{broken}<") < fleet.index(f">{orders.uri}<")
    status, page = daemon.get("/table?uri=" + quote(orders.uri, safe=""))
    assert status == 200 and f'href="/run?id={first.id}"' in page and "<svg" in page
    status, page = daemon.get("/daemon")
    assert status == 200 and "Running (" in page and "Queued (" in page

    # SIGTERM: exit 0, nothing left running or leased, and the table reads exactly what was written.
    assert daemon.terminate() == 0
    assert not [r for r in store.history(limit=10_000) if r.status == "running"]
    assert store.lease_holders() == {}
    model.apply(pq.read_table(tmp / "written.parquet"))
    assert read_sorted(orders.uri).equals(model.table())

    # A restart resumes: the new daemon maintains what was written while none ran.
    last_id = max(r.id for r in store.history(limit=1))
    write(orders, model, commits=12, seed=3)
    again = Daemon(warehouse["config"], tmp / "daemon2.log")
    warehouse["daemons"].append(again)
    resumed = wait_until(lambda: rewrote(store, orders.uri, after_id=last_id), "maintenance after the restart",
                         timeout=180)
    assert resumed.holder != first.holder
    assert runs(store, broken) == [failed], "the broken table still waits for its backoff"
    assert again.terminate() == 0
    assert read_sorted(orders.uri).equals(model.table())


def spawn_worker(target: StoreTarget, holder: str, tables: int, work: float,
                 passes: Path | None = None) -> subprocess.Popen[str]:
    """A daemon of stand-in runs of ``work`` seconds; with ``passes``, the file its number of maintenance passes
    so far is written to."""
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "daemon_worker.py"), target.url, target.db_schema or "-", holder, str(tables),
         str(work), *([str(passes)] if passes else [])],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read() if proc.stderr else ""
    return proc


def overlapping(all_runs: list[RunRecord]) -> list[tuple[RunRecord, RunRecord]]:
    """Pairs of runs of one table that were in progress at the same time (database clock)."""
    finished = [r for r in all_runs if r.ended_at is not None]
    return [(a, b) for i, a in enumerate(finished) for b in finished[i + 1:]
            if a.table_uri == b.table_uri and a.started_at < b.ended_at and b.started_at < a.ended_at]  # type: ignore[operator]


def test_two_daemons_on_one_store_never_maintain_a_table_at_once(store_target: StoreTarget, store: StateStore) -> None:
    # 8 tables: the replicas split them by rendezvous hashing (replica-1 owns 2), each run under its lease
    daemons = [spawn_worker(store_target, f"replica-{i}", tables=8, work=0.15) for i in range(2)]

    def both_worked() -> bool:
        done = [r for r in store.history(limit=1000) if r.status == "succeeded"]
        return {r.holder for r in done} == {"replica-0", "replica-1"} and len(done) >= 30

    try:
        wait_until(both_worked, "both replicas to maintain tables", timeout=180)
    finally:
        codes = []
        for proc in daemons:
            proc.send_signal(signal.SIGTERM)
            codes.append(proc.wait(timeout=30))
    assert codes == [0, 0]
    all_runs = store.history(limit=10_000)
    assert overlapping(all_runs) == []
    assert {r.status for r in all_runs} == {"succeeded"}
    assert store.lease_holders() == {}


def test_a_killed_daemons_tables_are_taken_over_once_its_leases_expire(
    store_target: StoreTarget, store: StateStore, tmp_path: Path
) -> None:
    first = spawn_worker(store_target, "first", tables=2, work=30)
    wait_until(lambda: len([r for r in store.history() if r.status == "running"]) == 2, "two runs in flight",
               timeout=180)
    passes = tmp_path / "second.passes"
    second = spawn_worker(store_target, "second", tables=2, work=0.1, passes=passes)

    def taken_over() -> bool:
        done = {r.table_uri for r in store.history() if r.holder == "second" and r.status == "succeeded"}
        return done == {"/wh/t0", "/wh/t1"}

    try:
        wait_until(lambda: passes.exists() and int(passes.read_text()) >= 2, "two passes of the second daemon")
        assert not [r for r in store.history() if r.holder == "second"], "a live daemon keeps its tables"
        first.kill()
        first.wait(timeout=10)
        expiry = max(lease.expires_at for lease in store.leases(live_only=False) if lease.holder == "first")
        wait_until(taken_over, "the second daemon to take both tables over", timeout=30)
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=30) == 0
    maintenance = store.history(kind=RunKind.MAINTENANCE, limit=100)
    assert [r.status for r in maintenance if r.holder == "first"] == ["abandoned", "abandoned"]
    taken = min(r.started_at for r in maintenance if r.holder == "second")
    assert taken >= expiry, "taken over only after the killed daemon's leases expired"
    assert overlapping(store.history(limit=100)) == []
