"""The daemon checks a table on the check interval it tuned for it (maintd.service.tuning), longer or shorter
than the global one; tables without one are checked at every pass, as ever."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from apscheduler.triggers.interval import IntervalTrigger
from waiting import wait_until

from maintd.service.daemon import PASS_MARGIN, Daemon, due, pass_period
from maintd.service.records import RunKind, RunResult, RunStatus
from maintd.service.store import StateStore
from maintd.settings import Settings

TABLES = ["/wh/slow", "/wh/fast", "/wh/plain"]


def make_settings(tmp_path: Path, *, tuning: bool = True, **scheduler: float) -> Settings:
    return Settings.model_validate({
        "state_dir": str(tmp_path),
        "warehouse": {"tables": TABLES},
        "scheduler": {"maintenance_interval_seconds": 300, "jitter_seconds": 30,
                      "min_maintenance_interval_seconds": 60, **scheduler},
        "tuning": {"enabled": tuning},
    })


@pytest.fixture
def store(tmp_path: Path) -> Iterator[StateStore]:
    opened = StateStore(f"sqlite:///{tmp_path / 'maintd.db'}")
    opened.register_tables(TABLES, source="explicit")
    opened.set_targets({uri: {"merge_delay_minutes": 30.0} for uri in TABLES[:2]})
    yield opened
    opened.close()


def tune(store: StateStore, uri: str, seconds: float) -> None:
    store.record_tuning(uri, overrides={}, interval_seconds=seconds, reason="test", predicted={}, measured={})


class Checks:
    """A check that finds every table unchanged, counting the tables it looked at."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, uri: str) -> bool:
        self.seen.append(uri)
        return False

    def take(self) -> set[str]:
        taken, self.seen = set(self.seen), []
        return taken


def nothing(uri: str) -> RunResult:
    return RunResult(status=RunStatus.SKIPPED)


def daemon_with(settings: Settings, store: StateStore, check: Checks, clock: list[float]) -> Daemon:
    return Daemon(settings, store, nothing, nothing, check=check, holder="d1", clock=lambda: clock[0])


def fires(interval: float, jitter: float, count: int = 3_000) -> list[float]:
    """The seconds at which APScheduler fires a pass run for ``interval`` (its own trigger, its own jitter)."""
    drawn, period = pass_period(interval, jitter)
    trigger = IntervalTrigger(seconds=period, jitter=drawn or None, timezone=UTC)
    start = now = datetime(2026, 1, 1, tzinfo=UTC)
    out, previous = [], None
    for _ in range(count):
        fire = trigger.get_next_fire_time(previous, now)
        assert fire is not None
        out.append((fire - start).total_seconds())
        previous, now = fire, fire
    return out


@pytest.mark.parametrize(("interval", "cadence", "jitter"),
                         [(1200.0, 300.0, 30.0), (300.0, 60.0, 30.0), (3600.0, 60.0, 0.0), (301.0, 300.0, 30.0)])
def test_a_table_with_a_longer_interval_is_checked_within_it_and_not_at_every_pass(
    interval: float, cadence: float, jitter: float
) -> None:
    """Over the fire times APScheduler draws for passes run for ``cadence``, the passes that find the table due
    are at most its interval minus the margin apart (as passes are for the global interval), and about one
    per interval: the table is not checked at every pass."""
    checks, last = [], None
    for at in fires(cadence, jitter):
        if last is None or due(at - last, interval, cadence, jitter):
            checks.append(at)
            last = at
    gaps = [b - a for a, b in itertools.pairwise(checks)]
    assert max(gaps) <= interval * (1 - PASS_MARGIN) + 1e-6
    assert min(gaps) >= interval * (1 - PASS_MARGIN) - 2 * cadence, "skipped while its interval was not over"
    if interval >= 2 * cadence:
        assert len(checks) < len(fires(cadence, jitter)) / 2


def test_a_table_whose_interval_is_the_passes_own_is_checked_at_every_pass() -> None:
    assert all(due(0.0, interval, interval, 30.0) for interval in (60.0, 300.0, 3600.0))
    assert due(0.0, 30.0, 60.0, 30.0), "a shorter interval than the pass's: every pass"


def test_passes_follow_each_tables_tuned_interval_and_plain_tables_their_global_one(
    tmp_path: Path, store: StateStore
) -> None:
    tune(store, "/wh/slow", 1200.0)  # four global intervals
    tune(store, "/wh/fast", 20.0)  # below the floor: honoured as 60 s
    check, clock = Checks(), [1000.0]
    daemon = daemon_with(make_settings(tmp_path), store, check, clock)
    try:
        daemon.run_pass(RunKind.MAINTENANCE)
        assert check.take() == set(TABLES), "the first pass checks every table"
        assert daemon._cadence == 60.0, "passes come as often as the shortest (floored) interval"
        seen: dict[str, list[float]] = {uri: [clock[0]] for uri in TABLES}
        _, period = pass_period(60.0, 30.0)
        for _ in range(60):  # an hour of passes, each a whole period after the one before
            clock[0] += period
            daemon.run_pass(RunKind.MAINTENANCE)
            for uri in check.take():
                seen[uri].append(clock[0])
    finally:
        daemon.stop(grace_seconds=5)
    assert len(seen["/wh/fast"]) == 61, "the 60 s table at every pass"
    for uri, interval in (("/wh/slow", 1200.0), ("/wh/plain", 300.0)):
        gaps = [b - a for a, b in itertools.pairwise(seen[uri])]
        assert max(gaps) <= interval * (1 - PASS_MARGIN), uri
        assert min(gaps) >= interval * (1 - PASS_MARGIN) - 2 * 60.0, f"{uri} is not checked at every pass"
    rows = {r.uri: r for r in store.list_tables()}
    assert rows["/wh/slow"].checks == len(seen["/wh/slow"]), "a pass that skips a table counts no check of it"


def test_without_tuned_intervals_every_pass_checks_every_table(tmp_path: Path, store: StateStore) -> None:
    check, clock = Checks(), [0.0]
    daemon = daemon_with(make_settings(tmp_path), store, check, clock)
    try:
        for _ in range(3):
            clock[0] += 1.0  # passes close together (a pass run at once for tables taken over, say)
            daemon.run_pass(RunKind.MAINTENANCE)
            assert check.take() == set(TABLES)
        assert daemon._cadence == 300.0
    finally:
        daemon.stop(grace_seconds=5)


def test_tuned_intervals_are_ignored_while_tuning_is_off(tmp_path: Path, store: StateStore) -> None:
    tune(store, "/wh/slow", 1200.0)
    tune(store, "/wh/fast", 60.0)
    check, clock = Checks(), [0.0]
    daemon = daemon_with(make_settings(tmp_path, tuning=False), store, check, clock)
    try:
        for _ in range(2):
            clock[0] += 285.0
            daemon.run_pass(RunKind.MAINTENANCE)
            assert check.take() == set(TABLES)
        assert daemon._cadence == 300.0
    finally:
        daemon.stop(grace_seconds=5)


def test_the_maintenance_pass_is_rescheduled_to_the_shortest_interval_and_back(
    tmp_path: Path, store: StateStore
) -> None:
    """The scheduler's own trigger: after a pass that read a 90 s tuned interval it fires every 90 s's period;
    once no table has a shorter interval, every global one's again."""
    tune(store, "/wh/fast", 90.0)
    settings = make_settings(tmp_path)
    daemon = Daemon(settings, store, nothing, nothing, check=Checks(), holder="d1")

    def trigger() -> Any:
        job = daemon._scheduler.get_job("maintenance")
        return None if job is None else job.trigger

    try:
        daemon.start()  # the first pass runs at once
        wait_until(lambda: trigger() is not None and trigger().interval.total_seconds() == pass_period(90.0, 30.0)[1])
        assert trigger().jitter == pass_period(90.0, 30.0)[0]
        store.set_targets({}, ["/wh/fast"])  # the table declares no target any more: its row is forgotten
        daemon.run_pass(RunKind.MAINTENANCE)
        assert trigger().interval.total_seconds() == pass_period(300.0, 30.0)[1]
    finally:
        daemon.stop(grace_seconds=5)
