"""A live ``maintd daemon`` process: no JVM for small tables, Spark started on demand and stopped when idle, its
driver JVM killed, and SIGTERM from every state.

The daemon runs in a subprocess with local[1] Spark against a small warehouse; the tests look for the JVM among
its child processes, kill it, and send real signals, and watch only what an operator sees: the probes, the state
store, the process table, the exit code and the log.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from waiting import wait_until

from maintd.service.store import StateStore
from maintd.table import Table

from .test_daemon_e2e import Daemon
from .warehouse import Model, create, write

pytestmark = pytest.mark.slow

CONFIG = """
state_dir: {state}
warehouse:
  roots: ["{warehouse}"]
spark:
  master: "local[1]"
  app_name: "{app}"
  driver_memory: 512m
  idle_stop_seconds: {idle}
  conf:
    spark.default.parallelism: "1"
    spark.maintd.inProcess.maxInputBytes: "{in_process}"
scheduler:
  maintenance_interval_seconds: 1
  reclamation_interval_seconds: 3600
  jitter_seconds: 0
  shutdown_grace_seconds: 10
store:
  lease_duration_seconds: 20
  lease_renew_interval_seconds: 2
http:
  host: 127.0.0.1
  port: 0
"""


POLICY = """
default:
  clustering:
    level1:
      min_files: 4
"""


@pytest.fixture
def setup(tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    """A warehouse with one table that needs clustering; ``spark`` (indirect parameter) makes its plan need
    Spark (``maxInputBytes`` 0) and sets ``spark.idle_stop_seconds``, else it runs in process."""
    spark, idle = getattr(request, "param", (True, 600))
    app = f"maintd-test-{uuid.uuid4().hex[:10]}"
    config = tmp_path / "maintd.yaml"
    (tmp_path / "policy.yaml").write_text(POLICY)
    config.write_text(CONFIG.format(state=tmp_path / "state", warehouse=tmp_path / "wh", app=app, idle=idle,
                                    in_process="0" if spark else "64m")
                      + f"policy:\n  path: {tmp_path / 'policy.yaml'}\n")
    write(create(tmp_path / "wh" / "orders"), Model(), commits=6, seed=1)
    daemons: list[Daemon] = []
    yield {"config": config, "app": app, "tmp": tmp_path, "daemons": daemons}
    for daemon in daemons:
        daemon.kill()
    for pid in jvms_of(app):  # never leave a JVM behind, whatever the test found
        os.kill(pid, signal.SIGKILL)


def jvms_of(app: str) -> list[int]:
    """The pids of Java processes started for the Spark application ``app`` (found by their command line)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmdline and cmdline[0].endswith(b"java") and any(app.encode() in part for part in cmdline):
            found.append(int(entry.name))
    return found


def clean_exit(daemon: Daemon) -> str:
    """SIGTERM the daemon, expect exit code 0, and return its log, which must show a complete shutdown."""
    assert daemon.terminate() == 0, daemon.log.read_text()
    log = daemon.log.read_text()
    _, stopping = log.split("received SIGTERM", 1)
    assert "Traceback" not in stopping, log
    assert re.search(r"HTTP endpoint http://127\.0\.0\.1:\d+ closed", log), log
    assert "state store closed" in log and "maintd daemon exited\n" in log, log
    return log


def descendants(pid: int) -> list[tuple[int, str]]:
    """(pid, command name) of every live descendant of ``pid``."""
    children: dict[int, list[tuple[int, str]]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        state, ppid = stat[stat.rindex(")") + 2:].split()[:2]
        if state != "Z":
            children.setdefault(int(ppid), []).append((int(entry.name), name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child[0])
    return found


def succeeded(store: StateStore) -> list[Any]:
    """The succeeded maintenance runs, oldest first."""
    return sorted((r for r in store.history(limit=1000) if r.status == "succeeded" and r.kind == "maintenance"),
                  key=lambda r: r.id)


@pytest.mark.parametrize("setup", [(False, 600)], indirect=True, ids=["small"])
def test_a_daemon_over_small_tables_is_ready_and_maintains_them_without_ever_starting_a_jvm(
        setup: dict[str, Any]) -> None:
    daemon = Daemon(setup["config"], setup["tmp"] / "daemon.log")
    setup["daemons"].append(daemon)
    store = StateStore(f"sqlite:///{setup['tmp'] / 'state' / 'maintd.db'}", create=False)
    try:
        wait_until(lambda: daemon.get("/readyz")[0] == 200, "the daemon to be ready", timeout=60)
        [run] = wait_until(lambda: succeeded(store), "the table's maintenance", timeout=120)
        assert run.metrics["engine"] == "in-process" and run.metrics["spark_master"] is None
        wait_until(lambda: sum(t.checks for t in store.list_tables()) >= 3, "checks after the run", timeout=60)
        names = [name for _, name in descendants(daemon.proc.pid)]
        assert "java" not in names and not jvms_of(setup["app"]), names
        assert daemon.get("/readyz")[0] == 200
    finally:
        store.close()
    log = clean_exit(daemon)
    assert "starting the SparkSession" not in log


@pytest.mark.parametrize("setup", [(True, 4)], indirect=True, ids=["spark-idle-4s"])
def test_spark_starts_when_a_plan_needs_it_and_its_jvm_stops_once_idle_and_starts_again(
        setup: dict[str, Any]) -> None:
    daemon = Daemon(setup["config"], setup["tmp"] / "daemon.log")
    setup["daemons"].append(daemon)
    store = StateStore(f"sqlite:///{setup['tmp'] / 'state' / 'maintd.db'}", create=False)
    try:
        first = wait_until(lambda: succeeded(store), "the table's maintenance on Spark", timeout=240)[0]
        assert first.metrics["engine"] == "spark" and first.metrics["spark_master"].startswith("local[1")

        def settled() -> bool:  # every session started was stopped for idleness, and no JVM is left
            log = daemon.log.read_text()
            return (log.count("starting the SparkSession") == log.count("stopping the SparkSession: no run")
                    and not jvms_of(setup["app"]))

        wait_until(settled, "the idle session to stop and its JVM to exit", timeout=300)
        assert "java" not in [name for _, name in descendants(daemon.proc.pid)]
        assert daemon.get("/readyz")[0] == 200 and daemon.get("/healthz") == (200, "ok\n")
        done, starts = len(succeeded(store)), daemon.log.read_text().count("starting the SparkSession")
        write(Table.open(str(setup["tmp"] / "wh" / "orders")), Model(), commits=6, seed=2)
        again = wait_until(lambda: succeeded(store)[done:], "maintenance on a new session", timeout=240)[0]
        assert again.metrics["engine"] == "spark" and again.metrics["spark_app_id"] != first.metrics["spark_app_id"]
        assert daemon.log.read_text().count("starting the SparkSession") == starts + 1
    finally:
        store.close()
    clean_exit(daemon)


def test_a_killed_spark_driver_fails_liveness_stops_new_runs_and_sigterm_still_exits_0(setup: dict[str, Any]) -> None:
    daemon = Daemon(setup["config"], setup["tmp"] / "daemon.log")
    setup["daemons"].append(daemon)
    store = StateStore(f"sqlite:///{setup['tmp'] / 'state' / 'maintd.db'}", create=False)
    try:
        wait_until(lambda: succeeded(store), "the table's maintenance on Spark", timeout=240)
        wait_until(lambda: daemon.get("/readyz")[0] == 200, "the daemon to be ready", timeout=120)
        # the table has nothing more to do: its checks are counted on its row, no run is recorded
        checked = sum(t.checks for t in store.list_tables())
        wait_until(lambda: sum(t.checks for t in store.list_tables()) >= checked + 2, "checks of the table", timeout=60)
        assert daemon.get("/healthz") == (200, "ok\n")
        [jvm] = jvms_of(setup["app"])

        os.kill(jvm, signal.SIGKILL)
        wait_until(lambda: daemon.get("/healthz")[0] == 503, "liveness to fail", timeout=30)
        _, body = daemon.get("/healthz")
        assert "spark_driver" in body and f"pid {jvm}" in body and "exited with code -9" in body
        assert daemon.get("/readyz")[0] == 503
        time.sleep(2.5)  # a renewal writes the checks counted before the driver died
        settled, checks = store.history(limit=1000), sum(t.checks for t in store.list_tables())
        time.sleep(3)  # three maintenance passes: none may start a run, nor even check a table
        assert store.history(limit=1000) == settled
        assert sum(t.checks for t in store.list_tables()) == checks
        assert "failed" not in {r.status for r in settled}, "no table is put into backoff for a dead driver"
    finally:
        store.close()
    log = clean_exit(daemon)
    assert "not stopping the SparkSession: its driver is gone already" in log


def test_sigterm_while_spark_starts_exits_0_at_once_and_leaves_no_jvm(setup: dict[str, Any]) -> None:
    daemon = Daemon(setup["config"], setup["tmp"] / "daemon.log")
    setup["daemons"].append(daemon)
    wait_until(lambda: "starting the SparkSession" in daemon.log.read_text(), "Spark to start", timeout=60)
    log = clean_exit(daemon)
    assert "stopping while the SparkSession starts" in log or "SparkSession stopped" in log
    wait_until(lambda: not jvms_of(setup["app"]), "the JVM to end with the daemon", timeout=30)


def test_sigterm_before_anything_started_exits_0(tmp_path: Path) -> None:
    config = tmp_path / "maintd.yaml"
    config.write_text(f"state_dir: {tmp_path / 'state'}\nhttp:\n  host: 127.0.0.1\n  port: 0\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAINTD_")}
    proc = subprocess.Popen([sys.executable, "-m", "maintd", "daemon", "--config", str(config)],
                            stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    assert proc.stderr is not None
    for line in proc.stderr:  # the first log line: handlers are installed by then
        if "state store" in line:
            break
    proc.send_signal(signal.SIGTERM)
    rest = proc.stderr.read()
    assert proc.wait(timeout=60) == 0, rest
    assert "Traceback" not in rest and "maintd daemon exited" in rest
