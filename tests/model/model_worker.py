"""A process of the model check: a writer, the maintainer or the reclaimer of one table at a time.

It reads one JSON command per line on stdin and answers one JSON line on stdout when the command is done,
so one process serves many scenarios (starting Python with pyarrow costs more than a scenario). Each
scenario names a journal file this process appends to, one JSON object per line:

* ``{"type": "created", "version": v, "txn": id, "t": ns}``: a commit file this process really created
  (seen below the fault layer, so also when the storage then reported a failure);
* ``{"type": "ghost", "version": v, "txn": id}``: a commit file of its own that it found to be no part of
  the history (published into history reclamation had removed) and took back;
* ``{"type": "op", ...}``: one operation, its data, the transaction ids it used, and what it was told:
  ``acked`` (with the version), ``unknown`` (CommitStateUnknownError), ``not_landed`` (any other
  CommitError: it certainly did not land) or ``error`` (any other error; for a writer that too means its
  commit did not land, since nothing after a landed commit can raise; a PURGE can fail after its commit).

Usage: ``python model_worker.py`` (commands on stdin, see :func:`run_scenario`).
"""

from __future__ import annotations

import json
import sys
import threading
import time
import traceback
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from maintd import CommitError, CommitStateUnknownError, RetryPolicy, Table, errors
from maintd.execution import ExecutionOptions, PlanDoc, PlanTaskDoc, commit_rewrites, execute
from maintd.reclaim import plan_reclamation, purge_table
from maintd.reclaim.engine import execute_plan
from maintd.reclaim.retention import record_expiry
from maintd.storage import storage_for_uri
from maintd.storage.faulty import Fault, FaultPlan
from maintd.table import landing, transaction
from maintd.table.commitfile import commit_txn_id, decode_commit
from maintd.table.log import parse_log_name

RETRY = RetryPolicy(max_attempts=12, base_delay=0.002, max_delay=0.05, total_timeout=60)


class Journal:
    """Appends records to the scenario's journal file; thread-safe (the rewrites run in threads)."""

    def __init__(self, path: str) -> None:
        self.fh = open(path, "a", buffering=1)  # noqa: SIM115 - closed at the end of the scenario
        self.lock = threading.Lock()

    def write(self, **record: Any) -> None:
        with self.lock:
            self.fh.write(json.dumps(record, default=str) + "\n")

    def close(self) -> None:
        self.fh.close()


JOURNAL: Journal | None = None
PLAN: FaultPlan | None = None
BLACKOUT: tuple[float, np.random.Generator] | None = None
"""(probability, generator): after a commit file is created, with that probability the next reads of the
log all fail for a while (an outage right after a publish: whether it landed may not be knowable)."""
TXNS: list[str] = []
"""Transaction ids created by the current operation (several for maintenance after a conflict)."""

_new_txn = transaction.Transaction.__init__
_take_back = landing.Attempt._take_back


def _tracked_init(self: transaction.Transaction, *args: Any, **kwargs: Any) -> None:
    _new_txn(self, *args, **kwargs)
    TXNS.append(self.txn_id)


def _tracked_take_back(self: landing.Attempt) -> None:
    if JOURNAL is not None:
        JOURNAL.write(type="ghost", version=self.version, txn=self.txn_id)
    _take_back(self)


transaction.Transaction.__init__ = _tracked_init  # type: ignore[method-assign]
landing.Attempt._take_back = _tracked_take_back  # type: ignore[method-assign]


def observe(op: str, path: str, data: bytes | None, result: Any) -> None:
    """Journal every commit file really created (the fault layer may then report a failure)."""
    parsed = parse_log_name(path)
    if op != "put_if_absent" or result is not True or parsed is None or parsed[0] != "commit" or data is None:
        return
    txn = commit_txn_id(decode_commit(data, uri="", path=path, version=parsed[1]))
    assert JOURNAL is not None
    JOURNAL.write(type="created", version=parsed[1], txn=txn, t=time.time_ns())
    if BLACKOUT is not None and PLAN is not None and BLACKOUT[1].random() < BLACKOUT[0]:
        PLAN.add(Fault("fail", op="read", path="_log/*", times=60), Fault("fail", op="exists", path="_log/*",
                                                                           times=60))


def _table(uri: str, plan: FaultPlan) -> Table:
    return Table(plan.wrap(storage_for_uri(uri)), retry=RETRY)  # a local path or an s3:// URI


def _op(kind: str, call: Any, **details: Any) -> None:
    """Run one operation and journal what it was told."""
    TXNS.clear()
    try:
        version = call()
    except CommitStateUnknownError as exc:
        JOURNAL.write(type="op", kind=kind, outcome="unknown", txns=list(TXNS), error=str(exc), **details)  # type: ignore[union-attr]
        return
    except Exception as exc:
        outcome = "not_landed" if isinstance(exc, CommitError) else "error"
        JOURNAL.write(type="op", kind=kind, outcome=outcome, txns=list(TXNS),  # type: ignore[union-attr]
                      error=f"{type(exc).__name__}: {exc}", **details)
        return
    JOURNAL.write(type="op", kind=kind, outcome="acked", version=version, txns=list(TXNS), **details)  # type: ignore[union-attr]


# -- the roles ------------------------------------------------------------------------------------------------------


def writer(uri: str, plan: FaultPlan, rng: np.random.Generator, ops: int, offset: int) -> None:
    table = _table(uri, plan)
    for _ in range(ops):
        kind = str(rng.choice(["upsert", "upsert", "delete", "changes", "overwrite"], p=[0.3, 0.15, 0.2, 0.25, 0.1]))
        n = int(rng.integers(1, 8))
        keys = [int(k) for k in rng.integers(0, 40, n)]
        ds = [str(d) for d in rng.choice(["a", "b"], n)]
        names = [f"w{offset}-{int(rng.integers(1000))}" for _ in keys]
        if kind == "upsert":
            rows = [{"id": k, "name": m, "ds": d} for k, m, d in zip(keys, names, ds, strict=True)]
            _op(kind, lambda rows=rows: table.upsert(pa.Table.from_pylist(rows)), rows=rows)
        elif kind == "delete":
            rows = [{"id": k, "ds": d} for k, d in zip(keys, ds, strict=True)]
            _op(kind, lambda rows=rows: table.delete(pa.Table.from_pylist(rows)), rows=rows)
        elif kind == "changes":
            ops_ = [int(o) for o in rng.integers(0, 2, n)]
            rows = [{"id": k, "name": m, "ds": d, "op": o} for k, m, d, o in zip(keys, names, ds, ops_, strict=True)]
            batch = pa.Table.from_pylist(rows).cast(pa.schema([("id", pa.int64()), ("name", pa.string()),
                                                               ("ds", pa.string()), ("op", pa.int8())]))
            _op(kind, lambda batch=batch: table.write_changes(batch, "op"), rows=rows)
        else:
            part = str(rng.choice(["a", "b", "*"]))
            rows = [{"id": k, "name": m, "ds": part if part != "*" else d}
                    for k, m, d in zip(keys, names, ds, strict=True)]
            spec = None if part == "*" else {"ds": part}
            _op(kind, lambda rows=rows, spec=spec: table.overwrite(pa.Table.from_pylist(rows), partition=spec),
                rows=rows, partition=spec)
        time.sleep(float(rng.uniform(0, 0.01)))


EXECUTIONS = (ExecutionOptions(), ExecutionOptions(task_input_bytes=2_000),
              ExecutionOptions(task_input_bytes=2_000, task_memory_bytes=40_000))
"""How the maintainer's rewrites execute: whole units; key ranges of about 2 KB of input; key ranges whose units
merge through spilled runs (a budget of 40 KB)."""


def maintainer(uri: str, plan: FaultPlan, rng: np.random.Generator, rounds: int, cluster_share: float = 0.5) -> None:
    table = _table(uri, plan)
    for _ in range(rounds):
        time.sleep(float(rng.uniform(0, 0.1)))
        kind = "cluster" if rng.random() < cluster_share else "compact"
        # a compaction as one unit, split into key ranges, or split with units that spill; into one BaseFile
        # per bucket or several (so later ones rewrite several, and key ranges fall below or above them)
        options = EXECUTIONS[int(rng.integers(len(EXECUTIONS)))]
        target = None if kind == "cluster" or rng.random() < 0.5 else 1_500
        try:
            snap = table.snapshot()
        except Exception as exc:
            JOURNAL.write(type="op", kind="maintenance", outcome="failed", txns=[], error=str(exc))  # type: ignore[union-attr]
            continue
        tasks = []
        for (part, bucket), files in sorted(snap.by_bucket().items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
            inputs = [f.path for f in files if kind == "compact" or (f.kind == "delta" and f.level == 0)]
            if len(inputs) >= 2 and rng.random() < 0.7:
                tasks.append(PlanTaskDoc(task_id=f"{kind}-{dict(part)}-{bucket}", kind=kind,  # type: ignore[arg-type]
                                         partition=dict(part), bucket=bucket,
                                         target_level=1 if kind == "cluster" else None, inputs=tuple(inputs),
                                         target_file_bytes=target))
        if not tasks:
            continue
        doc = PlanDoc(table_uri=table.uri, read_version=snap.version, tasks=tuple(tasks))

        def run(doc: PlanDoc = doc, options: ExecutionOptions = options) -> int:
            outcome = commit_rewrites(table, doc, execute(doc, table, None, options))
            if outcome.version is None:
                error = getattr(errors, outcome.error_type or "", None)
                if isinstance(error, type) and issubclass(error, CommitError) and error is not CommitStateUnknownError:
                    raise CommitError(outcome.error or "")  # it certainly did not land
                raise RuntimeError(outcome.error or "no task committed")
            return outcome.version

        _op("maintenance", run)


PIN_TTL = timedelta(hours=3)
"""Longer than the reclaimer's clock runs ahead (90 minutes) plus the final check's: a pin made in a scenario
holds to its end."""


def pinner(table: Table, rng: np.random.Generator) -> None:
    """Pin one of the newest versions (it may have expired meanwhile: then the pin is refused)."""
    try:
        latest = table.snapshot().version
    except Exception as exc:
        JOURNAL.write(type="op", kind="pin", outcome="failed", txns=[], error=str(exc))  # type: ignore[union-attr]
        return
    version = max(0, latest - int(rng.integers(0, 4)))

    def pin() -> None:
        table.pin(version, PIN_TTL, "model check")  # the version it landed at is found by its transaction

    _op("pin", pin, pinned=version)


def reclaim(table: Table, now: datetime, grace: timedelta) -> None:
    """``reclaim_table``, step by step: the plan journaled, then its expire commit (an operation of its own),
    then, only if that commit landed or there was nothing to record, the deletions."""
    try:
        planned = plan_reclamation(table, now=now, orphan_grace=grace)
    except Exception as exc:
        JOURNAL.write(type="reclaim", error=f"{type(exc).__name__}: {exc}")  # type: ignore[union-attr]
        return
    JOURNAL.write(type="reclaim", oldest_retained=planned.oldest_retained_version)  # type: ignore[union-attr]
    landed: list[int | None] = []

    def expire() -> int | None:
        landed.append(record_expiry(table, planned))
        return landed[-1]

    _op("expire", expire)
    if not landed:
        return  # the expire commit failed or its outcome is unknown: delete nothing (reclaim_table does the same)
    try:
        execute_plan(table, planned)
    except Exception as exc:
        JOURNAL.write(type="reclaim", error=f"{type(exc).__name__}: {exc}")  # type: ignore[union-attr]


def reclaimer(uri: str, plan: FaultPlan, rng: np.random.Generator, rounds: int) -> None:
    for _ in range(rounds):
        time.sleep(float(rng.uniform(0, 0.08)))
        table = _table(uri, plan)
        ahead = timedelta(minutes=float(rng.choice([0, 30, 90])))
        now = datetime.now(UTC) + ahead
        grace = ahead + timedelta(hours=1)  # files of in-flight writers never look old enough
        roll = rng.random()
        if roll < 0.2:
            pinner(table, rng)
        elif roll < 0.45:  # refused while a pin lives (no --force-unpin)
            _op("purge", lambda table=table, now=now, grace=grace: purge_table(
                table, now=now, orphan_grace=grace).purge_version)
        else:
            reclaim(table, now, grace)


def run_scenario(cmd: dict[str, Any]) -> None:
    """Run one role of one scenario: ``role``, ``uri``, ``journal``, ``seed``, ``faults`` (a FaultPlan as JSON)."""
    global JOURNAL, PLAN, BLACKOUT
    JOURNAL = Journal(cmd["journal"])
    plan = PLAN = FaultPlan.from_json(cmd["faults"], observer=observe)
    rng = np.random.default_rng(cmd["seed"])
    BLACKOUT = (float(cmd.get("blackout", 0.0)), np.random.default_rng(cmd["seed"] + 1))
    try:
        if cmd["role"] == "writer":
            writer(cmd["uri"], plan, rng, cmd["ops"], cmd["offset"])
        elif cmd["role"] == "maintainer":
            maintainer(cmd["uri"], plan, rng, cmd["rounds"], cmd.get("cluster_share", 0.5))
        else:
            reclaimer(cmd["uri"], plan, rng, cmd["rounds"])
    finally:
        JOURNAL.close()
        JOURNAL, PLAN, BLACKOUT = None, None, None


def main() -> None:
    from loguru import logger

    logger.remove()  # the journal says what happened; warnings of injected faults would only be noise
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd.get("cmd") == "exit":
            return
        try:
            run_scenario(cmd)
            answer: dict[str, Any] = {"ok": True}
        except Exception:
            answer = {"ok": False, "error": traceback.format_exc()}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
