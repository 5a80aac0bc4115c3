"""The daemon's per-table work on real tables (rewrites in local threads, no Spark) and what it publishes."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from freezegun import freeze_time

from maintd import Table
from maintd.service.jobs import TableJobs, reclaimed_by_reason
from maintd.service.metrics import Metrics
from maintd.service.records import RunStatus
from maintd.service.store import StateStore
from maintd.settings import ReclaimSettings, Settings

from .warehouse import Model, create, read_sorted, write

POLICY = """
default:
  clustering:
    level1:
      min_files: 4
  compaction:
    max_delta_files: 6
    min_interval_hours: 0
tables:
  - match: "broken"
    overrides:
      clustering:
        level1:
          min_files: 1
"""


def settings_for(tmp_path: Path, **warehouse: object) -> Settings:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    return Settings.model_validate({
        "state_dir": str(tmp_path / "state"),
        "warehouse": {"roots": [str(tmp_path / "wh")], **warehouse},
        "store": {"lease_duration_seconds": 30, "lease_renew_interval_seconds": 5},
        "policy": {"path": str(policy)},
    })


@pytest.fixture
def store(tmp_path: Path) -> Iterator[StateStore]:
    opened = StateStore(f"sqlite:///{tmp_path / 'maintd.db'}")
    yield opened
    opened.close()


def sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_maintaining_a_table_rewrites_it_and_reports_layout_backlog_and_commits(
    tmp_path: Path, store: StateStore
) -> None:
    table, model = create(tmp_path / "wh" / "orders"), Model()
    write(table, model, commits=10, seed=1)
    metrics = Metrics()
    jobs = TableJobs(settings_for(tmp_path), store, metrics)
    result = jobs.maintain(table.uri)
    assert result.status is RunStatus.SUCCEEDED and result.error is None
    m = result.metrics
    assert m["tasks_committed"] == m["tasks_planned"] > 0 and m["files"] < m["files_before"] == 20
    assert m["backlog_files"] == 0 and m["version"] == table.version
    assert result.plan["tasks"] and {d.action for d in result.decisions} == {"compact"}
    assert read_sorted(table.uri).equals(model.table())
    assert sample(metrics, "maintd_commits_total", operation="OPTIMIZE") == 1
    assert sample(metrics, "maintd_bytes_rewritten_total", table=table.uri) == m["bytes_written"] > 0
    assert sample(metrics, "maintd_commit_duration_seconds_count", operation="OPTIMIZE") == 1
    assert result.layout is not None
    assert result.layout["levels"]["base"]["files"] == m["files"] == result.layout["files"]
    assert result.layout["backlog_files"] == 0


def test_a_table_with_nothing_to_do_is_skipped_and_stores_no_decisions(tmp_path: Path, store: StateStore) -> None:
    table, model = create(tmp_path / "wh" / "quiet"), Model()
    write(table, model, commits=2, seed=2)
    result = TableJobs(settings_for(tmp_path), store, Metrics()).maintain(table.uri)
    assert result.status is RunStatus.SKIPPED and result.decisions == () and result.plan is None
    assert result.metrics["tasks_planned"] == 0 and result.metrics["files"] == 4


def test_a_broken_policy_override_fails_only_the_tables_it_matches(tmp_path: Path, store: StateStore) -> None:
    broken, fine = create(tmp_path / "wh" / "broken"), create(tmp_path / "wh" / "fine")
    for t in (broken, fine):
        write(t, Model(), commits=8, seed=3)
    jobs = TableJobs(settings_for(tmp_path), store, Metrics())
    bad = jobs.maintain(broken.uri)
    assert bad.status is RunStatus.FAILED and bad.error_type == "PolicyError"
    assert "broken" in (bad.error or "") and "min_files" in (bad.error or "")
    assert bad.metrics["files"] == 16 and bad.metrics["backlog_files"] is None, "layout shown, backlog unknown"
    assert jobs.maintain(fine.uri).status is RunStatus.SUCCEEDED


def test_a_run_that_lost_its_lease_does_not_commit(tmp_path: Path, store: StateStore) -> None:
    table, model = create(tmp_path / "wh" / "orders"), Model()
    write(table, model, commits=10, seed=4)
    version = table.version
    metrics = Metrics()
    jobs = TableJobs(settings_for(tmp_path), store, metrics, holder="me")
    store.acquire_leases("someone-else", [table.uri], 60, 1)
    result = jobs.maintain(table.uri)
    assert result.status is RunStatus.ABANDONED and result.error_type == "LeaseLostError"
    assert "no longer holds the table's lease" in (result.error or "")
    assert Table.open(table.uri).version == version and sample(metrics, "maintd_commits_total",
                                                               operation="OPTIMIZE") is None
    store.release_all("someone-else")
    store.acquire_leases("me", [table.uri], 60, 1)
    assert jobs.maintain(table.uri).status is RunStatus.SUCCEEDED
    assert read_sorted(table.uri).equals(model.table())


def test_discovery_searches_the_roots_again_only_after_its_interval(tmp_path: Path, store: StateStore) -> None:
    create(tmp_path / "wh" / "a")
    jobs = TableJobs(settings_for(tmp_path, discovery_interval_seconds=300), store, Metrics())
    with freeze_time("2026-01-05 08:00:00") as clock:  # the interval is measured on time.monotonic
        assert jobs.discover() == [str(tmp_path / "wh" / "a")]
        create(tmp_path / "wh" / "b")
        clock.tick(299)
        assert jobs.discover() == [str(tmp_path / "wh" / "a")]
        clock.tick(2)
        assert jobs.discover() == [str(tmp_path / "wh" / "a"), str(tmp_path / "wh" / "b")]


def test_reclamation_deletes_what_retention_frees_and_publishes_it_by_reason(
    tmp_path: Path, store: StateStore
) -> None:
    table = create(tmp_path / "wh" / "orders")
    write(table, Model(), commits=6, seed=3)
    replaced = set(table.snapshot().files)
    before = read_sorted(table.uri)
    table.overwrite(table.read())  # every earlier file becomes a tombstone
    table.set_properties({"acid.data.retain.hours": 0})
    orphan = tmp_path / "wh" / "orders" / "bucket-00000" / f"delta-L0-{'a' * 32}.parquet"
    orphan.write_bytes(b"left by a crashed writer")
    settings = settings_for(tmp_path).model_copy(update={"reclaim": ReclaimSettings(orphan_grace_hours=6)})
    now = datetime.now(UTC) + timedelta(hours=7)  # the orphan is older than the grace by then
    metrics = Metrics()
    latest = table.version

    result = TableJobs(settings, store, metrics, clock=lambda: now).reclaim(table.uri)

    assert result.status is RunStatus.SUCCEEDED
    assert result.metrics["data_files_deleted"] == len(replaced) and result.metrics["orphan_files_deleted"] == 1
    assert result.metrics["oldest_retained_version"] == latest and table.version == latest + 1, "and its record"
    assert not any((tmp_path / "wh" / "orders" / p).exists() for p in replaced) and not orphan.exists()
    assert sample(metrics, "maintd_files_reclaimed_total", table=table.uri, reason="data") == len(replaced)
    assert sample(metrics, "maintd_files_reclaimed_total", table=table.uri, reason="orphan") == 1
    assert sample(metrics, "maintd_files_reclaimed_total", table=table.uri, reason="log") == latest
    assert sample(metrics, "maintd_bytes_reclaimed_total", table=table.uri) == (
        result.metrics["data_bytes_deleted"] + result.metrics["orphan_bytes_deleted"]
        + result.metrics["log_bytes_deleted"])
    assert read_sorted(table.uri) == before


def test_deleted_counts_are_read_by_reason_from_a_reclamation_report() -> None:
    report = {"data_files_deleted": 3, "data_bytes_deleted": 100, "log_files_deleted": 2, "files_deleted": 9,
              "versions_expired": 4, "dry_run": True, "orphan_files_deleted": None}
    assert reclaimed_by_reason(report) == {"data": (3, 100), "log": (2, 0), "all": (9, 0)}


def test_the_layout_and_the_gauges_show_the_pins_and_the_bytes_they_hold_back(
    tmp_path: Path, store: StateStore
) -> None:
    from maintd.reclaim import plan_reclamation

    table, model = create(tmp_path / "wh" / "pinned"), Model()
    write(table, model, commits=8, seed=4)
    table.pin(2, timedelta(hours=5), "report")
    table.set_properties({"acid.data.retain.hours": 0})
    metrics = Metrics()
    metrics.attach_store(store)
    jobs = TableJobs(settings_for(tmp_path), store, metrics)
    store.register_table(table.uri)
    result = jobs.maintain(table.uri)  # compacts: the files version 2 reads become tombstones the pin holds
    assert result.layout is not None and result.layout["pins"] == 1
    held = plan_reclamation(Table.open(table.uri)).pinned_bytes
    assert held > 0 and result.layout["pinned_bytes"] == held
    run = store.start_run(table.uri, "maintenance")
    store.finish_run(run, result.status, layout=result.layout)
    assert sample(metrics, "maintd_table_pins", table=table.uri) == 1
    assert sample(metrics, "maintd_table_pinned_bytes", table=table.uri) == held
