"""Table gauges have one source of truth, the state store: every replica serves the same values."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from maintd.service.daemon import Daemon
from maintd.service.records import RunKind, RunResult
from maintd.service.store import StateStore
from maintd.settings import Settings

from .conftest import StoreTarget

TABLE = "/wh/orders"


def layout(level1: int) -> dict[str, object]:
    return {"files": level1 + 3, "bytes": 1000, "levels": {"L0": {"files": 3, "bytes": 300},
                                                            "L1": {"files": level1, "bytes": 700}},
            "backlog_files": level1 // 2, "backlog_bytes": 77}


def replica(target: StoreTarget, tmp_path: Path, name: str, level1: int) -> Daemon:
    settings = Settings.model_validate({"state_dir": str(tmp_path), "store": {"url": target.url,
                                                                             "db_schema": target.db_schema}})
    store = StateStore(target.url, db_schema=target.db_schema)
    return Daemon(settings, store, lambda uri: RunResult(layout=layout(level1), metrics={"tasks_planned": 1}),
                  lambda uri: RunResult(), holder=name)


def gauges(daemon: Daemon) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(daemon.metrics.expose().decode()):
        for sample in family.samples:
            if "table" in sample.labels:
                found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_two_replicas_serve_the_layout_of_whichever_maintained_the_table_last(
    store_target: StoreTarget, tmp_path: Path
) -> None:
    first, second = replica(store_target, tmp_path, "replica-0", 95), replica(store_target, tmp_path, "replica-1", 48)
    try:
        first._run_table(TABLE, RunKind.MAINTENANCE)
        assert gauges(first) == gauges(second)
        assert gauges(second)[("maintd_table_files", (("level", "L1"), ("table", TABLE)))] == 95

        second._run_table(TABLE, RunKind.MAINTENANCE)  # the other replica maintains it next
        seen_by_first, seen_by_second = gauges(first), gauges(second)
        assert seen_by_first == seen_by_second, "one source of truth: the same values on every replica"
        assert seen_by_first[("maintd_table_files", (("level", "L1"), ("table", TABLE)))] == 48
        assert seen_by_first[("maintd_backlog_files", (("table", TABLE),))] == 24
        success = seen_by_first[("maintd_last_success_timestamp_seconds", (("kind", "maintenance"), ("table", TABLE)))]
        record = first.store.get_table(TABLE)
        assert record is not None and record.maintenance_succeeded_at is not None
        assert success == record.maintenance_succeeded_at.timestamp()

        first.store.set_enabled(TABLE, False)
        assert not gauges(second), "a disabled table's gauges disappear from every replica"
    finally:
        first.store.close()
        second.store.close()
