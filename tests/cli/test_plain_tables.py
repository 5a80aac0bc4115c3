"""Without a terminal, Rich tables are printed plain and full width: nothing cut at 80 columns."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from maintd import Table
from maintd.cli import app
from maintd.service.records import RunKind, RunStatus
from maintd.service.store import StateStore

runner = CliRunner()


@pytest.fixture(autouse=True)
def _no_terminal(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for key in [k for k in os.environ if k.startswith("MAINTD_") or k == "COLUMNS"]:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.chdir(tmp_path)


def long_uri(tmp_path: Path) -> str:
    return str(tmp_path / ("warehouse-with-a-long-name-" * 4) / "orders_by_region_and_customer_and_day")


def test_table_history_lists_long_parameters_in_full(tmp_path: Path) -> None:
    uri = long_uri(tmp_path)
    table = Table.create(uri, "id:int64!,name:string", primary_key="id")
    table.set_properties({"acid.data.retain.hours": "48"})
    result = runner.invoke(app, ["table", "history", uri])
    assert result.exit_code == 0, result.output
    assert "…" not in result.stdout and "\x1b[" not in result.stdout
    assert "acid.data.retain.hours" in result.stdout and "48" in result.stdout
    assert not set("┏┃━│╇") & set(result.stdout), "plain: no box drawing"


def test_status_and_history_show_long_table_uris_whole(tmp_path: Path) -> None:
    uri = long_uri(tmp_path)
    config = tmp_path / "maintd.yaml"
    config.write_text(f"state_dir: {tmp_path / 'state'}\n")
    store = StateStore(f"sqlite:///{tmp_path / 'state' / 'maintd.db'}")
    run = store.start_run(uri, RunKind.MAINTENANCE, holder="replica-with-a-long-pod-name-7f9c8d6b5-x2x4q:1")
    store.finish_run(run, RunStatus.SUCCEEDED, metrics={"tasks_planned": 0})
    store.close()
    for command in (["status"], ["history"]):
        result = runner.invoke(app, [*command, "--config", str(config)])
        assert result.exit_code == 0, result.output
        assert uri in result.stdout and "…" not in result.stdout
        assert max(len(line) for line in result.stdout.splitlines()) > len(uri) > 80
