"""The daemon loop with fake per-table jobs: no Spark, a real SQLite store, real threads."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from waiting import wait_until

from maintd.service.daemon import Daemon
from maintd.service.records import Decision, RunKind, RunResult, RunStatus
from maintd.service.store import StateStore
from maintd.settings import Settings

TABLES = [f"/wh/t{i}" for i in range(4)]
BUSY_SECONDS = 0.15
"""How long a stand-in run pretends to work where runs must overlap (simulated work, not a wait)."""
LOOK_GAP_SECONDS = 0.02
"""How long a stand-in run pretends to work between its two looks at its lease (simulated work, not a wait)."""


def make_settings(tmp_path: Path, **scheduler: float) -> Settings:
    return Settings.model_validate(
        {
            "state_dir": str(tmp_path),
            "warehouse": {"tables": TABLES},
            "scheduler": {
                "maintenance_interval_seconds": 0.2,
                "reclamation_interval_seconds": 3600,
                "jitter_seconds": 0,
                "max_concurrent_tables": 2,
                "retry_backoff_base_seconds": 30,
                "retry_backoff_max_seconds": 120,
                "shutdown_grace_seconds": 2,
                **scheduler,
            },
            "store": {"lease_duration_seconds": 5, "lease_renew_interval_seconds": 1},
        }
    )


class Recorder:
    """A fake job: counts calls and the peak of concurrent calls."""

    def __init__(self, work: Callable[[str], None] = lambda uri: None) -> None:
        self.work = work
        self.calls: list[str] = []
        self.active = 0
        self.peak = 0
        self.lock = threading.Lock()

    def __call__(self, uri: str) -> RunResult:
        with self.lock:
            self.calls.append(uri)
            self.active += 1
            self.peak = max(self.peak, self.active)
        try:
            self.work(uri)
        finally:
            with self.lock:
                self.active -= 1
        return RunResult(metrics={"files": 1}, decisions=(Decision("p", 0, "compact", "r", f"{uri} ok"),))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[StateStore]:
    opened = StateStore(f"sqlite:///{tmp_path / 'maintd.db'}")
    yield opened
    opened.close()


def test_every_table_is_maintained_and_recorded_with_its_decisions(tmp_path: Path, store: StateStore) -> None:
    maintain = Recorder()
    daemon = Daemon(make_settings(tmp_path), store, maintain, Recorder(), holder="d1")
    daemon.start()
    try:
        wait_until(lambda: set(TABLES) <= set(maintain.calls))
    finally:
        daemon.stop()
    runs = store.history(kind=RunKind.MAINTENANCE)
    assert {r.table_uri for r in runs if r.status == "succeeded"} == set(TABLES)
    assert store.decisions_of(runs[0].id)[0].decision.rule == "r"
    assert store.lease_holders() == {}


def test_no_more_tables_than_the_limit_are_maintained_at_once(tmp_path: Path, store: StateStore) -> None:
    maintain = Recorder(lambda uri: time.sleep(BUSY_SECONDS))
    daemon = Daemon(make_settings(tmp_path), store, maintain, Recorder(), holder="d1")
    daemon.start()
    try:
        wait_until(lambda: len(set(maintain.calls)) == len(TABLES))
    finally:
        daemon.stop()
    assert maintain.peak == 2


def test_a_failing_table_backs_off_and_does_not_stop_the_others(tmp_path: Path, store: StateStore) -> None:
    def work(uri: str) -> None:
        if uri == "/wh/t0":
            raise RuntimeError("disk on fire postgresql://u:hunter2@db/x")

    maintain = Recorder(work)
    daemon = Daemon(make_settings(tmp_path), store, maintain, Recorder(), holder="d1")
    daemon.start()
    try:
        wait_until(lambda: maintain.calls.count("/wh/t1") >= 2)
    finally:
        daemon.stop()
    assert maintain.calls.count("/wh/t0") == 1, "the failing table waits for its backoff"
    table = store.get_table("/wh/t0")
    assert table is not None
    assert (table.failures(RunKind.MAINTENANCE), table.failures(RunKind.RECLAIM)) == (1, 0)
    assert table.retry_after_of(RunKind.MAINTENANCE) is not None
    [failed] = store.history("/wh/t0", kind=RunKind.MAINTENANCE)
    assert failed.status == "failed" and "hunter2" not in (failed.error or "")
    assert b'maintd_run_failures_total{error="RuntimeError",kind="maintenance"} 1.0' in daemon.metrics.expose()


def test_backoff_doubles_up_to_the_maximum(tmp_path: Path, store: StateStore) -> None:
    daemon = Daemon(make_settings(tmp_path), store, Recorder(), Recorder())
    assert [daemon.backoff_seconds(n) for n in (1, 2, 3, 4)] == [30, 60, 120, 120]


def test_stopping_lets_a_run_finish_within_the_grace_period(tmp_path: Path, store: StateStore) -> None:
    maintain = Recorder(lambda uri: daemon.stopping.wait(60))  # in flight until the stop has begun
    daemon = Daemon(make_settings(tmp_path, max_concurrent_tables=1), store, maintain, Recorder(), holder="d1")
    daemon.start()
    wait_until(lambda: maintain.active == 1, "a run in flight")
    daemon.stop(grace_seconds=60)
    assert [r.status for r in store.history(kind=RunKind.MAINTENANCE)] == ["succeeded"]
    assert store.lease_holders() == {}


def test_a_run_past_the_grace_period_is_abandoned_and_its_lease_released(tmp_path: Path, store: StateStore) -> None:
    release = threading.Event()
    maintain = Recorder(lambda uri: release.wait(60))
    daemon = Daemon(make_settings(tmp_path, max_concurrent_tables=1), store, maintain, Recorder(), holder="d1")
    daemon.start()
    wait_until(lambda: maintain.active == 1)
    daemon.stop(grace_seconds=0.1)
    try:
        assert [r.status for r in store.history(kind=RunKind.MAINTENANCE)] == ["abandoned"]
        assert store.lease_holders() == {}
    finally:
        release.set()


def test_tables_leased_by_another_daemon_are_left_alone(tmp_path: Path, store: StateStore) -> None:
    store.acquire_leases("other", ["/wh/t0", "/wh/t1"], 60, limit=2)
    maintain = Recorder()
    daemon = Daemon(make_settings(tmp_path), store, maintain, Recorder(), holder="d1")
    daemon.start()
    try:
        # two passes over every table: t2 and t3 maintained twice, t0 and t1 passed over twice
        wait_until(lambda: all(maintain.calls.count(u) >= 2 for u in ("/wh/t2", "/wh/t3")), "a second pass")
    finally:
        daemon.stop()
    assert not {"/wh/t0", "/wh/t1"} & set(maintain.calls)


def test_a_failed_result_is_recorded_and_backed_off_like_an_exception(tmp_path: Path, store: StateStore) -> None:
    def maintain(uri: str) -> RunResult:
        if uri == "/wh/t0":
            return RunResult(RunStatus.FAILED, metrics={"files": 3}, error="PolicyError: bad", error_type="PolicyError")
        return RunResult()

    daemon = Daemon(make_settings(tmp_path), store, maintain, Recorder(), holder="d1")
    daemon.start()
    try:
        wait_until(lambda: len(store.history("/wh/t1", kind=RunKind.MAINTENANCE)) >= 2)
    finally:
        daemon.stop()
    [failed] = store.history("/wh/t0", kind=RunKind.MAINTENANCE)
    assert (failed.status, failed.error, failed.metrics) == ("failed", "PolicyError: bad", {"files": 3})
    table = store.get_table("/wh/t0")
    assert table is not None and table.consecutive_failures == 1 and table.retry_after is not None
    exposed = daemon.metrics.expose()
    assert b'maintd_run_failures_total{error="PolicyError",kind="maintenance"} 1.0' in exposed
    assert b'maintd_tables{state="failing"} 1.0' in exposed


def test_a_run_ending_after_the_grace_period_stays_abandoned(tmp_path: Path, store: StateStore) -> None:
    release = threading.Event()
    maintain = Recorder(lambda uri: release.wait(60))
    daemon = Daemon(make_settings(tmp_path, max_concurrent_tables=1), store, maintain, Recorder(), holder="d1")
    daemon.start()
    wait_until(lambda: maintain.active == 1)
    daemon.stop(grace_seconds=0.1)
    release.set()
    wait_until(lambda: maintain.active == 0)
    wait_until(lambda: not daemon._snapshot())  # the run's thread has finished recording (or not) its end
    [run] = store.history(kind=RunKind.MAINTENANCE)
    assert (run.status, run.error) == ("abandoned", "the daemon stopped (grace period over)")


def test_a_pass_that_finds_every_slot_busy_runs_its_tables_as_slots_free_up(tmp_path: Path, store: StateStore) -> None:
    maintain, reclaim = Recorder(lambda uri: time.sleep(BUSY_SECONDS)), Recorder()
    settings = make_settings(tmp_path, max_concurrent_tables=1, maintenance_interval_seconds=0.05)
    daemon = Daemon(settings, store, maintain, reclaim, holder="d1")
    daemon.start()
    try:  # the one reclamation pass (interval: an hour) competes with maintenance for the only slot
        wait_until(lambda: set(reclaim.calls) == set(TABLES) and len(maintain.calls) >= len(TABLES))
    finally:
        daemon.stop()
    assert maintain.peak == 1 and len(maintain.calls) >= len(TABLES)


def test_the_reclamation_pass_prunes_runs_older_than_the_history_retention(tmp_path: Path, store: StateStore) -> None:
    now = store.db_now()
    old = store.start_run("/wh/t0", RunKind.MAINTENANCE, now=now - timedelta(days=31))
    store.finish_run(old, "succeeded", now=now - timedelta(days=31))
    recent = store.start_run("/wh/t0", RunKind.MAINTENANCE, now=now - timedelta(days=29))
    store.finish_run(recent, "succeeded", now=now - timedelta(days=29))
    daemon = Daemon(make_settings(tmp_path), store, Recorder(), Recorder(), holder="d1")
    assert daemon.prune_history() == 1
    assert store.get_run(old) is None and store.get_run(recent) is not None


def test_a_failing_maintenance_does_not_hold_back_reclamation_nor_is_cleared_by_it(
    tmp_path: Path, store: StateStore
) -> None:
    def maintain(uri: str) -> RunResult:
        if uri == "/wh/t0":
            return RunResult(RunStatus.FAILED, error="PolicyError: bad", error_type="PolicyError")
        return RunResult()

    reclaim = Recorder()
    settings = make_settings(tmp_path, reclamation_interval_seconds=0.3)
    daemon = Daemon(settings, store, maintain, reclaim, holder="d1")
    daemon.start()
    try:
        wait_until(lambda: reclaim.calls.count("/wh/t0") >= 3)
    finally:
        daemon.stop()
    [failed] = store.history("/wh/t0", kind=RunKind.MAINTENANCE)
    assert failed.status == "failed", "maintenance waits for its backoff although reclamation succeeded meanwhile"
    table = store.get_table("/wh/t0")
    assert table is not None
    assert (table.failures(RunKind.MAINTENANCE), table.failures(RunKind.RECLAIM)) == (1, 0)
    assert b'maintd_tables{state="failing"} 1.0' in daemon.metrics.expose()


def test_a_table_is_never_run_twice_at_once_nor_its_lease_freed_under_a_run(tmp_path: Path, store: StateStore) -> None:
    """Runs end and start in many threads; every run must hold the table's lease from start to end."""
    unheld: list[str] = []

    def work(uri: str) -> None:
        holders = store.lease_holders()
        time.sleep(LOOK_GAP_SECONDS)
        if holders.get(uri) != "d1" or store.lease_holders().get(uri) != "d1":
            unheld.append(uri)

    maintain, reclaim = Recorder(work), Recorder(work)
    settings = make_settings(tmp_path, maintenance_interval_seconds=0.05, reclamation_interval_seconds=0.05,
                             max_concurrent_tables=3)
    daemon = Daemon(settings, store, maintain, reclaim, holder="d1")
    daemon.start()
    try:
        wait_until(lambda: len(maintain.calls) + len(reclaim.calls) >= 80, "80 runs")
    finally:
        daemon.stop()
    assert unheld == []
    by_table: dict[str, list[tuple[object, object]]] = {}
    for run in store.history(limit=10_000):
        by_table.setdefault(run.table_uri, []).append((run.started_at, run.ended_at))
    for uri, spans in by_table.items():
        spans.sort()
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), f"runs of {uri} overlap"


@pytest.mark.parametrize(("interval", "jitter"), [(60.0, 30.0), (300.0, 30.0), (60.0, 0.0), (3600.0, 5.0)])
def test_passes_check_every_table_within_its_interval_though_a_pass_reaches_it_later(
    interval: float, jitter: float
) -> None:
    """The fire times APScheduler draws for the pass (its own interval trigger, its own jitter): two passes are
    at most the interval minus the margin apart, so a table the second pass reaches up to that margin later
    than the first did is still checked within its interval (a 60.5 s gap at 60 s was measured before)."""
    from datetime import UTC, datetime

    from apscheduler.triggers.interval import IntervalTrigger

    from maintd.service.daemon import PASS_MARGIN, pass_period

    drawn_jitter, period = pass_period(interval, jitter)
    trigger = IntervalTrigger(seconds=period, jitter=drawn_jitter or None, timezone=UTC)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    fires, previous = [], None
    for _ in range(2_000):
        fire = trigger.get_next_fire_time(previous, now)
        assert fire is not None
        fires.append(fire)
        previous, now = fire, fire
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(fires)]
    assert max(gaps) <= interval * (1 - PASS_MARGIN) + 1e-6
    assert min(gaps) >= period - drawn_jitter - 1e-6  # and they are not bunched up: about one pass per interval
    assert sum(gaps) / len(gaps) >= interval * 0.75


def test_the_work_view_shows_runs_in_flight_and_the_queue_without_changing_them(
    tmp_path: Path, store: StateStore
) -> None:
    release = threading.Event()
    maintain = Recorder(lambda uri: release.wait(30))
    daemon = Daemon(make_settings(tmp_path, max_concurrent_tables=1, maintenance_interval_seconds=3600), store,
                    maintain, Recorder(), holder="d1")
    daemon.start()
    try:
        def maintenance_queued() -> list[str]:
            return sorted(u for kind, u in daemon.work().queued if kind == "maintenance")

        wait_until(lambda: len(maintain.calls) == 1 and len(maintenance_queued()) == len(TABLES) - 1)
        work = daemon.work()
        [(uri, kind, seconds, _run_id)] = work.running
        assert uri == maintain.calls[0] and kind == "maintenance" and seconds >= 0
        assert maintenance_queued() == sorted(set(TABLES) - {uri})
        assert daemon.work().queued == work.queued  # a read: the queue is the same after it
        work.queued.clear()
        assert len(maintenance_queued()) == len(TABLES) - 1  # a copy: clearing it changes nothing
    finally:
        release.set()
        daemon.stop()


def test_a_daemon_with_nothing_to_maintain_says_what_to_set(tmp_path: Path, store: StateStore) -> None:
    """The packaged config (roots: [], tables: []) and an empty store: the daemon warns at start, naming the
    settings; with a root to search, or a table registered, it does not."""
    from loguru import logger

    from maintd.service.daemon import nothing_to_maintain

    idle = make_settings(tmp_path).model_copy(update={"warehouse": Settings().warehouse})
    seen: list[str] = []
    sink = logger.add(lambda m: seen.append(m.record["message"]), level="WARNING")
    daemon = Daemon(idle, store, Recorder(), Recorder(), holder="d1")
    try:
        daemon.start()
    finally:
        daemon.stop()
        logger.remove(sink)
    said = [m for m in seen if "maintains nothing" in m]
    assert len(said) == 1 and "warehouse.roots and warehouse.tables are empty" in said[0]
    assert "MAINTD_WAREHOUSE__ROOTS" in said[0] and "MAINTD_WAREHOUSE__TABLES" in said[0]
    assert nothing_to_maintain(idle, registered=1) is None
    rooted = idle.model_copy(update={"warehouse": idle.warehouse.model_copy(update={"roots": [str(tmp_path)]})})
    assert nothing_to_maintain(rooted, registered=0) is None
    assert nothing_to_maintain(make_settings(tmp_path), registered=0) is None
