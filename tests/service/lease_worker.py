"""A daemon stand-in for the real-process lease tests: contends for leases and records what it held.

Usage: ``python lease_worker.py URL SCHEMA|- HOLDER TABLES DURATION LIMIT SECONDS RELEASE_PROBABILITY [ROUNDS]``

Each round it acquires leases, then "works" on every table it holds and records the interval in
``lease_holdings`` (database clock), but only if its monotonic deadline, taken before acquiring, had not
passed when the interval ended: exactly the rule a daemon follows before it commits. With ``ROUNDS`` (a
path), the number of rounds that have acquired (or failed to acquire) leases is written there after each round.
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

import sqlalchemy as sa

from maintd.service.store import StateStore

holdings = sa.Table(
    "lease_holdings",
    sa.MetaData(),
    sa.Column("table_uri", sa.String(64)),
    sa.Column("holder", sa.String(64)),
    sa.Column("start_s", sa.Float),
    sa.Column("end_s", sa.Float),
)


def main(argv: list[str]) -> None:
    url, schema, holder, n_tables, duration, limit, seconds, release_p, *rounds_file = argv
    store = StateStore(url, db_schema=None if schema == "-" else schema)
    candidates = [f"/wh/t{i}" for i in range(int(n_tables))]
    lease_s, stop_at = float(duration), time.monotonic() + float(seconds)
    print("ready", flush=True)
    rounds = 0
    while time.monotonic() < stop_at:
        started = time.monotonic()
        held = store.acquire_leases(holder, candidates, lease_s, int(limit))
        rounds += 1
        if rounds_file:  # written whole, then renamed: a reader never sees it half-written
            Path(f"{rounds_file[0]}.tmp").write_text(str(rounds))
            os.replace(f"{rounds_file[0]}.tmp", rounds_file[0])
        deadline = started + lease_s
        for uri in held:
            begin = store.db_now().timestamp()
            time.sleep(random.uniform(0.0, lease_s / 10))
            end = store.db_now().timestamp()
            if time.monotonic() >= deadline:
                break  # the lease may have expired: a daemon would not commit now
            with store.engine.begin() as conn:
                conn.execute(sa.insert(holdings).values(table_uri=uri, holder=holder, start_s=begin, end_s=end))
            if random.random() < float(release_p):
                store.release_lease(holder, uri)
        time.sleep(random.uniform(0.0, 0.02))


if __name__ == "__main__":
    main(sys.argv[1:])
