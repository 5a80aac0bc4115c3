"""``maintd run`` with a state store (SQLite and PostgreSQL): each table under its lease, every run recorded."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner
from waiting import wait_until

from maintd import Table
from maintd.cli import app
from maintd.service.oneshot import OneShot, _Renewal, store_for_run
from maintd.service.records import RunKind
from maintd.service.store import StateStore
from maintd.settings import Settings

from .conftest import StoreTarget
from .warehouse import Model, create, read_sorted, write

POLICY = """
default:
  compaction:
    max_delta_files: 6
    min_interval_hours: 0
tables:
  - match: "broken"
    overrides:
      compaction:
        max_delta_files: 0
"""


def settings_for(tmp_path: Path, target: StoreTarget) -> Settings:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    return Settings.model_validate({
        "state_dir": str(tmp_path / "state"),
        "store": {"url": target.url, "db_schema": target.db_schema, "lease_duration_seconds": 30,
                  "lease_renew_interval_seconds": 5},
        "policy": {"path": str(policy)},
        "spark": {"master": "local[2]"},
    })


def test_a_table_leased_by_a_daemon_is_skipped_and_reported_and_nothing_is_recorded(
    tmp_path: Path, store_target: StoreTarget, store: StateStore
) -> None:
    table = create(tmp_path / "orders")
    write(table, Model(), commits=8, seed=1)
    version = table.version
    store.acquire_leases("daemon-0:7", [table.uri], 60, 1)
    [outcome] = OneShot(settings_for(tmp_path, store_target), store).run([table.uri])
    assert outcome.skipped and outcome.ok and outcome.leased_by == "daemon-0:7" and outcome.summary is None
    assert Table.open(table.uri).version == version and store.history() == []
    assert store.lease_holders() == {table.uri: "daemon-0:7"}, "the daemon's lease is left alone"


@pytest.mark.spark
def test_maintd_run_takes_the_lease_records_both_runs_and_the_layout_then_releases_it(
    tmp_path: Path, store_target: StoreTarget, store: StateStore, spark: Any
) -> None:
    table, model = create(tmp_path / "orders"), Model()
    write(table, model, commits=8, seed=2)
    runner = OneShot(settings_for(tmp_path, store_target), store, holder="maintd-run@job-1:1")
    [outcome] = runner.run([table.uri])
    assert outcome.ok and outcome.summary is not None and outcome.summary.status == "ok"
    assert outcome.run_id is not None and outcome.reclaim_run_id is not None
    maintenance, reclaim = store.get_run(outcome.run_id), store.get_run(outcome.reclaim_run_id)
    assert maintenance is not None and reclaim is not None
    assert (maintenance.kind, maintenance.status, maintenance.holder) == ("maintenance", "succeeded",
                                                                         "maintd-run@job-1:1")
    assert maintenance.metrics is not None and maintenance.metrics["tasks_committed"] > 0
    assert (reclaim.kind, reclaim.status) == ("reclaim", "skipped"), "nothing was old enough to reclaim"
    assert store.decisions_of(outcome.run_id)
    record = store.get_table(table.uri)
    assert record is not None and record.layout is not None and record.layout["files"] == outcome.summary.after.files
    assert record.maintenance_succeeded_at is not None and record.reclaim_succeeded_at is not None
    assert store.lease_holders() == {}, "released when done"
    assert read_sorted(table.uri).equals(model.table())


def test_a_failed_run_is_recorded_with_the_daemons_backoff(
    tmp_path: Path, store_target: StoreTarget, store: StateStore
) -> None:
    broken = create(tmp_path / "broken")
    write(broken, Model(), commits=3, seed=3)
    [outcome] = OneShot(settings_for(tmp_path, store_target), store).run([broken.uri])
    assert not outcome.ok and outcome.run_id is not None
    run = store.get_run(outcome.run_id)
    assert run is not None and run.status == "failed" and run.error and "PolicyError" in run.error
    record = store.get_table(broken.uri)
    assert record is not None and record.failures(RunKind.MAINTENANCE) == 1 and record.maintenance_retry_after
    assert store.due_tables([broken.uri], RunKind.MAINTENANCE) == [], "a daemon now waits out the backoff"


def test_the_lease_is_renewed_while_a_run_lasts(store: StateStore, monkeypatch: pytest.MonkeyPatch) -> None:
    store.acquire_leases("maintd-run@x", ["/wh/a"], 2, 1)
    renewed: list[bool] = []
    renew = store.renew_lease

    def counting(holder: str, uri: str, duration: float) -> bool:
        renewed.append(renew(holder, uri, duration))
        return renewed[-1]

    monkeypatch.setattr(store, "renew_lease", counting)
    started = time.monotonic()
    renewal = _Renewal(store, "maintd-run@x", "/wh/a", 30, 0.2)
    try:  # renewed (for 30 s each time) past the 2 s the lease was first taken for
        wait_until(lambda: len(renewed) >= 3 and time.monotonic() - started >= 2.5, "three renewals over 2.5 s",
                   timeout=120)
        assert all(renewed) and store.lease_holders() == {"/wh/a": "maintd-run@x"}
    finally:
        renewal.stop()


def test_the_cli_reports_a_skipped_table_and_exits_0(
    tmp_path: Path, store_target: StoreTarget, store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in [k for k in os.environ if k.startswith("MAINTD_")]:
        monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MAINTD_STORE__URL", store_target.url)
    if store_target.db_schema:
        monkeypatch.setenv("MAINTD_STORE__DB_SCHEMA", store_target.db_schema)
    table = create(tmp_path / "orders")
    store.acquire_leases("maintd-7c9f-x2:1", [table.uri], 60, 1)
    result = CliRunner().invoke(app, ["run", table.uri])
    assert result.exit_code == 0, result.output
    assert f"{table.uri}: skipped: its lease is held by maintd-7c9f-x2:1" in result.stdout


def test_without_a_configured_store_maintd_run_records_nothing(tmp_path: Path) -> None:
    settings = Settings.model_validate({"state_dir": str(tmp_path / "state")})
    assert store_for_run(settings) is None
    StateStore(settings.store.url).close()  # a local daemon created the default store: then it is used
    found = store_for_run(settings)
    assert found is not None
    found.close()
