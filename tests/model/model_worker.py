"""A process of the model check: writers, the maintainer or the reclaimer of one table at a time.

It reads one JSON command per line on stdin and answers one JSON line on stdout when the command is done,
so one process serves many scenarios (starting Python with pyarrow costs more than a scenario). A command is
one role of a scenario (``spawn``: each role in a process of its own), or several roles to run in threads of
this process (``threads``) or in children forked from it (``fork``). Each role appends to its journal file,
one JSON object per line:

* ``{"type": "created", "version": v, "txn": id, "t": ns}``: a commit file this role really created
  (seen below the fault layer, so also when the storage then reported a failure);
* ``{"type": "ghost", "version": v, "txn": id}``: a commit file of its own that it found to be no part of
  the history (published into history reclamation had removed) and took back;
* ``{"type": "op", ...}``: one operation, its data (:func:`model_ops.record`; for ``add_columns``, the columns;
  for ``upgrade_protocol``, the features asked),
  the transaction ids it used,
  and what it was told: ``acked`` (with the version), ``unknown`` (CommitStateUnknownError), ``not_landed``
  (any other CommitError: it certainly did not land) or ``error`` (any other error; for a writer that too
  means its commit did not land, since nothing after a landed commit can raise; a PURGE can fail after its
  commit).

Usage: ``python model_worker.py`` (commands on stdin, see :func:`run_scenario`).
"""

from __future__ import annotations

import json
import multiprocessing
import sys
import threading
import time
import traceback
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from model_ops import batch, record, shape_of
from shapes import Shape

from maintd import CommitError, CommitStateUnknownError, RetryPolicy, Table, errors
from maintd.execution import ExecutionOptions, run_plan
from maintd.planner import Policy, default_policy, with_overrides
from maintd.planner import plan as plan_maintenance
from maintd.reclaim import plan_reclamation, purge_table
from maintd.reclaim.engine import execute_plan
from maintd.reclaim.retention import record_expiry
from maintd.storage import storage_for_uri
from maintd.storage.faulty import Fault, FaultPlan
from maintd.table import transaction
from maintd.table.log import landing
from maintd.table.log.actions import AddFile
from maintd.table.log.commitfile import commit_txn_id, decode_commit
from maintd.table.log.tablelog import parse_log_name

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


class Context:
    """One role's scenario state: its journal, fault plan and the transactions of its current operation.

    Bound to the thread that runs the role (several roles share a process in the ``thread`` process model);
    the fault plan's observer carries its own, since storage calls may come from other threads."""

    def __init__(self, cmd: dict[str, Any]) -> None:
        self.journal = Journal(cmd["journal"])
        self.plan = FaultPlan.from_json(cmd["faults"], observer=self.observe)
        self.blackout = (float(cmd.get("blackout", 0.0)), np.random.default_rng(cmd["seed"] + 1))
        """(probability, generator): after a commit file is created, with that probability the next reads of
        the log all fail for a while (an outage right after a publish: whether it landed may not be knowable)."""
        self.txns: list[str] = []
        """Transaction ids created by the current operation (several for maintenance after a conflict)."""

    def observe(self, op: str, path: str, data: bytes | None, result: Any) -> None:
        """Journal every commit file really created (the fault layer may then report a failure)."""
        parsed = parse_log_name(path)
        if op != "put_if_absent" or result is not True or parsed is None or parsed[0] != "commit" or data is None:
            return
        txn = commit_txn_id(decode_commit(data, uri="", path=path, version=parsed[1]))
        self.journal.write(type="created", version=parsed[1], txn=txn, t=time.time_ns())
        if self.blackout[1].random() < self.blackout[0]:
            self.plan.add(Fault("fail", op="read", path="_log/*", times=60),
                          Fault("fail", op="exists", path="_log/*", times=60))


_LOCAL = threading.local()


def context() -> Context:
    ctx: Context = _LOCAL.ctx
    return ctx


_new_txn = transaction.Transaction.__init__
_take_back = landing.Attempt._take_back


def _tracked_init(self: transaction.Transaction, *args: Any, **kwargs: Any) -> None:
    _new_txn(self, *args, **kwargs)
    ctx = getattr(_LOCAL, "ctx", None)
    if ctx is not None:
        ctx.txns.append(self.txn_id)


def _tracked_take_back(self: landing.Attempt) -> None:
    ctx = getattr(_LOCAL, "ctx", None)
    if ctx is not None:
        ctx.journal.write(type="ghost", version=self.version, txn=self.txn_id)
    _take_back(self)


transaction.Transaction.__init__ = _tracked_init  # type: ignore[method-assign]
landing.Attempt._take_back = _tracked_take_back  # type: ignore[method-assign]


def _table(uri: str, plan: FaultPlan) -> Table:
    return Table(plan.wrap(storage_for_uri(uri)), retry=RETRY)  # a local path or an s3:// URI


def _op(kind: str, call: Any, **details: Any) -> str:
    """Run one operation, journal what it was told and return that (``acked``, ``unknown``, ...)."""
    ctx = context()
    ctx.txns.clear()
    try:
        version = call()
    except CommitStateUnknownError as exc:
        ctx.journal.write(type="op", kind=kind, outcome="unknown", txns=list(ctx.txns), error=str(exc), **details)
        return "unknown"
    except Exception as exc:
        outcome = "not_landed" if isinstance(exc, CommitError) else "error"
        ctx.journal.write(type="op", kind=kind, outcome=outcome, txns=list(ctx.txns),
                          error=f"{type(exc).__name__}: {exc}", **details)
        return outcome
    ctx.journal.write(type="op", kind=kind, outcome="acked", version=version, txns=list(ctx.txns), **details)
    return "acked"


# -- the roles ------------------------------------------------------------------------------------------------------


def writer(uri: str, shape: Shape, plan: FaultPlan, rng: np.random.Generator, ops: int, offset: int,
           evolve: dict[str, Any] | None = None, upgrade: dict[str, Any] | None = None) -> None:
    """Upserts, deletes, mixed changes and overwrites (of a partition, or of the table) of rows of ``shape``.

    ``evolve`` (:meth:`model_ops.Evolution.command`): before operation ``at``, add the columns ``cols`` (an
    ``add_columns`` operation of its own, or with ``merge_schema`` in that write), then write values into them.
    ``upgrade`` (:meth:`model_ops.Features.command`): before operation ``at``, move the table to named features
    (``Table.upgrade_protocol`` with ``features``), an operation of its own, while the other writers write."""
    table = _table(uri, plan)
    cols: list[list[str]] = []
    merge = False
    for i in range(ops):
        if upgrade is not None and i == upgrade["at"]:
            asked = list(upgrade["features"])
            _op("upgrade_protocol", lambda asked=asked: table.upgrade_protocol(asked),
                rec={"kind": "upgrade_protocol", "features": asked})
        if evolve is not None and i == evolve["at"]:
            cols = evolve["cols"]
            if evolve["mode"] == "add_columns":
                spec = ",".join(f"{n}:{t}" for n, t in cols)
                # not acknowledged: whether the columns exist is not known, so the writes bring them
                merge = _op("add_columns", lambda spec=spec: table.add_columns(spec),
                            rec={"kind": "add_columns", "cols": cols}) != "acked"
            else:
                merge = True
        kind = str(rng.choice(["upsert", "upsert", "delete", "changes", "overwrite"], p=[0.3, 0.15, 0.2, 0.25, 0.1]))
        rec = record(kind, rng, offset)
        if cols and kind != "delete":
            rec |= {"cols": cols, "merge": merge}
        data, spec = batch(shape, rec)
        if kind == "upsert":
            _op(kind, lambda data=data, m=merge: table.upsert(data, merge_schema=m), rec=rec)
        elif kind == "delete":
            _op(kind, lambda data=data: table.delete(data), rec=rec)
        elif kind == "changes":
            _op(kind, lambda data=data, m=merge: table.write_changes(data, "op", merge_schema=m), rec=rec)
        else:
            _op(kind, lambda data=data, spec=spec, m=merge: table.overwrite(data, partition=spec, merge_schema=m),
                rec=rec)
        time.sleep(float(rng.uniform(0, 0.01)))


EXECUTIONS = (ExecutionOptions(), ExecutionOptions(task_input_bytes=2_000),
              ExecutionOptions(task_input_bytes=2_000, task_memory_bytes=40_000))
"""How the maintainer's rewrites execute: whole units; key ranges of about 2 KB of input; key ranges whose units
merge through spilled runs (a budget of 40 KB)."""


def policy(kind: str, rng: np.random.Generator) -> Policy:
    """A policy that plans clustering (level 0 to 1) or compaction of any bucket with two files or more;
    compactions into one BaseFile per bucket or several of about 1.5 KB (so later ones rewrite several, and
    key ranges fall below or above them)."""
    if kind == "cluster":
        return with_overrides(default_policy(), {"clustering": {"level1": {"min_files": 2}},
                                                 "compaction": {"enabled": False}})
    target = int(rng.choice([1_500, 64 << 20]))
    return with_overrides(default_policy(), {"clustering": {"enabled": False},
                                             "compaction": {"max_delta_files": 1, "min_interval_hours": 0,
                                                            "target_file_bytes": target}})


SPARK: Any = None


def spark() -> Any:
    """A local SparkSession of this process (one core: the machine runs the writers too), made on first use."""
    global SPARK
    if SPARK is None:
        from maintd.execution import spark_session

        SPARK = spark_session(conf={"spark.master": "local[1]", "spark.driver.memory": "512m",
                                    "spark.sql.shuffle.partitions": "1", "spark.default.parallelism": "1",
                                    "spark.ui.enabled": "false"})
    return SPARK


def maintainer(uri: str, plan: FaultPlan, rng: np.random.Generator, rounds: int, engine: str,
               cluster_share: float = 0.5) -> None:
    """maintd's own maintenance: the planner on the latest snapshot, then execution (in process, in worker
    processes or threads, or forced onto Spark) and the commit, as ``maintd run`` and the daemon do it."""
    table = _table(uri, plan)
    for _ in range(rounds):
        time.sleep(float(rng.uniform(0, 0.25)))  # the writers' operations take some 10 to 50 ms each
        kind = "cluster" if rng.random() < cluster_share else "compact"
        chosen = policy(kind, rng)
        options = EXECUTIONS[int(rng.integers(len(EXECUTIONS)))].model_copy(update={
            # Spark forced: no plan is small enough to run in process; in process: every plan is
            "in_process_max_bytes": 0 if engine == "spark" else 1 << 40,
            "in_process_workers": str(rng.choice(["processes", "threads"])),
            # one commit per run, so that one operation is one commit (or none)
            "commit_max_tasks": 1 << 20, "commit_interval_seconds": 3600.0})
        try:
            snap = table.snapshot()
            made = plan_maintenance(snap, chosen, datetime.now(UTC), table.uri)
        except Exception as exc:
            context().journal.write(type="op", kind="maintenance", outcome="failed", txns=[], error=str(exc))
            continue
        context().journal.write(type="planned", kind=kind, tasks=len(made.tasks))
        if not made.tasks:
            continue
        session = spark() if engine == "spark" else None

        landed: list[int] = []

        def run(made: Any = made, options: ExecutionOptions = options, session: Any = session,
                landed: list[int] = landed) -> int:
            report = run_plan(made, table, session, options, commit=True)
            outcome = report.outcome
            assert outcome is not None
            if report.engine != engine:  # the checker reports it: an error here would count as a failed run
                context().journal.write(type="wrong engine", drawn=engine, ran=report.engine)
            if outcome.version is None:
                error = getattr(errors, outcome.error_type or "", None)
                if isinstance(error, type) and issubclass(error, CommitError) and error is not CommitStateUnknownError:
                    raise CommitError(outcome.error or "")  # it certainly did not land
                raise RuntimeError(outcome.error or "no task committed")
            landed.append(outcome.version)
            return outcome.version

        if _op("maintenance", run, engine=engine, tasks=len(made.tasks)) == "acked":
            journal_outputs(uri, landed[-1])


def journal_outputs(uri: str, version: int) -> None:
    """Journal the columns of the files the maintenance commit just acknowledged added, read at once (before a
    later compaction and a reclamation may delete them) from the storage without faults: the checker holds
    them against the schema of the version the commit stands at."""
    ctx = context()
    storage = storage_for_uri(uri)
    files = []
    try:
        for a in Table(storage).log.read_commit(version) or []:
            if isinstance(a, AddFile):
                with storage.filesystem.open_input_file(storage.full_path(a.path)) as fh:
                    files.append([a.path, a.kind, pq.read_schema(fh).names])
    except (OSError, FileNotFoundError):
        return  # reclaimed meanwhile: nothing to hold against
    ctx.journal.write(type="outputs", version=version, files=files)


PIN_TTL = timedelta(hours=3)
"""Longer than the reclaimer's clock runs ahead (90 minutes) plus the final check's: a pin made in a scenario
holds to its end."""


def pinner(table: Table, rng: np.random.Generator) -> None:
    """Pin one of the newest versions (it may have expired meanwhile: then the pin is refused)."""
    try:
        latest = table.snapshot().version
    except Exception as exc:
        context().journal.write(type="op", kind="pin", outcome="failed", txns=[], error=str(exc))
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
        context().journal.write(type="reclaim", error=f"{type(exc).__name__}: {exc}")
        return
    context().journal.write(type="reclaim", oldest_retained=planned.oldest_retained_version)
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
        context().journal.write(type="reclaim", error=f"{type(exc).__name__}: {exc}")


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
    """Run one role of one scenario: ``role``, ``uri``, ``journal``, ``seed``, ``faults`` (a FaultPlan as JSON),
    ``shape`` (the seed of the table's shape, :func:`model_ops.shape_of`)."""
    ctx = _LOCAL.ctx = Context(cmd)
    rng = np.random.default_rng(cmd["seed"])
    try:
        if cmd["role"] == "writer":
            writer(cmd["uri"], shape_of(cmd["shape"]), ctx.plan, rng, cmd["ops"], cmd["offset"], cmd.get("evolve"),
                   cmd.get("upgrade"))
        elif cmd["role"] == "maintainer":
            maintainer(cmd["uri"], ctx.plan, rng, cmd["rounds"], cmd.get("engine", "in-process"),
                       cmd.get("cluster_share", 0.5))
        else:
            reclaimer(cmd["uri"], ctx.plan, rng, cmd["rounds"])
    finally:
        ctx.journal.close()
        _LOCAL.ctx = None


def answer(cmd: dict[str, Any]) -> dict[str, Any]:
    try:
        run_scenario(cmd)
        return {"ok": True}
    except Exception:
        return {"ok": False, "error": traceback.format_exc()}


def in_threads(roles: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every role in a thread of this process, at once."""
    answers: dict[str, dict[str, Any]] = {}

    def run(name: str, cmd: dict[str, Any]) -> None:
        answers[name] = answer(cmd)

    threads = [threading.Thread(target=run, args=item, name=item[0]) for item in roles.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answers


def _child(cmd: dict[str, Any], conn: Any) -> None:
    conn.send(answer(cmd))
    conn.close()


WARMED: set[str] = set()


def warm(uri: str, scratch: Path) -> None:
    """Use the table's storage, and write to a table of its own, in this process before it forks: a child must
    not inherit thread pools, object-store clients or runtimes broken (maintd resets them at fork)."""
    if "scratch" not in WARMED:
        t = Table.create(str(scratch / "warm"), "id:int64!,v:string", primary_key="id", buckets=2)
        t.upsert(pa.table({"id": [1, 2, 3], "v": ["a", "b", "c"]}))
        WARMED.add("scratch")
    table = Table.open(uri)
    table.read()


def in_forked_children(roles: dict[str, dict[str, Any]], timeout: float) -> dict[str, dict[str, Any]]:
    """Every role in a child forked (multiprocessing's fork context) from this process, which has written to a
    table and read the scenario's (its pools and clients in use) just before."""
    first = next(iter(roles.values()))
    warm(first["uri"], Path(first["journal"]).parent)
    mp = multiprocessing.get_context("fork")
    children = {}
    for name, cmd in roles.items():
        parent, child = mp.Pipe(duplex=False)
        proc = mp.Process(target=_child, args=(cmd, child), name=name)
        proc.start()
        child.close()
        children[name] = (proc, parent)
    answers: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout
    for name, (proc, conn) in children.items():
        if conn.poll(max(0.0, deadline - time.monotonic())):
            try:
                answers[name] = conn.recv()
            except EOFError:
                answers[name] = {"ok": False, "error": f"forked {name} died (exit code {proc.exitcode})"}
        else:
            answers[name] = {"ok": False, "error": f"forked {name} {'died' if not proc.is_alive() else 'hung'}"}
            proc.kill()
        proc.join(5)
    return answers


def main() -> None:
    from loguru import logger

    logger.remove()  # the journal says what happened; warnings of injected faults would only be noise
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd.get("cmd") == "exit":
            return
        if cmd.get("cmd") == "threads":
            out: dict[str, Any] = {"roles": in_threads(cmd["roles"])}
        elif cmd.get("cmd") == "fork":
            out = {"roles": in_forked_children(cmd["roles"], cmd["timeout"])}
        else:
            out = answer(cmd)
        sys.stdout.write(json.dumps(out) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    main()
