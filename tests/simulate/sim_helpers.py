"""A table written by a streaming writer and maintained under a policy, in simulated time (freezegun).

The writer commits every ``write_every``: new keys, updates of live keys and deletes of live keys, in one
commit. Maintenance runs as the daemon's schedule would (every ``maintain_every``, from ``first_pass`` after the
table was created): plan with the policy, execute with the local executor, commit the rewrites.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.acero  # imported before freezegun swaps datetime.date, which its C module checks on import
from freezegun import freeze_time

from maintd.execution import commit_rewrites, execute
from maintd.planner import Policy, load_policy_file, plan
from maintd.table import Table

T0 = datetime(2024, 3, 1, tzinfo=UTC)
POLICY_A = """\
default:
  clustering:
    level1: {min_files: 4, max_age_hours: 1}
    level2: {min_files: 4, max_age_hours: 6}
  compaction: {max_delta_files: 10, max_interval_hours: 12, delta_base_ratio: 2.0}
"""


@dataclass(frozen=True)
class Maintained:
    """The table, its policy and when maintenance really ran."""

    uri: str
    policy_path: Path
    policy: Policy
    passes: tuple[datetime, ...]
    writes: int
    start: datetime
    end: datetime


def _batch(rng: np.random.Generator, live: np.ndarray, first_new: int, new: int, updates: int, deletes: int
           ) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    fresh = np.arange(first_new, first_new + new)
    upd = rng.choice(live, updates, replace=False) if len(live) > 2 * updates else np.zeros(0, np.int64)
    dels = np.setdiff1d(rng.choice(live, deletes, replace=False), upd) if len(live) > 2 * updates else upd[:0]
    ids = np.concatenate([fresh, upd, dels])
    ops = np.concatenate([np.zeros(len(fresh) + len(upd), np.int8), np.ones(len(dels), np.int8)])
    data = pa.table({"id": ids, "v": [f"value-{x % 997}" for x in ids], "amount": rng.random(len(ids)), "op": ops})
    return data, fresh, dels


def write_and_maintain(root: Path, *, hours: float = 30, write_every: timedelta = timedelta(minutes=10),
                       maintain_every: timedelta = timedelta(minutes=30), first_pass: timedelta = timedelta(minutes=7),
                       policy_text: str = POLICY_A, buckets: int = 4, seed: int = 7,
                       properties: dict[str, object] | None = None) -> Maintained:
    """Write and maintain a table for ``hours`` of simulated time; returns what happened.

    ``properties``: table properties on top of ``acid.data.retain.hours`` = 12."""
    policy_path = root / "A.yaml"
    policy_path.write_text(policy_text)
    policy = load_policy_file(policy_path).default
    uri = str(root / "orders")
    rng = np.random.default_rng(seed)
    end = T0 + timedelta(hours=hours)
    passes: list[datetime] = []
    writes = 0
    with freeze_time(T0) as clock:
        table = Table.create(uri, "id:int64!,v:string,amount:double", primary_key="id", buckets=buckets,
                             properties={"acid.data.retain.hours": 12, **(properties or {})})
        live, next_id = np.zeros(0, np.int64), 0
        next_write, next_pass = T0 + write_every, T0 + first_pass
        while min(next_write, next_pass) <= end:
            now = min(next_write, next_pass)
            clock.move_to(now)
            if now == next_write:  # the writer first: at equal times the simulator orders writers first too
                data, fresh, dels = _batch(rng, live, next_id, 60, 40, 8)
                table.write_changes(data, "op")
                live, next_id = np.setdiff1d(np.union1d(live, fresh), dels), next_id + len(fresh)
                next_write += write_every
                writes += 1
            if now == next_pass:
                p = plan(table.snapshot(), policy, now, table.uri)
                if p.tasks:
                    commit_rewrites(table, p, execute(p, table, None))
                passes.append(now)
                next_pass += maintain_every
    return Maintained(uri, policy_path, policy, tuple(passes), writes, T0, end)


def record_runs(url: str, uri: str, passes: tuple[datetime, ...]) -> None:
    """Record the maintenance passes as the daemon would have, in a state store at ``url``."""
    from maintd.service.store import StateStore

    store = StateStore(url)
    try:
        for t in passes:
            run = store.start_run(uri, "maintenance", holder="test", now=t)
            store.finish_run(run, "succeeded", now=t + timedelta(seconds=2))
    finally:
        store.close()
