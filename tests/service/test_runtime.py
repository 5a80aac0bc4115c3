"""Start-up failures of ``maintd daemon`` name what is wrong before any Spark starts; SIGTERM at start exits 0."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

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
