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
import sqlalchemy as sa
from waiting import wait_until

from maintd.service.replicas import owner
from maintd.service.schema import replicas
from maintd.service.store import StateStore

from .conftest import StoreTarget
from .replica_worker import INTERVAL, LEASE

WORKER = Path(__file__).with_name("replica_worker.py")
TABLES = 60

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


def spawn(target: StoreTarget, holder: str, logs: Path) -> subprocess.Popen[str]:
    """A replica whose log goes to a file (a pipe nobody reads would block it once full)."""
    log = (logs / f"{holder}.log").open("w")
    proc = subprocess.Popen([sys.executable, str(WORKER), target.url, target.db_schema or "-", holder, str(TABLES)],
                            stdout=subprocess.PIPE, stderr=log, text=True)
    log.close()
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready", (logs / f"{holder}.log").read_text()
    return proc


def test_three_replicas_check_each_table_once_per_interval_and_a_killed_ones_tables_move_within_a_lease(
    store_target: StoreTarget, store: StateStore, tmp_path: Path
) -> None:
    if store_target.backend != "postgresql":
        pytest.skip("replicas share a PostgreSQL store")
    holders = ["r0", "r1", "r2"]
    procs = {h: spawn(store_target, h, tmp_path) for h in holders}
    try:
        # Once every replica has seen the others (a renewal each), each table is checked by its owner only.
        wait_until(lambda: len(store.list_tables()) == TABLES
                   and all(t.checked_by == owner(holders, t.uri) for t in store.list_tables()),
                   "each table checked by its owner")
        assert {t.checked_by for t in store.list_tables()} == set(holders)
        before = {t.uri: t.checks for t in store.list_tables()}
        window = 8 * INTERVAL
        time.sleep(window)
        after = {t.uri: t.checks for t in store.list_tables()}
        per_table = [after[u] - before[u] for u in before]
        # once per interval, whoever checks (three replicas each checking every table would make it three times:
        # 24); at least every other interval even when the machine is busy
        assert max(per_table) <= window / INTERVAL + 2, per_table
        assert min(per_table) >= window / INTERVAL / 2, per_table

        moved = [u for u in before if owner(holders, u) == "r1"]
        assert moved, "r1 owns some tables"
        killed_at = store.db_now()
        procs["r1"].send_signal(signal.SIGKILL)
        procs["r1"].wait(30)

        first: dict[str, datetime] = {}  # the first check of each of r1's tables by another replica

        def all_taken_over() -> bool:
            rows = {t.uri: t for t in store.list_tables()}
            for u in moved:
                at = rows[u].checked_at
                if u not in first and rows[u].checked_by in ("r0", "r2") and at is not None and at > killed_at:
                    first[u] = at
            return len(first) == len(moved)

        wait_until(all_taken_over, "every one of r1's tables taken over", poll=0.05)
        # r1's leases, renewed with its row, expire one lease period after its last renewal: its tables must
        # have moved by then
        with store.engine.connect() as conn:
            last_seen = conn.execute(sa.select(replicas.c.seen_at).where(replicas.c.holder == "r1")).scalar_one()
        latest = max(first.values())
        assert last_seen <= killed_at and latest - last_seen <= timedelta(seconds=LEASE), (
            f"r1's tables were checked by the others {latest - last_seen} after its last renewal "
            f"({latest - killed_at} after it was killed); the lease is {LEASE} s")
        print(f"taken over {(latest - killed_at).total_seconds():.1f} s after the kill, "
              f"{(latest - last_seen).total_seconds():.1f} s after r1's last renewal (lease {LEASE} s)")
        # and then each is checked by its owner among the two left
        wait_until(lambda: all(t.checked_by == owner(["r0", "r2"], t.uri) for t in store.list_tables()),
                   "each table checked by its owner among the two left")
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for h, proc in procs.items():
            proc.communicate(timeout=60)
            if h != "r1":
                assert proc.returncode == 0, (tmp_path / f"{h}.log").read_text()
