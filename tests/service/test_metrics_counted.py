"""Every metric the daemon exports is asserted against what really happened: runs in flight, commit retries
and conflicts forced by a writer that lands while maintenance commits, a removed table's series, and the
store gauges (table and backlog bytes, leases held) read at scrape time."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from maintd import Table
from maintd.service.daemon import Daemon
from maintd.service.jobs import TableJobs
from maintd.service.metrics import Metrics
from maintd.service.records import RunKind, RunResult
from maintd.service.store import StateStore
from maintd.settings import Settings

from .test_jobs import settings_for
from .warehouse import Model, batch, create, read_sorted, write

TABLE = "/wh/orders"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[StateStore]:
    opened = StateStore(f"sqlite:///{tmp_path / 'maintd.db'}")
    yield opened
    opened.close()


def sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def daemon_settings(tmp_path: Path, *tables: str) -> Settings:
    return Settings.model_validate({"state_dir": str(tmp_path), "warehouse": {"tables": list(tables)},
                                    "store": {"lease_duration_seconds": 30, "lease_renew_interval_seconds": 5}})


@pytest.mark.parametrize("fails", [False, True])
def test_runs_in_flight_and_leases_held_count_a_run_while_it_runs_and_not_after(
    tmp_path: Path, store: StateStore, fails: bool
) -> None:
    inside, release = threading.Event(), threading.Event()

    def job(uri: str) -> RunResult:
        inside.set()
        assert release.wait(60), "the test never let the run finish"
        if fails:
            raise RuntimeError("the run fails")
        return RunResult(layout={"files": 1, "bytes": 10, "levels": {}, "backlog_files": 0, "backlog_bytes": 0})

    daemon = Daemon(daemon_settings(tmp_path, TABLE), store, job, job, holder="replica-0")
    metrics = daemon.metrics
    metrics.attach_store(store)
    assert daemon.run_pass(RunKind.MAINTENANCE) == [TABLE]
    assert inside.wait(60)
    try:
        metrics.expose()
        assert sample(metrics, "maintd_runs_in_flight", kind="maintenance") == 1
        assert sample(metrics, "maintd_leases_held", holder="replica-0") == 1
    finally:
        release.set()
    daemon.stop(grace_seconds=60)
    assert sample(metrics, "maintd_runs_in_flight", kind="maintenance") == 0
    assert sample(metrics, "maintd_leases_held", holder="replica-0") is None, "the lease was released"
    status = "failed" if fails else "succeeded"
    assert sample(metrics, "maintd_runs_total", kind="maintenance", status=status) == 1


def test_forgetting_a_removed_table_drops_its_series_when_the_daemon_publishes_tables(
    tmp_path: Path, store: StateStore
) -> None:
    kept, removed = "/wh/kept", "/wh/removed"
    daemon = Daemon(daemon_settings(tmp_path, kept, removed), store, lambda uri: RunResult(),
                    lambda uri: RunResult(), holder="replica-0")
    daemon.run_pass(RunKind.MAINTENANCE)
    daemon.stop(grace_seconds=60)
    for uri in (kept, removed):
        daemon.metrics.bytes_rewritten.labels(table=uri).inc(5)
        daemon.metrics.files_reclaimed.labels(table=uri, reason="data").inc(2)
        daemon.metrics.bytes_reclaimed.labels(table=uri).inc(7)
    daemon.publish_tables()
    store.set_enabled(removed, False)

    daemon.publish_tables()

    for name in ("maintd_bytes_rewritten_total", "maintd_bytes_reclaimed_total"):
        assert sample(daemon.metrics, name, table=removed) is None
        assert sample(daemon.metrics, name, table=kept) is not None
    assert sample(daemon.metrics, "maintd_files_reclaimed_total", table=removed, reason="data") is None
    assert sample(daemon.metrics, "maintd_files_reclaimed_total", table=kept, reason="data") == 2


def maintain_while_a_writer_lands(tmp_path: Path, store: StateStore, land: str) -> tuple[Metrics, Table, Model]:
    """Maintain a table; a writer commits (``land``: ``append`` or ``overwrite``) when the commit starts."""
    table, model = create(tmp_path / "wh" / "orders"), Model()
    write(table, model, commits=10, seed=1)
    landed: list[int] = []

    def progress(uri: str, stage: str) -> None:
        if stage != "committing" or landed:
            return
        writer = Table.open(uri)
        if land == "append":
            b = batch(np.random.default_rng(99))
            writer.write_changes(b, "op")
            model.apply(b)
        else:
            writer.overwrite(writer.read())
        landed.append(writer.version)

    metrics = Metrics()
    TableJobs(settings_for(tmp_path), store, metrics, progress=progress).maintain(table.uri)
    assert landed, "the writer must land between the plan and the commit"
    return metrics, table, model


def test_a_writer_landing_before_the_maintenance_commit_is_counted_as_a_commit_retry(
    tmp_path: Path, store: StateStore
) -> None:
    metrics, table, model = maintain_while_a_writer_lands(tmp_path, store, "append")
    assert sample(metrics, "maintd_commit_retries_total", operation="OPTIMIZE") == 1
    assert sample(metrics, "maintd_commits_total", operation="OPTIMIZE") == 1
    assert read_sorted(table.uri).equals(model.table())


def test_a_writer_removing_the_inputs_is_counted_as_a_commit_conflict_by_type(
    tmp_path: Path, store: StateStore
) -> None:
    metrics, table, model = maintain_while_a_writer_lands(tmp_path, store, "overwrite")
    assert sample(metrics, "maintd_commit_conflicts_total", type="ConcurrentDeleteDeleteError") == 1
    assert sample(metrics, "maintd_commits_total", operation="OPTIMIZE") is None
    assert read_sorted(table.uri).equals(model.table())


def test_table_and_backlog_bytes_are_served_from_the_last_run_recorded_in_the_store(
    tmp_path: Path, store: StateStore
) -> None:
    layout = {"files": 5, "bytes": 1000, "levels": {"L0": {"files": 3, "bytes": 300}, "L1": {"files": 2, "bytes": 700}},
              "backlog_files": 3, "backlog_bytes": 77}
    daemon = Daemon(daemon_settings(tmp_path), store, lambda uri: RunResult(layout=layout), lambda uri: RunResult(),
                    holder="replica-0")
    daemon.metrics.attach_store(store)
    daemon._run_table(TABLE, RunKind.MAINTENANCE)
    daemon.metrics.expose()
    assert sample(daemon.metrics, "maintd_table_bytes", table=TABLE, level="L0") == 300
    assert sample(daemon.metrics, "maintd_table_bytes", table=TABLE, level="L1") == 700
    assert sample(daemon.metrics, "maintd_table_files", table=TABLE, level="L1") == 2
    assert sample(daemon.metrics, "maintd_backlog_bytes", table=TABLE) == 77
    assert sample(daemon.metrics, "maintd_backlog_files", table=TABLE) == 3
