"""``/metrics`` at 10,000 tables: fleet-wide series always, per-table series only within the configured bounds."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from maintd.service.daemon import Daemon
from maintd.service.metrics import Metrics
from maintd.service.records import CheckRecord, RunKind, RunResult, RunStatus
from maintd.service.store import StateStore
from maintd.settings import Settings

N = 10_000
LAYOUT = {"files": 4, "bytes": 4096, "pins": 0, "pinned_bytes": 0, "backlog_files": 0, "backlog_bytes": 0,
          "levels": {"L0": {"files": 3, "bytes": 3000}, "base": {"files": 1, "bytes": 1096}}}


@pytest.fixture(scope="module")
def big_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StateStore]:
    store = StateStore(f"sqlite:///{tmp_path_factory.mktemp('store') / 'maintd.db'}")
    uris = [f"s3://warehouse/db{i % 100}/table_with_a_long_name_{i:05d}" for i in range(N)]
    store.register_tables(uris)
    now = store.db_now()
    store.record_checks("d1", [CheckRecord(u, RunKind.MAINTENANCE, now, 1, 1, True, LAYOUT) for u in uris])
    for i in range(3):  # three failing tables
        run = store.start_run(uris[i * 1000], RunKind.MAINTENANCE)
        store.finish_run(run, RunStatus.FAILED, error="boom", retry_after=now + timedelta(hours=1))
    yield store
    store.close()


def settings(tmp_path: Path, **metrics: int) -> Settings:
    return Settings.model_validate({"state_dir": str(tmp_path), "metrics": metrics})


def series(text: str, name: str) -> list[dict[str, str]]:
    return [s.labels for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]


def test_metrics_of_ten_thousand_tables_hold_the_fleet_and_the_unhealthiest_only(
    tmp_path: Path, big_store: StateStore
) -> None:
    daemon = Daemon(settings(tmp_path, unhealthiest_tables=20), big_store, lambda u: RunResult(),
                    lambda u: RunResult(), holder="d1")
    daemon.publish_tables({t.uri for t in big_store.list_tables()})
    daemon.metrics.observe_check(0.0003, "unchanged")
    body = daemon.metrics.expose()
    assert len(body) < 1_000_000, f"{len(body)} bytes"
    text = body.decode()
    healthy = series(text, "maintd_table_healthy")
    assert len(healthy) == 20, "the table gauges of the 20 unhealthiest only"
    failing = {s["table"] for s in healthy} & {f"s3://warehouse/db0/table_with_a_long_name_{i:05d}"
                                               for i in (0, 1000, 2000)}
    assert len(failing) == 3, "the failing tables are among them"
    assert series(text, "maintd_tables") and {s["state"] for s in series(text, "maintd_tables")} == {
        "healthy", "failing", "disabled"}
    assert series(text, "maintd_checks_total") == [{"outcome": "unchanged"}]
    assert series(text, "maintd_check_duration_seconds_count") == [{}]


def test_every_table_has_its_series_within_the_bound(tmp_path: Path, big_store: StateStore) -> None:
    daemon = Daemon(settings(tmp_path, table_series_max_tables=N), big_store, lambda u: RunResult(),
                    lambda u: RunResult(), holder="d1")
    daemon.publish_tables({t.uri for t in big_store.list_tables()})
    assert len(series(daemon.metrics.expose().decode(), "maintd_table_healthy")) == N


def test_per_table_counters_stop_above_the_bound_and_fleet_counters_go_on() -> None:
    metrics = Metrics()
    metrics.table_series_max_tables = 2
    metrics.set_table_count(2)
    metrics.count_rewritten("/wh/a", 10)
    metrics.set_table_count(3)
    metrics.count_rewritten("/wh/a", 5)
    metrics.count_reclaimed("/wh/a", "data", 2, 20)
    text = metrics.expose().decode()
    assert series(text, "maintd_bytes_rewritten_total") == []
    assert "maintd_fleet_bytes_rewritten_total 15.0" in text
    assert 'maintd_fleet_files_reclaimed_total{reason="data"} 2.0' in text
