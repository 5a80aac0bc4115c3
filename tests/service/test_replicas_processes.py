"""Replicas share the tables: three daemon processes on PostgreSQL check each table once per interval between
them, and when one is killed its tables are checked by the others within one lease period."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from maintd.service.replicas import owner
from maintd.service.store import StateStore

from .conftest import StoreTarget
from .replica_worker import INTERVAL, LEASE

WORKER = Path(__file__).with_name("replica_worker.py")
TABLES = 60

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def spawn(target: StoreTarget, holder: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, str(WORKER), target.url, target.db_schema or "-", holder, str(TABLES)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read() if proc.stderr else ""
    return proc


def wait_until(condition, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.1)


def test_three_replicas_check_each_table_once_per_interval_and_a_killed_ones_tables_move_within_a_lease(
    store_target: StoreTarget, store: StateStore
) -> None:
    if store_target.backend != "postgresql":
        pytest.skip("replicas share a PostgreSQL store")
    holders = ["r0", "r1", "r2"]
    procs = {h: spawn(store_target, h) for h in holders}
    try:
        wait_until(lambda: {t.checked_by for t in store.list_tables()} == set(holders)
                   and len(store.list_tables()) == TABLES and all(t.checks >= 2 for t in store.list_tables()))
        for table in store.list_tables():
            assert table.checked_by == owner(holders, table.uri), "each table is checked by its owner only"
        before = {t.uri: t.checks for t in store.list_tables()}
        window = 8.0
        time.sleep(window)
        after = {t.uri: t.checks for t in store.list_tables()}
        per_table = [after[u] - before[u] for u in before]
        # once per interval, whoever checks; three replicas each checking every table would make it three times
        assert max(per_table) <= window / INTERVAL + 2, per_table
        assert min(per_table) >= window / INTERVAL - 3, per_table

        moved = [u for u in before if owner(holders, u) == "r1"]
        assert moved, "r1 owns some tables"
        killed_at = store.db_now()
        procs["r1"].send_signal(signal.SIGKILL)
        procs["r1"].wait(30)

        first: dict[str, datetime] = {}  # the first check of each of r1's tables by another replica
        deadline = time.monotonic() + 60
        while len(first) < len(moved):
            assert time.monotonic() < deadline, f"{len(moved) - len(first)} of r1's tables were never taken over"
            rows = {t.uri: t for t in store.list_tables()}
            for u in moved:
                at = rows[u].checked_at
                if u not in first and rows[u].checked_by in ("r0", "r2") and at is not None and at > killed_at:
                    first[u] = at
            time.sleep(0.05)
        latest = max(first.values())
        assert latest - killed_at <= timedelta(seconds=LEASE), (
            f"r1's tables were checked by the others {latest - killed_at} after it died; the lease is {LEASE} s")
        rows = {t.uri: t for t in store.list_tables()}
        for u in moved:
            assert rows[u].checked_by == owner(["r0", "r2"], u)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for h, proc in procs.items():
            _, err = proc.communicate(timeout=60)
            if h != "r1":
                assert proc.returncode == 0, err
