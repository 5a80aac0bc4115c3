"""Races of the daemon with its own renewal and with the state store: no false lease loss, and runs cut off by
a store outage closed as abandoned, with their summary line, once it answers again."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from loguru import logger
from waiting import wait_until

from maintd.errors import StateStoreError
from maintd.service.daemon import Daemon
from maintd.service.recording import open_run
from maintd.service.records import RunKind, RunResult
from maintd.service.store import StateStore
from maintd.settings import Settings

from .conftest import StoreTarget
from .tcpproxy import TcpProxy

TABLE = "/wh/t0"


def settings_of(tmp_path: Path) -> Settings:
    return Settings.model_validate({
        "state_dir": str(tmp_path),
        "warehouse": {"tables": [TABLE]},
        "scheduler": {"maintenance_interval_seconds": 3600, "reclamation_interval_seconds": 3600,
                      "jitter_seconds": 0, "max_concurrent_tables": 1},
        "store": {"lease_duration_seconds": 30, "lease_renew_interval_seconds": 5},
    })


@pytest.fixture
def records() -> Iterator[list[Any]]:
    found: list[Any] = []
    handler = logger.add(lambda m: found.append(m.record), level="INFO")
    yield found
    logger.remove(handler)


class RenewingOnRelease(StateStore):
    """A store on which the daemon's lease renewal runs right after a run released its lease, before the run
    has left the daemon's in-flight set: the moment the renewal thread can hit in a real daemon."""

    daemon: Daemon | None = None

    def release_lease(self, holder: str, table_uri: str) -> bool:
        released = super().release_lease(holder, table_uri)
        if self.daemon is not None:
            self.daemon.renew_leases()
        return released


def test_a_lease_released_at_the_end_of_a_run_is_not_reported_lost(tmp_path: Path, records: list[Any]) -> None:
    store = RenewingOnRelease(f"sqlite:///{tmp_path / 'maintd.db'}")
    daemon = Daemon(settings_of(tmp_path), store, lambda uri: RunResult(), lambda uri: RunResult(), holder="d1")
    store.daemon = daemon
    try:
        assert daemon.run_pass(RunKind.MAINTENANCE) == [TABLE]
        wait_until(lambda: not daemon._snapshot())
    finally:
        daemon.stop(grace_seconds=30)
        store.close()
    assert [r["message"] for r in records if r["level"].name == "ERROR"] == []


class Outage(StateStore):
    """A store that fails every call while ``down`` is set, as a database that stopped answering."""

    down = threading.Event()

    def _transaction(self, what: str) -> Any:
        if self.down.is_set():
            raise StateStoreError(f"state store {self!r}: cannot {what}: connection refused")
        return super()._transaction(what)


def test_a_run_cut_off_by_a_store_outage_is_closed_as_abandoned_when_the_store_returns(
    tmp_path: Path, records: list[Any]
) -> None:
    store = Outage(f"sqlite:///{tmp_path / 'maintd.db'}")
    inside, go_on = threading.Event(), threading.Event()

    def maintain(uri: str) -> RunResult:
        open_run()  # the run has work: its row is written
        inside.set()
        assert go_on.wait(60)
        return RunResult(metrics={"tasks_planned": 1, "tasks_committed": 1})

    daemon = Daemon(settings_of(tmp_path), store, maintain, lambda uri: RunResult(), holder="d1")
    try:
        daemon.run_pass(RunKind.MAINTENANCE)
        assert inside.wait(60)
        [run] = store.history(TABLE)
        assert run.status == "running"
        store.down.set()  # the database goes away while the run works, and the run ends meanwhile
        go_on.set()
        wait_until(lambda: not daemon._snapshot())
        daemon.renew_leases()  # still down: nothing can be closed yet
        store.down.clear()
        daemon.renew_leases()  # the store answers again
        [run] = store.history(TABLE)
        assert run.status == "abandoned" and run.ended_at is not None
        assert "could not be reached when the run ended (succeeded)" in (run.error or "")
    finally:
        store.down.clear()
        daemon.stop(grace_seconds=30)
        store.close()
    summary = [r for r in records if r["extra"].get("run_id") == run.id and r["extra"].get("status") == "abandoned"]
    assert len(summary) == 1 and summary[0]["level"].name == "WARNING"


@pytest.mark.postgres
def test_a_run_cut_off_by_a_real_postgresql_outage_is_closed_as_abandoned_when_it_answers_again(
    store_target: StoreTarget, store: StateStore, tmp_path: Path, records: list[Any]
) -> None:
    """The connection to PostgreSQL itself breaks (through a proxy cut in front of it), not a stand-in store."""
    if store_target.backend != "postgresql":
        pytest.skip("a PostgreSQL outage")
    url = sa.make_url(store_target.url)
    proxy = TcpProxy(url.host or "127.0.0.1", url.port or 5432)
    proxied = StateStore(url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False),
                         db_schema=store_target.db_schema, connect_timeout=2)
    inside, go_on = threading.Event(), threading.Event()

    def maintain(uri: str) -> RunResult:
        open_run()
        inside.set()
        assert go_on.wait(60)
        return RunResult(metrics={"tasks_planned": 1, "tasks_committed": 1})

    daemon = Daemon(settings_of(tmp_path), proxied, maintain, lambda uri: RunResult(), holder="d1")
    try:
        daemon.run_pass(RunKind.MAINTENANCE)
        assert inside.wait(60)
        proxy.cut()
        go_on.set()
        wait_until(lambda: not daemon._snapshot())
        assert [r.status for r in store.history(TABLE)] == ["running"]
        proxy.restore()
        wait_until(lambda: daemon.renew_leases() is None and store.history(TABLE)[0].status == "abandoned",
                   "the run abandoned")
    finally:
        go_on.set()
        proxy.restore() if proxy._listener is None else None
        daemon.stop(grace_seconds=30)
        proxied.close()
        proxy.close()
    [run] = store.history(TABLE)
    assert "could not be reached when the run ended (succeeded)" in (run.error or "")
    summary = [r for r in records if r["extra"].get("run_id") == run.id and r["extra"].get("status") == "abandoned"]
    assert len(summary) == 1
