"""A live ``maintd daemon`` process: its Spark driver JVM killed, and SIGTERM from every state.

The daemon runs in a subprocess with local[1] Spark against a small warehouse; the test kills the JVM of
its session (the daemon's child process) and sends real signals, and watches only what an operator sees:
the probes, the state store, the exit code and the log.
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

from maintd.service.store import StateStore

from .test_daemon_e2e import Daemon, wait_for
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
  conf:
    spark.default.parallelism: "1"
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


@pytest.fixture
def setup(tmp_path: Path) -> Any:
    app = f"maintd-test-{uuid.uuid4().hex[:10]}"
    config = tmp_path / "maintd.yaml"
    config.write_text(CONFIG.format(state=tmp_path / "state", warehouse=tmp_path / "wh", app=app))
    write(create(tmp_path / "wh" / "orders"), Model(), commits=2, seed=1)
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


def test_a_killed_spark_driver_fails_liveness_stops_new_runs_and_sigterm_still_exits_0(setup: dict[str, Any]) -> None:
    daemon = Daemon(setup["config"], setup["tmp"] / "daemon.log")
    setup["daemons"].append(daemon)
    store = StateStore(f"sqlite:///{setup['tmp'] / 'state' / 'maintd.db'}", create=False)
    try:
        wait_for(lambda: daemon.get("/readyz")[0] == 200, "the daemon to be ready", timeout=120)
        # the table has nothing to do: its checks are counted on its row, no run is recorded
        wait_for(lambda: sum(t.checks for t in store.list_tables()) >= 2, "checks of the table", timeout=60)
        assert daemon.get("/healthz") == (200, "ok\n")
        [jvm] = jvms_of(setup["app"])

        os.kill(jvm, signal.SIGKILL)
        wait_for(lambda: daemon.get("/healthz")[0] == 503, "liveness to fail", timeout=30)
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
    wait_for(lambda: "starting the SparkSession" in daemon.log.read_text(), "Spark to start", timeout=60)
    log = clean_exit(daemon)
    assert "stopping while the SparkSession starts" in log or "SparkSession stopped" in log
    wait_for(lambda: not jvms_of(setup["app"]), "the JVM to end with the daemon", timeout=30)


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
