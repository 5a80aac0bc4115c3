"""What tables cost their readers, in /metrics: read amplification, the oldest level-0 file's age, history bytes
and bytes held by pins; per table within the per-table bounds, and as fleet-wide histograms always."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from maintd import Table
from maintd.service.metrics import Metrics
from maintd.service.records import CheckRecord, RunKind
from maintd.service.store import StateStore
from maintd.settings import MetricsSettings

from .conftest import StoreTarget
from .warehouse import Model, create, write


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(metrics.expose().decode()):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_a_real_tables_layout_gives_its_read_amplification_level0_age_history_and_pinned_bytes(
    tmp_path: Path,
) -> None:
    from maintd.execution.runner import TableRunSummary
    from maintd.service.jobs import TableJobs
    from maintd.settings import Settings

    table = create(tmp_path / "wh" / "events", buckets=3)
    write(table, Model(), commits=5, seed=4)  # five level-0 files in every bucket the batches touch
    table.pin(table.version, timedelta(hours=2), reason="a report")
    write(table, Model(), commits=1, seed=5)
    snapshot = Table.open(table.uri).snapshot()
    per_bucket = [len(files) for files in snapshot.by_bucket().values()]
    oldest = min(f.min_commit_time for f in snapshot.files.values() if f.level == 0)

    store = StateStore(f"sqlite:///{tmp_path / 'maintd.db'}")
    settings = Settings.model_validate({"state_dir": str(tmp_path / "state"), "warehouse": {"roots": []}})
    layout = TableJobs(settings, store, Metrics())._read_layout(  # what a maintenance run stores
        table.uri, TableRunSummary(uri=table.uri), datetime.now(UTC))
    assert layout is not None
    assert layout["read_amplification"] == max(per_bucket) and layout["oldest_l0_ms"] == oldest
    assert layout["mean_files_per_bucket"] == pytest.approx(sum(per_bucket) / len(per_bucket), abs=1e-3)
    store.register_table(table.uri)
    store.record_checks("r", [CheckRecord(table.uri, RunKind.MAINTENANCE, store.db_now(), 1, 1, True, layout)])
    metrics = Metrics()
    metrics.attach_store(store)
    before = time.time()
    found = samples(metrics)
    key = (("table", table.uri),)
    assert found[("maintd_table_read_amplification", key)] == max(per_bucket)
    age = found[("maintd_table_oldest_l0_age_seconds", key)]
    assert before - oldest / 1000 - 1 <= age <= time.time() - oldest / 1000 + 1
    assert found[("maintd_table_history_bytes", key)] == layout["history_bytes"] == 0  # nothing removed yet
    assert found[("maintd_table_pinned_bytes", key)] == layout["pinned_bytes"]
    assert found[("maintd_fleet_read_amplification_gcount", ())] == 1
    assert found[("maintd_fleet_read_amplification_gsum", ())] == max(per_bucket)
    store.close()


def fleet_layout(i: int, now_ms: int) -> dict[str, object]:
    return {"files": i + 1, "bytes": 10, "levels": {"L0": {"files": i + 1, "bytes": 10}},
            "read_amplification": i + 1, "oldest_l0_ms": now_ms - i * 600_000 + 30_000, "history_bytes": i * 2**20,
            "pins": 1, "pinned_bytes": i * 2**21, "backlog_files": 0, "backlog_bytes": 0}


def test_fleet_histograms_count_every_enabled_table_whatever_the_per_table_bound(store_target: StoreTarget) -> None:
    store = store_target.open()
    try:
        uris = [f"s3://wh/t{i:02d}" for i in range(12)]
        store.register_tables(uris)
        now_ms = int(time.time() * 1000)
        checks = [CheckRecord(u, RunKind.MAINTENANCE, store.db_now(), 1, 1, True, fleet_layout(i, now_ms))
                  for i, u in enumerate(uris)]
        store.record_checks("r", checks)
        store.set_enabled(uris[-1], False)  # a disabled table is in no histogram
        metrics = Metrics()
        metrics.attach_store(store, MetricsSettings(table_series_max_tables=5, unhealthiest_tables=0))
        found = samples(metrics)
        assert not [k for k in found if k[0] == "maintd_table_read_amplification"]  # above the bound: none
        bucket = "maintd_fleet_read_amplification_bucket"
        assert found[(bucket, (("le", "1.0"),))] == 1 and found[(bucket, (("le", "4.0"),))] == 4
        assert found[(bucket, (("le", "16.0"),))] == found[(bucket, (("le", "+Inf"),))] == 11
        assert found[("maintd_fleet_read_amplification_gsum", ())] == sum(range(1, 12))
        ages = "maintd_fleet_oldest_l0_age_seconds_bucket"
        assert found[(ages, (("le", "300.0"),))] == 1 and found[(ages, (("le", "3600.0"),))] == 7  # 0..60 min
        assert found[("maintd_fleet_history_bytes_bucket", (("le", "0.0"),))] == 1
        assert found[("maintd_fleet_history_bytes_bucket", (("le", "1048576.0"),))] == 2
        assert found[("maintd_fleet_pinned_bytes_gsum", ())] == sum(i * 2**21 for i in range(11))
    finally:
        store.close()
