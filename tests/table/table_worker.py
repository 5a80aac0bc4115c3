"""A table client in its own OS process, for the concurrency and crash tests.

Usage: ``python table_worker.py ROLE URI GO_FILE OUT_FILE [COUNT [SEED]]``. The worker opens the
table, prints ``ready``, waits until ``GO_FILE`` exists (so that all workers start at once), then
runs its role and writes what happened to ``OUT_FILE`` as JSON: one entry per attempt, with the
committed version or the conflict raised (its class, the winning version and operation).

Roles: ``append`` (upserts of overlapping keys; after a conflict it re-reads and tries again, as an
application would), ``properties`` (property changes), ``rewrite`` (compaction by maintd's own maintenance:
planner, execution, commit; a ``data_change=false`` replace of files), and ``hang-before-commit`` /
``hang-in-publish`` (write data, then block before committing or inside the put-if-absent of the
commit file, to be killed).
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from maintd import CommitConflictError, RetryPolicy, Table, Transaction
from maintd.execution import ExecutionOptions, run_plan
from maintd.planner import default_policy, plan, with_overrides

sys.path.insert(0, str(next(p for p in Path(__file__).resolve().parents if (p / "waiting.py").exists())))
from waiting import wait_until  # the tests' one way to wait

RETRY = RetryPolicy(max_attempts=500, base_delay=0.002, max_delay=0.05, total_timeout=60.0)
KEYS = 40


def conflict(exc: CommitConflictError) -> dict[str, Any]:
    return {"error": type(exc).__name__, "winner_version": exc.version, "winner_operation": exc.winning_operation}


def append(table: Table, worker: int, count: int, rng: random.Random) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(count):
        rows = [{"id": rng.randrange(KEYS), "ds": rng.choice(["a", "b"]), "name": f"w{worker}-{i}-{j}"}
                for j in range(5)]
        while True:
            try:
                out.append({"version": table.upsert(pa.Table.from_pylist(rows)), "rows": rows})
                break
            except CommitConflictError as exc:
                out.append(conflict(exc) | {"rows": rows})
    return out


def properties(table: Table, count: int, rng: random.Random) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(count):
        time.sleep(rng.uniform(0.01, 0.05))
        try:
            out.append({"version": table.set_properties({"maintd.test.round": i})})
        except CommitConflictError as exc:
            out.append(conflict(exc))
    return out


COMPACT = with_overrides(default_policy(), {"clustering": {"enabled": False},
                                            "compaction": {"max_delta_files": 1, "min_interval_hours": 0}})
"""Compact every bucket of two files or more (the planner's own rules otherwise)."""


def winner(table: Table, read_version: int, error: str) -> dict[str, Any]:
    """The conflict a maintenance run reported, with the commit it lost to: the first commit after the version
    it read that conflicts with a compaction (a change of metadata; files of its inputs removed)."""
    for entry in sorted(table.history(), key=lambda h: h.version):
        if entry.version > read_version and entry.operation not in ("UPSERT", "DELETE", "WRITE CHANGES"):
            return {"error": error, "winner_version": entry.version, "winner_operation": entry.operation}
    raise AssertionError(f"{error} reported, but no commit after version {read_version} conflicts")


QUIET_SECONDS = 4.0
"""No commit of another process for this long: the writers are done (they commit every few tens of ms, a few
hundred under a loaded machine)."""


def _newest_by_another(table: Table, own: set[int]) -> int | None:
    """The newest version, if another process committed it and it is not the first two; else None."""
    latest = table.snapshot().version
    return latest if latest not in own and latest >= 2 else None


def _newer_than(table: Table, version: int) -> Callable[[], bool]:
    return lambda: table.snapshot().version != version


def rewrite(table: Table, count: int, rng: random.Random) -> list[dict[str, Any]]:
    """Compactions by maintd's own maintenance (the planner, then execution in local worker processes and the
    commit, as ``maintd run`` does), each planned on the version *before* the newest commit of another process
    (waiting up to :data:`QUIET_SECONDS` for one), so that each commit has to get past a concurrent commit: it
    retries or conflicts. ``raced`` says so; ``attempts`` is how many versions the commit tried."""
    out: list[dict[str, Any]] = []
    own: set[int] = set()
    done = 0
    while done < count:
        time.sleep(rng.uniform(0.0, 0.03))
        found = wait_until(lambda: _newest_by_another(table, own), "a commit of another process",
                           timeout=QUIET_SECONDS, required=False, poll=0.005)
        raced = found is not None
        latest = found if found is not None else table.snapshot().version
        snap = table.snapshot(latest - 1 if raced else latest)
        made = plan(snap, COMPACT, datetime.now(UTC), table.uri)
        if not made.tasks:  # nothing to compact: wait for another commit; none for a while, the writers are done
            if not wait_until(_newer_than(table, latest), "another commit", timeout=QUIET_SECONDS, required=False,
                              poll=0.01):
                break
            continue
        report = run_plan(made, table, None, ExecutionOptions(), commit=True)
        outcome = report.outcome
        assert outcome is not None and report.engine == "in-process", report
        failed = [r.error for r in report.results if not r.ok]
        assert not failed, failed
        attempts = outcome.retries + 1
        if outcome.version is not None:
            own.update(outcome.versions)
            out.append({"version": outcome.version, "raced": raced, "attempts": attempts})
            done += 1
        elif outcome.conflict_types:
            out.append(winner(table, snap.version, outcome.conflict_types[-1]) | {"raced": raced,
                                                                                 "attempts": attempts})
        else:
            raise RuntimeError(f"maintenance failed: {outcome.error}")
    return out


def hang(table: Table, go: Path, in_publish: bool) -> None:
    """Write a batch, announce it on ``GO_FILE``'s sibling ``.hanging``, and block where asked."""
    marker = go.with_suffix(".hanging")

    def block(*_: Any, **__: Any) -> Any:
        marker.write_text(str(os.getpid()))
        while True:
            time.sleep(1)

    if in_publish:
        import maintd.storage.local as local

        local.os.link = block  # type: ignore[assignment]  # the commit file is written, not yet published
    else:
        Transaction.commit = block  # type: ignore[method-assign]  # data files written, commit not started
    table.upsert(pa.table({"id": [900, 901], "ds": ["a", "b"], "name": ["lost", "lost"]}))


def main(role: str, uri: str, go_file: str, out_file: str, count: int = 0, seed: int = 0) -> None:
    table = Table.open(uri, retry=RETRY)
    table.snapshot()
    go = Path(go_file)
    print("ready", flush=True)
    wait_until(go.exists, f"{go} (the signal to start)", timeout=120, poll=0.001)  # every worker at once
    rng = random.Random(seed)
    if role.startswith("hang"):
        hang(table, go, in_publish=role == "hang-in-publish")
        return
    if role == "append":
        result = append(table, seed, count, rng)
    elif role == "properties":
        result = properties(table, count, rng)
    elif role == "rewrite":
        result = rewrite(table, count, rng)
    else:
        raise SystemExit(f"unknown role {role!r}")
    Path(out_file).write_text(json.dumps({"role": role, "pid": os.getpid(), "outcomes": result}))


if __name__ == "__main__":
    main(*sys.argv[1:5], *(int(a) for a in sys.argv[5:7]))  # type: ignore[arg-type]
