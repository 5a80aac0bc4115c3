"""Leases between real OS processes: never two holders at once, and takeover after a holder is killed."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import sqlalchemy as sa
from waiting import wait_until

from maintd.service.store import StateStore

from .conftest import StoreTarget
from .lease_worker import holdings

WORKER = Path(__file__).with_name("lease_worker.py")
Interval = tuple[float, float, str]

pytestmark = pytest.mark.slow


def spawn(
    target: StoreTarget, holder: str, *, tables: int, duration: float, limit: int, seconds: float, release_p: float,
    rounds: Path | None = None,
) -> subprocess.Popen[str]:
    """A lease worker; with ``rounds``, the file its number of rounds so far is written to."""
    args = [target.url, target.db_schema or "-", holder, tables, duration, limit, seconds, release_p,
            *([rounds] if rounds else [])]
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read() if proc.stderr else ""
    return proc


def finish(proc: subprocess.Popen[str]) -> None:
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err


def recorded(store: StateStore) -> dict[str, list[Interval]]:
    by_table: dict[str, list[Interval]] = defaultdict(list)
    with store.engine.connect() as conn:
        for row in conn.execute(sa.select(holdings)):
            by_table[row.table_uri].append((row.start_s, row.end_s, row.holder))
    return by_table


def overlaps(by_table: dict[str, list[Interval]]) -> list[tuple[str, Interval, Interval]]:
    """Every pair of intervals of one table held by different holders at the same time."""
    return [
        (uri, a, b)
        for uri, intervals in by_table.items()
        for i, a in enumerate(intervals)
        for b in intervals[i + 1 :]
        if a[2] != b[2] and a[0] < b[1] and b[0] < a[1]
    ]


@pytest.fixture
def prepared(store: StateStore) -> StateStore:
    with store.engine.begin() as conn:
        holdings.create(conn)
    return store


def test_processes_contending_for_leases_never_hold_a_table_at_once(
    store_target: StoreTarget, prepared: StateStore
) -> None:
    workers = [
        spawn(store_target, f"d{i}", tables=4, duration=0.4, limit=2, seconds=2.0, release_p=0.5) for i in range(3)
    ]
    for proc in workers:
        finish(proc)
    by_table = recorded(prepared)
    assert overlaps(by_table) == []
    holders = {holder for intervals in by_table.values() for *_, holder in intervals}
    assert holders == {"d0", "d1", "d2"}, "every process should have held some table"
    assert sum(len(intervals) for intervals in by_table.values()) > 20


def test_a_killed_holders_tables_are_taken_over_after_its_leases_expire(
    store_target: StoreTarget, prepared: StateStore, tmp_path: Path
) -> None:
    duration = 1.5
    first = spawn(store_target, "first", tables=3, duration=duration, limit=3, seconds=30, release_p=0.0)
    wait_until(lambda: len(prepared.lease_holders()) == 3, "the first holder to lease every table")
    assert set(prepared.lease_holders().values()) == {"first"}
    rounds = tmp_path / "second.rounds"
    second = spawn(store_target, "second", tables=3, duration=duration, limit=3, seconds=8, release_p=0.0,
                   rounds=rounds)
    wait_until(lambda: rounds.exists() and int(rounds.read_text()) >= 2, "two rounds of the second holder")
    assert set(prepared.lease_holders().values()) == {"first"}, "a live holder keeps its tables"

    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    killed_at = prepared.db_now().timestamp()
    last_expiry = max(lease.expires_at.timestamp() for lease in prepared.leases(live_only=False))

    def taken_over() -> bool:
        assert prepared.db_now().timestamp() < killed_at + duration + 5, "the tables were not taken over"
        return {uri for uri, held in recorded(prepared).items() if any(h == "second" for *_, h in held)} == {
            "/wh/t0", "/wh/t1", "/wh/t2"}

    wait_until(taken_over, "the second holder to take every table over")
    second.send_signal(signal.SIGTERM)
    second.wait(timeout=10)

    by_table = recorded(prepared)
    assert overlaps(by_table) == []
    for uri, intervals in by_table.items():
        taken_over = min(start for start, _, holder in intervals if holder == "second")
        assert taken_over >= last_expiry - 0.001, f"{uri} was taken before the killed holder's lease expired"
