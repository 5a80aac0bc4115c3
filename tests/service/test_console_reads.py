"""The fleet page's reads on SQLite and PostgreSQL alike: filters, orders (layout measures included), pages,
counts and lease holders, against an oracle computed in Python from the same rows."""

from __future__ import annotations

import random
from datetime import timedelta

from maintd.service.console_reads import FLEET_SORTS, FleetQuery
from maintd.service.records import CheckRecord, RunKind, RunStatus
from maintd.service.store import StateStore

from .conftest import StoreTarget


def fill(store: StateStore, rng: random.Random) -> dict[str, dict[str, object]]:
    """Twenty tables: some failing (1-3 in a row), some disabled, some without a layout; every tenth leased."""
    uris = [f"s3://wh/db{i % 3}/t_{i:02d}" for i in range(20)]
    store.register_tables(uris)
    now = store.db_now()
    layouts = {}
    checks = []
    for i, uri in enumerate(uris):
        if i % 7 == 6:
            continue  # never checked: no layout
        layout = {"files": rng.randint(1, 50), "bytes": 10, "backlog_bytes": rng.randint(0, 10**9),
                  "backlog_files": 1, "read_amplification": rng.randint(1, 40),
                  "oldest_l0_ms": rng.randint(1, 10**12), "history_bytes": rng.randint(0, 10**6), "levels": {}}
        layouts[uri] = layout
        checks.append(CheckRecord(uri, RunKind.MAINTENANCE, now - timedelta(minutes=i), 1, 1, True, layout))
    store.record_checks("r", checks)
    for uri in rng.sample(uris, 6):
        for _ in range(rng.randint(1, 3)):
            run = store.start_run(uri, RunKind.MAINTENANCE)
            store.finish_run(run, RunStatus.FAILED, error="x")
    for uri in rng.sample(uris, 3):
        store.set_enabled(uri, False)
    store.acquire_leases("replica-a", uris[::10], 60, 5)
    return layouts


def test_fleet_pages_filter_order_and_count_as_an_oracle_says(store_target: StoreTarget) -> None:
    store = store_target.open()
    try:
        rng = random.Random(41)
        layouts = fill(store, rng)
        everything = {t.uri: t for t in store.list_tables()}
        state = {u: ("disabled" if not t.enabled else "failing" if t.consecutive_failures else "healthy")
                 for u, t in everything.items()}

        failing = store.fleet_page(FleetQuery(state="failing", per_page=100))
        assert {t.uri for t in failing.tables} == {u for u, s in state.items() if s == "failing"}
        assert failing.matching == len(failing.tables)
        assert store.fleet_page(FleetQuery(text="DB1/", per_page=100)).matching == sum("db1/" in u for u in state)
        assert store.fleet_page(FleetQuery(text="%", per_page=100)).matching == 0  # a LIKE wildcard is text

        default = [t.uri for t in store.fleet_page(FleetQuery(per_page=100)).tables]
        failures = [everything[u].consecutive_failures for u in default if state[u] != "disabled"]
        assert failures == sorted(failures, reverse=True) and all(state[u] == "disabled" for u in default[-3:])

        for key, largest_first in (("backlog_bytes", True), ("read_amplification", True), ("files", True),
                                   ("oldest_l0_ms", False), ("history_bytes", True)):
            sort = {"backlog_bytes": "backlog", "oldest_l0_ms": "l0_age", "history_bytes": "history"}.get(key, key)
            got = [t.uri for t in store.fleet_page(FleetQuery(sort=sort, per_page=100)).tables]  # type: ignore[arg-type]
            with_layout = sorted(layouts, key=lambda u: (-layouts[u][key] if largest_first else layouts[u][key], u))
            assert got[: len(with_layout)] == with_layout, sort
            assert set(got[len(with_layout):]) == set(everything) - set(layouts)  # no layout: last

        pages = [store.fleet_page(FleetQuery(sort="name", page=p, per_page=6)) for p in (1, 2, 3, 4)]
        names = [t.uri for page in pages for t in page.tables]
        assert names == sorted(everything, key=lambda u: (everything[u].name, u)) and pages[0].matching == 20
        leased = store.fleet_page(FleetQuery(sort="name", per_page=100)).holders
        assert leased == {u: "replica-a" for u in sorted(everything)[::10]}
        for sort in FLEET_SORTS:  # every order pages through every table once
            seen = [t.uri for p in (1, 2, 3) for t in store.fleet_page(
                FleetQuery(sort=sort, page=p, per_page=7)).tables]  # type: ignore[arg-type]
            assert sorted(seen) == sorted(everything), sort
    finally:
        store.close()
