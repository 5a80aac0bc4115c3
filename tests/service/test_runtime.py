"""Start-up failures of ``maintd daemon`` name what is wrong before any Spark starts; SIGTERM at start, or while
the first plan that needs Spark starts it, exits 0."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner
from waiting import wait_until

from maintd.cli import app
from maintd.errors import ConfigError, PolicyError
from maintd.service.runtime import serve
from maintd.settings import Settings


def settings_for(tmp_path: Path, **groups: object) -> Settings:
    return Settings.model_validate({"state_dir": str(tmp_path / "state"),
                                    "http": {"host": "127.0.0.1", "port": 0}, **groups})


def test_a_policy_file_broken_as_a_whole_stops_the_daemon_at_start(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("default:\n  compaction:\n    max_delta_files: zero\n")
    with pytest.raises(PolicyError, match="max_delta_files"):
        serve(settings_for(tmp_path, policy={"path": str(policy)}))
    assert not (tmp_path / "state" / "maintd.db").exists(), "nothing was opened"


def test_a_busy_port_is_a_config_error_naming_the_setting(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ConfigError, match=r"http\.port"):
            serve(settings_for(tmp_path, http={"host": "127.0.0.1", "port": port}))


def test_a_stop_requested_during_start_up_exits_0_before_spark_starts(tmp_path: Path) -> None:
    stop = threading.Event()
    stop.set()
    assert serve(settings_for(tmp_path, spark={"master": "no-such-master://x"}), stop=stop) == 0
    assert (tmp_path / "state" / "maintd.db").exists(), "the store was opened (and its schema created)"


def test_maintd_daemon_with_invalid_settings_exits_2_naming_the_key(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "maintd.yaml"
    config.write_text("scheduler:\n  max_concurrent_tables: 0\n")
    result = CliRunner().invoke(app, ["daemon", "--config", str(config)])
    assert result.exit_code == 2
    assert "scheduler.max_concurrent_tables" in result.stderr


def test_a_real_sigterm_while_spark_starts_exits_0_at_once_and_leaves_no_launcher(tmp_path: Path) -> None:
    """The race, forced: Spark's launcher (``$SPARK_HOME/bin/spark-submit``, replaced by one that never
    brings a JVM up) is running when the daemon process gets a real SIGTERM; it must stop at once, exit 0,
    say that it stopped while Spark started, and leave no launcher behind."""
    import os
    import signal
    import subprocess
    import sys

    spark_home = tmp_path / "spark-home"
    (spark_home / "bin").mkdir(parents=True)
    launched = tmp_path / "launcher.pid"
    submit = spark_home / "bin" / "spark-submit"
    # It lets go of the daemon's stderr, and lives while the daemon does (a zombie daemon counts as gone).
    submit.write_text(f'#!/bin/sh\nexec >/dev/null 2>&1\necho $$ > "{launched}"\n'
                      'while [ -e /proc/$PPID ] && [ "$(cut -d" " -f3 /proc/$PPID/stat)" != Z ]; do sleep 0.1; done\n')
    submit.chmod(0o755)
    config = tmp_path / "maintd.yaml"
    policy = tmp_path / "policy.yaml"
    policy.write_text("default:\n  clustering:\n    level1:\n      min_files: 4\n")
    from .warehouse import Model, create, write

    write(create(tmp_path / "wh" / "orders"), Model(), commits=6, seed=1)  # its plan needs Spark: Spark starts
    config.write_text(f"state_dir: {tmp_path / 'state'}\nhttp:\n  host: 127.0.0.1\n  port: 0\n"
                      f"warehouse:\n  roots: [{str(tmp_path / 'wh')!r}]\npolicy:\n  path: {policy}\n"
                      "spark:\n  master: local[1]\n  conf:\n    spark.maintd.inProcess.maxInputBytes: '0'\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAINTD_")} | {"SPARK_HOME": str(spark_home)}
    proc = subprocess.Popen([sys.executable, "-m", "maintd", "daemon", "--config", str(config)],
                            stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    try:
        def launcher_started() -> bool:
            assert proc.poll() is None, proc.communicate()[1]
            return launched.exists() and bool(launched.read_text().strip())

        wait_until(launcher_started, "Spark's launcher to start", timeout=120)
        launcher = int(launched.read_text())
        proc.send_signal(signal.SIGTERM)
        _, log = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, log
    assert "received SIGTERM" in log and "stopping while the SparkSession starts" in log, log
    assert "Traceback" not in log and "maintd daemon exited" in log, log
    # the launcher notices that the daemon is gone
    wait_until(lambda: not Path(f"/proc/{launcher}").exists(), "Spark's launcher to end with the daemon")
