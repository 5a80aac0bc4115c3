"""The daemon's budget: settings, /metrics, the health score, and tables served unhealthiest first while it binds."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from waiting import wait_until

from maintd.errors import ConfigError
from maintd.execution.budget import Budget, Cost
from maintd.planner.health import distance_from_targets
from maintd.service.budget import budget_of, release, unhealthiest_first
from maintd.service.daemon import Daemon
from maintd.service.metrics import Metrics
from maintd.service.records import CheckRecord, RunKind
from maintd.service.store import StateStore
from maintd.settings import Settings, load_settings
from maintd.storage.requests import install_request_gate

from .conftest import StoreTarget
from .test_daemon import TABLES, Recorder, make_settings

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _load(tmp_path: Path, text: str) -> Settings:
    path = tmp_path / "maintd.yaml"
    path.write_text(text)
    return load_settings(path)


def test_no_budget_is_the_default_and_sizes_read_like_policies(tmp_path: Path) -> None:
    assert Settings().budget.limits() == {}
    s = _load(tmp_path, "budget:\n  read_bytes_per_second: 50 MiB\n  read_burst_bytes: 200 MiB\n"
                        "  requests_per_second: 0.5\n")
    assert s.budget.limits() == {"read_bytes": (50 * 2**20, 200 * 2**20), "requests": (0.5, 1.0)}


@pytest.mark.parametrize(("text", "named"), [
    ("budget:\n  read_bytes_per_second: fast\n", "budget.read_bytes_per_second = 'fast'"),
    ("budget:\n  write_bytes_per_second: -5 MiB\n", "budget.write_bytes_per_second"),
    ("budget:\n  requests_per_second: 0\n", "budget.requests_per_second = 0"),
    ("budget:\n  write_burst_bytes: 1 GiB\n", "a burst needs a rate; set budget.write_bytes_per_second"),
    ("budget:\n  read_bytes_per_sec: 1 MiB\n", "budget.read_bytes_per_sec"),
])
def test_a_bad_budget_setting_fails_naming_the_key_and_what_to_do(tmp_path: Path, text: str, named: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, text)
    assert named in str(caught.value)


def test_the_budget_series_are_exported() -> None:
    budget = Budget({"read_bytes": (100.0, 200.0), "requests": (5.0, 5.0)})
    budget.try_admit(budget.ticket(Cost(read_bytes=150, requests=2)))
    metrics = Metrics()
    metrics.attach_budget(budget)
    text = metrics.expose().decode()
    assert 'maintd_budget_limit_per_second{kind="read_bytes"} 100.0' in text
    assert 'maintd_budget_burst{kind="requests"} 5.0' in text
    assert 'maintd_budget_admitted_total{kind="read_bytes"} 150.0' in text
    assert 'maintd_budget_admitted_total{kind="write_bytes"} 0.0' in text
    assert 'maintd_budget_waits_total{kind="read_bytes"} 0.0' in text
    assert 'maintd_budget_throttled_seconds_total{kind="requests"} 0.0' in text
    tokens = next(line for line in text.splitlines() if line.startswith('maintd_budget_tokens{kind="read_bytes"}'))
    assert 50.0 <= float(tokens.split()[-1]) <= 200.0
    assert "maintd_budget_binding 0.0" in text


def test_the_request_gate_is_installed_only_with_a_request_limit_and_released_at_the_end() -> None:
    limited = Settings.model_validate({"budget": {"requests_per_second": 10}})
    budget = budget_of(limited)
    try:
        assert budget is not None
        assert install_request_gate(budget) is budget  # it was installed
    finally:
        release(budget)
    assert install_request_gate(None) is None
    assert budget_of(Settings()) is None


def test_the_health_score_is_the_largest_ratio_to_a_target() -> None:
    hour_ago = (NOW - timedelta(hours=3)).timestamp() * 1000
    layout = {"read_amplification": 4, "oldest_l0_ms": hour_ago, "backlog_bytes": 2 << 30}
    assert distance_from_targets(layout, None, NOW) == pytest.approx(3.0)  # 3 h against the default 1 h
    assert distance_from_targets(layout, {"l0_age_seconds": 6 * 3600}, NOW) == pytest.approx(2.0)  # backlog 2 GiB
    assert distance_from_targets({}, None, NOW) == 0.0
    assert distance_from_targets({"read_amplification": None}, None, NOW) == 0.0


def test_a_tables_declared_targets_replace_the_default_score() -> None:
    from maintd.planner.targets import Targets

    layout = {"read_amplification": 12, "oldest_l0_ms": (NOW - timedelta(minutes=30)).timestamp() * 1000}
    assert distance_from_targets(layout, None, NOW) == pytest.approx(1.5)  # 12 files against the default 8
    assert distance_from_targets(layout, Targets(read_files_per_bucket=24), NOW) == pytest.approx(0.5)
    assert distance_from_targets(layout, Targets(merge_delay_minutes=10), NOW) == pytest.approx(3.0)  # 30 of 10 min
    assert distance_from_targets(layout, Targets(), NOW) == pytest.approx(1.5)  # none declared: the defaults
    # the same two tables, in another order once one declares a tighter target
    entries = [("m", "/t/fresh"), ("m", "/t/reads")]
    layouts = {"/t/fresh": {"oldest_l0_ms": layout["oldest_l0_ms"]}, "/t/reads": {"read_amplification": 12}}
    assert unhealthiest_first(entries, layouts, NOW) == [("m", "/t/reads"), ("m", "/t/fresh")]
    tight = {"/t/fresh": Targets(merge_delay_minutes=5)}
    assert unhealthiest_first(entries, layouts, NOW, tight) == [("m", "/t/fresh"), ("m", "/t/reads")]


def test_ties_keep_the_queue_order() -> None:
    entries = [("a", "/t/1"), ("b", "/t/2"), ("c", "/t/3")]
    layouts = {"/t/2": {"read_amplification": 80}}
    assert unhealthiest_first(entries, layouts, NOW) == [("b", "/t/2"), ("a", "/t/1"), ("c", "/t/3")]


def _record_layouts(store: StateStore) -> list[str]:
    """Layouts whose health orders the tables t2, t0, t3, t1 (neither the queue's order nor its reverse)."""
    amplification = {TABLES[0]: 20, TABLES[1]: 1, TABLES[2]: 90, TABLES[3]: 9}
    store.register_tables(TABLES, source="explicit")
    store.record_checks("test", [CheckRecord(uri, RunKind.MAINTENANCE, datetime.now(UTC), 1, 1, False,
                                             layout={"read_amplification": amp, "backlog_bytes": 0})
                                 for uri, amp in amplification.items()])
    return sorted(TABLES, key=lambda uri: -amplification[uri])


def test_the_store_reads_the_health_of_the_queued_tables(store_target: StoreTarget) -> None:
    store = store_target.open()
    try:
        _record_layouts(store)
        measures = store.health_measures([TABLES[2], TABLES[1], "/wh/unknown"])
        assert measures == {TABLES[1]: {"read_amplification": 1.0, "oldest_l0_ms": None, "backlog_bytes": 0.0},
                            TABLES[2]: {"read_amplification": 90.0, "oldest_l0_ms": None, "backlog_bytes": 0.0}}
        assert store.health_measures([]) == {}
    finally:
        store.close()


@pytest.mark.parametrize("binding", [True, False])
def test_tables_are_served_unhealthiest_first_while_the_budget_binds(tmp_path: Path, binding: bool) -> None:
    store = StateStore(f"sqlite:///{tmp_path / 'maintd.db'}")
    expected = _record_layouts(store)
    budget = Budget({"read_bytes": (1.0, 1.0)})
    if binding:
        budget.ticket(Cost(read_bytes=10))  # a pack waits in line: the budget binds
    maintain = Recorder()
    daemon = Daemon(make_settings(tmp_path, max_concurrent_tables=1, maintenance_interval_seconds=3600), store,
                    maintain, Recorder(), holder="d1", budget=budget)
    daemon.start()
    try:
        wait_until(lambda: len(maintain.calls) == len(TABLES))
    finally:
        daemon.stop()
        store.close()
    assert maintain.calls == (expected if binding else sorted(TABLES))
