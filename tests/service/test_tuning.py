"""The daemon keeps targets: measured p95s from sampled layouts, gap metrics, re-tunes in bounded steps (with a
fake tuner), records in the store on SQLite and PostgreSQL, failures kept to their table."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from freezegun import freeze_time

from maintd.planner.policy import Policy
from maintd.planner.policy_files import load_policy_file
from maintd.planner.targets import Targets
from maintd.service.daemon import Daemon
from maintd.service.metrics import Metrics
from maintd.service.records import CheckRecord, RunKind, RunResult
from maintd.service.store import StateStore
from maintd.service.tuning import TargetKeeper
from maintd.settings import Settings

T0 = datetime(2026, 6, 1, 0, 0, tzinfo=UTC)
STEP = 900.0


@dataclass(frozen=True)
class FakeResult:
    policy: Policy
    overrides: dict[str, Any]
    interval_seconds: float
    meets: bool = True
    reason: str = "fake: meets every target"
    predicted: dict[str, float] = field(default_factory=lambda: {"merge_delay_minutes": 20.0})


class FakeTuner:
    """Asks for level-1 merges of 8x the current min_files and a 16x shorter interval; records its calls."""

    def __init__(self, fail_for: set[str] | None = None) -> None:
        self.calls: list[str] = []
        self.fail_for = fail_for or set()

    def __call__(self, learned: Any, targets: Targets, current: Policy, *, days: int, interval_seconds: float,
                 now_ms: int, time_budget_s: float, schedule: Any = None) -> FakeResult:
        self.calls.append(learned.uri)
        if learned.uri in self.fail_for:
            raise RuntimeError("search blew up")
        wanted = {"clustering": {"level1": {"min_files": current.clustering.level1.min_files * 8}}}
        return FakeResult(current, wanted, interval_seconds / 16)


def fake_table(uri: str, properties: dict[str, str]) -> SimpleNamespace:
    metadata = SimpleNamespace(name=uri.rsplit("/", 1)[-1], properties=properties)
    return SimpleNamespace(uri=uri, snapshot=lambda: SimpleNamespace(metadata=metadata))


def fake_learned(table: Any, hours: float) -> SimpleNamespace:
    """Writers wrote 100 bytes; maintenance wrote 150 (+ 10 of prior rows): a write amplification of 1.6."""
    merges = [SimpleNamespace(outputs=[SimpleNamespace(bytes=150)], prior_bytes=10)]
    return SimpleNamespace(uri=table.uri, pattern=SimpleNamespace(commits=[SimpleNamespace(bytes=100)],
                                                                  merges=merges))


TABLES = {
    "/wh/kept": {"maintd.target.merge_delay_minutes": "30"},
    "/wh/plain": {},
    "/wh/broken": {"maintd.target.read_files_per_bucket": "4"},
}


def keeper(store: StateStore, tuner: FakeTuner, **tuning: Any) -> TargetKeeper:
    settings = Settings(tuning={"measure_interval_seconds": STEP, **tuning})
    return TargetKeeper(settings, store, load_policy_file(None), tuner=tuner, learner=fake_learned,
                        open_table=lambda uri: fake_table(uri, TABLES[uri]))


def declared() -> dict[str, Targets]:
    return {uri: load_policy_file(None).resolve(uri=uri, properties=props).policy.target
            for uri, props in TABLES.items()}


def layout(read_amplification: int, oldest_l0_ms: float | None) -> dict[str, Any]:
    return {"files": read_amplification, "read_amplification": read_amplification, "oldest_l0_ms": oldest_l0_ms}


def test_measured_figures_are_p95s_over_the_window_of_regular_samples(store: StateStore) -> None:
    uri = "/wh/kept"
    store.register_table(uri, now=T0)
    store.set_targets({uri: {"merge_delay_minutes": 30.0, "read_files_per_bucket": 10.0}})
    keep = keeper(store, FakeTuner())
    oldest_ms = T0.timestamp() * 1000
    reads = [1, 3, 2, 8, 4, 20, 5, 6, 2, 3, 4, 12, 7, 2, 3, 5, 6, 9, 1, 2]
    with freeze_time(T0) as clock:
        for i, value in enumerate(reads):
            now = datetime.now(UTC)
            store.record_checks("r", [CheckRecord(uri, RunKind.MAINTENANCE, now, 1, 1, True, layout(value, oldest_ms))])
            measured = keep.measure([uri], now=now)
            if i < len(reads) - 1:
                clock.tick(timedelta(seconds=STEP))
    ordered = sorted(reads)
    rank = math.ceil(0.95 * len(reads)) - 1
    ages = sorted(i * STEP / 60 for i in range(len(reads)))
    assert measured[uri] == {"read_files_per_bucket": ordered[rank], "merge_delay_minutes": ages[rank]}
    record = store.tuning_records()[uri]
    assert record.measured == measured[uri]
    assert record.gaps == {"read_files_per_bucket": ordered[rank] / 10 - 1, "merge_delay_minutes": ages[rank] / 30 - 1}
    assert record.missed == ["merge_delay_minutes", "read_files_per_bucket"]


def test_samples_older_than_the_window_are_dropped_and_a_table_without_level_0_waits_zero(store: StateStore) -> None:
    uri = "/wh/kept"
    store.register_table(uri, now=T0)
    store.set_targets({uri: {"merge_delay_minutes": 30.0}})
    keep = keeper(store, FakeTuner(), window_hours=1.0)
    store.record_checks("r", [CheckRecord(uri, RunKind.MAINTENANCE, T0, 1, 1, True, layout(50, None))])
    keep.measure([uri], now=T0)
    store.record_checks("r", [CheckRecord(uri, RunKind.MAINTENANCE, T0, 1, 1, True, layout(2, None))])
    later = T0 + timedelta(hours=2)
    assert keep.measure([uri], now=later)[uri] == {"read_files_per_bucket": 2.0, "merge_delay_minutes": 0.0}
    assert [s[0] for s in store.layout_samples([uri], T0 - timedelta(days=1))[uri]] == [later]


def test_the_gap_gauges_carry_table_and_target_and_the_fleet_counts_every_target(store: StateStore) -> None:
    store.register_table("/wh/kept", now=T0)
    store.register_table("/wh/plain", now=T0)
    store.set_targets({"/wh/kept": {"merge_delay_minutes": 30.0, "write_amplification": 3.0}})
    store.record_measured({"/wh/kept": ({"merge_delay_minutes": 45.0, "write_amplification": 1.5},
                                        {"merge_delay_minutes": 0.5, "write_amplification": -0.5})}, now=T0)
    metrics = Metrics()
    metrics.attach_store(store)
    text = _scrape(metrics)
    assert 'maintd_table_target{table="/wh/kept",target="merge_delay_minutes"} 30.0' in text
    assert 'maintd_table_target_measured{table="/wh/kept",target="merge_delay_minutes"} 45.0' in text
    assert 'maintd_table_target_gap_ratio{table="/wh/kept",target="merge_delay_minutes"} 0.5' in text
    assert 'maintd_table_target_gap_ratio{table="/wh/kept",target="write_amplification"} -0.5' in text
    assert 'maintd_tables_missing_target{target="merge_delay_minutes"} 1.0' in text
    assert 'maintd_tables_missing_target{target="write_amplification"} 0.0' in text
    assert 'maintd_tables_missing_target{target="read_files_per_bucket"} 0.0' in text
    assert 'table="/wh/plain",target=' not in text


def _scrape(metrics: Metrics) -> str:
    from prometheus_client.exposition import generate_latest

    return generate_latest(metrics.registry).decode()


def test_only_tables_that_declare_targets_are_re_tuned_in_bounded_steps(store: StateStore) -> None:
    for uri in TABLES:
        store.register_table(uri, now=T0)
    tuner = FakeTuner()
    keep = keeper(store, tuner, max_step=2.0)
    keep.store.db_now = lambda: T0  # type: ignore[method-assign]
    assert keep.keep(list(TABLES), declared()) == 2
    assert sorted(tuner.calls) == ["/wh/broken", "/wh/kept"]
    records = store.tuning_records()
    assert set(records) == {"/wh/broken", "/wh/kept"}
    base = load_policy_file(None).default
    kept = records["/wh/kept"]
    assert kept.overrides == {"clustering": {"level1": {"min_files": base.clustering.level1.min_files * 2}}}
    interval = Settings().scheduler.maintenance_interval_seconds
    assert kept.interval_seconds == interval / 2
    assert kept.tuned_at == T0 and "at most 2x per re-tune" in (kept.reason or "")
    assert kept.tuned_measured == {"write_amplification": 1.6} and kept.predicted == {"merge_delay_minutes": 20.0}
    assert kept.targets == {"merge_delay_minutes": 30.0}
    # not due again before tuning.interval_hours; due after it, one more bounded step
    assert keep.retune_due(list(TABLES), now=T0 + timedelta(hours=1)) == 0
    assert keep.retune_due(["/wh/kept"], now=T0 + timedelta(hours=7)) == 1
    again = store.tuning_records(["/wh/kept"])["/wh/kept"]
    assert again.overrides == {"clustering": {"level1": {"min_files": base.clustering.level1.min_files * 4}}}
    assert again.interval_seconds == interval / 4


def test_a_table_that_stops_declaring_targets_is_forgotten(store: StateStore) -> None:
    store.register_table("/wh/kept", now=T0)
    store.set_targets({"/wh/kept": {"merge_delay_minutes": 30.0}})
    store.set_targets({}, ["/wh/kept"])
    assert store.tuning_records() == {}


def test_a_failing_tuner_is_recorded_for_its_table_and_the_others_are_still_re_tuned(store: StateStore) -> None:
    for uri in TABLES:
        store.register_table(uri, now=T0)
    keep = keeper(store, FakeTuner(fail_for={"/wh/broken"}))
    keep.store.db_now = lambda: T0  # type: ignore[method-assign]
    assert keep.keep(list(TABLES), declared()) == 1
    records = store.tuning_records()
    assert records["/wh/broken"].error == "RuntimeError: search blew up"
    assert records["/wh/broken"].error_at == T0 and records["/wh/broken"].overrides is None
    assert records["/wh/kept"].error is None and records["/wh/kept"].overrides
    # the failed table waits out the interval like a re-tuned one
    assert keep.retune_due(list(TABLES), now=T0 + timedelta(minutes=30)) == 0


def test_knobs_an_operator_set_as_table_properties_are_never_tuned(store: StateStore) -> None:
    TABLES["/wh/pinned"] = {"maintd.target.merge_delay_minutes": "30", "maintd.clustering.level1.min_files": "3"}
    try:
        store.register_table("/wh/pinned", now=T0)
        store.set_targets({"/wh/pinned": {"merge_delay_minutes": 30.0}})
        keep = keeper(store, FakeTuner())
        assert keep.retune_due(["/wh/pinned"], now=T0) == 1
        assert store.tuning_records()["/wh/pinned"].overrides == {}
    finally:
        del TABLES["/wh/pinned"]


def test_the_tuning_record_round_trips_on_each_backend(store: StateStore) -> None:
    store.set_targets({"/wh/a": {"read_files_per_bucket": 6.0, "write_amplification": 3.0}})
    store.record_tuning("/wh/a", overrides={"compaction": {"max_delta_files": 12}}, interval_seconds=120.0,
                        reason="meets every target", predicted={"read_files_per_bucket": 5.5},
                        measured={"write_amplification": 2.0}, now=T0)
    store.record_measured({"/wh/a": ({"read_files_per_bucket": 9.0}, {"read_files_per_bucket": 0.5})}, now=T0)
    store.record_tuning_error("/wh/a", "TuningError: no tuner", now=T0 + timedelta(hours=6))
    record = store.tuning_records()["/wh/a"]
    assert record.targets == {"read_files_per_bucket": 6.0, "write_amplification": 3.0}
    assert record.overrides == {"compaction": {"max_delta_files": 12}} == store.tuned_overrides("/wh/a")
    assert (record.tuned_at, record.interval_seconds, record.reason) == (T0, 120.0, "meets every target")
    assert record.predicted == {"read_files_per_bucket": 5.5} and record.tuned_measured == {"write_amplification": 2.0}
    assert record.measured == {"read_files_per_bucket": 9.0} and record.gaps == {"read_files_per_bucket": 0.5}
    assert record.error == "TuningError: no tuner" and record.error_at == T0 + timedelta(hours=6)
    assert store.missing_target_counts() == {"read_files_per_bucket": 1, "merge_delay_minutes": 0,
                                             "write_amplification": 0}


def _nothing(uri: str) -> RunResult:
    return RunResult()


@pytest.mark.parametrize("enabled", [True, False])
def test_the_daemon_keeps_the_targets_of_the_tables_it_owns_unless_tuning_is_off(
    store: StateStore, enabled: bool
) -> None:
    seen: list[list[str]] = []
    settings = Settings(tuning={"enabled": enabled}, warehouse={"tables": ["/wh/a", "/wh/b"]})
    daemon = Daemon(settings, store, _nothing, _nothing, keep=seen.append, holder="h")
    daemon.register_candidates()
    daemon._known = ["/wh/a", "/wh/b"]
    daemon.membership.renew()
    daemon.keep_targets()
    assert seen == ([["/wh/a", "/wh/b"]] if enabled else [])


def test_a_failing_keep_pass_is_logged_and_does_not_stop_the_daemon(store: StateStore) -> None:
    def broken(owned: list[str]) -> None:
        raise RuntimeError("store gone")

    daemon = Daemon(Settings(), store, _nothing, _nothing, keep=broken, holder="h")
    daemon.keep_targets()  # does not raise
