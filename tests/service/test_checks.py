"""Checks: an unchanged table costs one look at its log and writes no run; a changed table, or a time trigger
come due, is planned; checks are counted on the table's row in place; no INFO line per empty check."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from loguru import logger
from waiting import wait_until

from maintd import Table
from maintd.errors import PolicyError
from maintd.service.checks import CHANGED, DUE, UNKNOWN, LogWatch
from maintd.service.daemon import Daemon
from maintd.service.jobs import TableJobs
from maintd.service.metrics import Metrics
from maintd.service.records import RunKind
from maintd.service.store import StateStore
from maintd.settings import Settings
from maintd.storage import Storage, storage_for_uri

from .warehouse import Model, batch, create, write


class Counting:
    """A storage that counts the calls made through it (``exists``, ``list_first``, ``list_dir``, ``read``)."""

    def __init__(self, inner: Storage, *, lists_in_order: bool | None = None) -> None:
        self.inner = inner
        self.calls: list[str] = []
        self.lists_in_order = inner.lists_in_order if lists_in_order is None else lists_in_order

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if callable(attr):
            def counted(*args: Any, **kwargs: Any) -> Any:
                self.calls.append(name)
                return attr(*args, **kwargs)
            return counted
        return attr


@pytest.fixture
def store(tmp_path: Path) -> Iterator[StateStore]:
    opened = StateStore(f"sqlite:///{tmp_path / 'maintd.db'}")
    yield opened
    opened.close()


def test_a_check_of_an_unchanged_local_table_is_one_stat(tmp_path: Path) -> None:
    table = create(tmp_path / "t")
    write(table, Model(), commits=2, seed=1)
    counting = Counting(storage_for_uri(table.uri))
    watch = LogWatch()
    assert watch.needs_plan(table.uri, datetime.now(UTC)) == UNKNOWN
    watch.remember(table.uri, table.version, None, counting)  # type: ignore[arg-type]
    for _ in range(3):
        assert watch.needs_plan(table.uri, datetime.now(UTC)) is None
    assert counting.calls == ["exists"] * 3, "one stat per check, nothing else"
    write(table, Model(), commits=1, seed=2)
    assert watch.needs_plan(table.uri, datetime.now(UTC)) == CHANGED


def test_a_check_on_an_object_store_is_one_list_request(s3_server: Any, s3_root: str) -> None:
    uri = f"{s3_root}/wh/orders"
    table = Table.create(uri, "id:int64!,name:string,amount:float64", primary_key="id", buckets=2)
    table.write_changes(batch(np.random.default_rng(1)), "op")
    watch = LogWatch()
    watch.remember(uri, table.version, None)
    bucket = s3_root.removeprefix("s3://")
    before = len(s3_server.requests(bucket))
    assert watch.needs_plan(uri, datetime.now(UTC)) is None
    made = s3_server.requests(bucket)[before:]
    assert len(made) == 1 and made[0].startswith("GET ") and "list-type=2" in made[0], made
    table.write_changes(batch(np.random.default_rng(2)), "op")
    assert watch.needs_plan(uri, datetime.now(UTC)) == CHANGED


def test_a_time_trigger_come_due_needs_a_plan_without_looking_at_the_log(tmp_path: Path) -> None:
    table = create(tmp_path / "t")
    write(table, Model(), commits=1, seed=1)
    counting = Counting(storage_for_uri(table.uri))
    now = datetime.now(UTC)
    watch = LogWatch()
    watch.remember(table.uri, table.version, now + timedelta(hours=1), counting)  # type: ignore[arg-type]
    assert watch.needs_plan(table.uri, now + timedelta(minutes=59)) is None
    assert watch.needs_plan(table.uri, now + timedelta(hours=1)) == DUE
    assert counting.calls == ["exists"]


def test_a_look_that_fails_plans_the_table(tmp_path: Path) -> None:
    class Broken(Counting):
        def __getattr__(self, name: str) -> Any:
            raise OSError("the disk is gone")

    watch = LogWatch()
    watch.remember(str(tmp_path / "t"), 3, None, Broken(storage_for_uri(str(tmp_path))))  # type: ignore[arg-type]
    assert watch.needs_plan(str(tmp_path / "t"), datetime.now(UTC)) == CHANGED


def settings_for(tmp_path: Path, roots: list[str], **scheduler: float) -> Settings:
    return Settings.model_validate({
        "state_dir": str(tmp_path / "state"),
        "warehouse": {"roots": roots},
        "scheduler": {"maintenance_interval_seconds": 3600, "reclamation_interval_seconds": 3600,
                      "jitter_seconds": 0, "max_concurrent_tables": 2, **scheduler},
    })


class Planned:
    """Counts the plans TableJobs makes, per table (the planner is what a check must not run)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import maintd.planner

        self.tables: list[str] = []
        real = maintd.planner.plan

        def plan(snapshot: Any, policy: Any, now: datetime, table_uri: str = "", **kw: Any) -> Any:
            self.tables.append(table_uri)
            return real(snapshot, policy, now, table_uri, **kw)

        monkeypatch.setattr(maintd.planner, "plan", plan)


def idle(daemon: Daemon) -> Callable[[], bool]:
    return lambda: not daemon._snapshot() and not daemon._queue


def test_unchanged_tables_are_not_planned_again_and_write_no_run(
    tmp_path: Path, store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    tables = [create(tmp_path / "wh" / f"t{i}") for i in range(3)]
    for i, table in enumerate(tables):
        write(table, Model(), commits=1, seed=i)
    planned = Planned(monkeypatch)
    clock = [datetime.now(UTC)]
    settings = settings_for(tmp_path, [str(tmp_path / "wh")])
    jobs = TableJobs(settings, store, Metrics(), clock=lambda: clock[0])
    daemon = Daemon(settings, store, jobs.maintain, jobs.reclaim, discover=jobs.discover, metrics=jobs.metrics,
                    check=jobs.check, holder="d1")
    try:
        daemon.run_pass(RunKind.MAINTENANCE)  # first pass: every table planned once, found nothing
        wait_until(idle(daemon))
        assert sorted(planned.tables) == sorted(t.uri for t in tables)
        for _ in range(3):
            daemon.run_pass(RunKind.MAINTENANCE)
            wait_until(idle(daemon))
        assert len(planned.tables) == 3, "unchanged tables are not planned again"
        write(tables[0], Model(), commits=1, seed=9)  # a writer commits: that table is planned at its next check
        daemon.run_pass(RunKind.MAINTENANCE)
        wait_until(idle(daemon))
        assert planned.tables[3:] == [tables[0].uri]
        clock[0] += timedelta(hours=25)  # compaction's max_interval_hours (24 h) comes due for every table
        daemon.run_pass(RunKind.MAINTENANCE)
        wait_until(idle(daemon))
        assert set(planned.tables[4:]) == {t.uri for t in tables}, "and each ran its compaction"
    finally:
        daemon.stop(grace_seconds=60)
    rows = {r.uri: r for r in store.list_tables()}
    assert all(r.checks == 6 and r.checked_by == "d1" and r.checked_at is not None for r in rows.values())
    assert rows[tables[0].uri].checks_planned == 3 and rows[tables[1].uri].checks_planned == 2
    assert [r for r in store.history(limit=1000) if r.kind == "maintenance" and r.status == "skipped"] == []
    assert all(r.last_status in ("skipped", "succeeded") and r.maintenance_succeeded_at for r in rows.values())


def test_a_pass_over_unchanged_tables_logs_one_info_line(
    tmp_path: Path, store: StateStore
) -> None:
    tables = [create(tmp_path / "wh" / f"t{i}") for i in range(4)]
    for i, table in enumerate(tables):
        write(table, Model(), commits=1, seed=i)
    settings = settings_for(tmp_path, [str(tmp_path / "wh")])
    jobs = TableJobs(settings, store, Metrics())
    daemon = Daemon(settings, store, jobs.maintain, jobs.reclaim, discover=jobs.discover, metrics=jobs.metrics,
                    check=jobs.check, holder="d1")
    lines: list[str] = []
    lock = threading.Lock()

    def sink(message: Any) -> None:
        with lock:
            lines.append(message.record["message"])

    try:
        daemon.run_pass(RunKind.MAINTENANCE)
        daemon.run_pass(RunKind.RECLAIM)
        wait_until(idle(daemon))
        handler = logger.add(sink, level="INFO")
        try:
            for kind in (RunKind.MAINTENANCE, RunKind.RECLAIM):  # nothing to do anywhere, nor to reclaim
                daemon.run_pass(kind)
                wait_until(idle(daemon))
        finally:
            logger.remove(handler)
    finally:
        daemon.stop(grace_seconds=60)
    assert len(lines) == 2, lines
    assert lines[0].startswith("maintenance pass: 4 of 4 table(s)") and "4 unchanged" in lines[0]
    assert lines[1].startswith("reclaim pass: 4 of 4 table(s)")
    assert store.history(limit=100) == [], "neither empty checks nor empty reclamations are runs"


def test_a_table_that_failed_is_planned_at_its_next_check_even_unchanged(
    tmp_path: Path, store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = create(tmp_path / "wh" / "t0")
    write(table, Model(), commits=1, seed=1)
    settings = settings_for(tmp_path, [str(tmp_path / "wh")], retry_backoff_base_seconds=1,
                            retry_backoff_max_seconds=1)
    jobs = TableJobs(settings, store, Metrics())
    daemon = Daemon(settings, store, jobs.maintain, jobs.reclaim, discover=jobs.discover, metrics=jobs.metrics,
                    check=jobs.check, holder="d1")
    import maintd.planner

    real = maintd.planner.plan
    failing = [True]

    def plan(*args: Any, **kw: Any) -> Any:
        if failing[0]:
            raise PolicyError("the policy is broken")
        return real(*args, **kw)

    monkeypatch.setattr(maintd.planner, "plan", plan)
    try:
        daemon.run_pass(RunKind.MAINTENANCE)
        wait_until(idle(daemon))
        [run] = store.history(table.uri)
        assert run.status == "failed"
        failing[0] = False
        wait_until(lambda: (r := store.get_table(table.uri)) is not None and r.retry_after is not None
                   and r.retry_after < store.db_now(), "the backoff to end")
        daemon.run_pass(RunKind.MAINTENANCE)
        wait_until(idle(daemon))
    finally:
        daemon.stop(grace_seconds=60)
    record = store.get_table(table.uri)
    assert record is not None and record.consecutive_failures == 0 and record.last_status == "skipped"
    assert len(store.history(table.uri)) == 1, "the check that found nothing after the failure is no run"

