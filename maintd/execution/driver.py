"""Executing a plan: units on Spark (or local processes), results combined per plan task, committed in groups.

:func:`run_plan` is the whole of execution for one plan. It resolves the plan's inputs at the read
version, splits large compactions into key ranges (:mod:`maintd.execution.units`) and runs the units as
Spark tasks that follow the cluster (:mod:`maintd.execution.scheduler`). It combines each plan task's
units once the last one reports and (with ``commit=True``) hands finished tasks to an
:class:`~maintd.execution.commit.IncrementalCommitter`, which lands them in groups while the run goes
on. A commit that fails for good stops the run: nothing more starts and running Spark jobs are cancelled.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from maintd.execution.budget import Budget
from maintd.execution.commit import CommitOutcome, IncrementalCommitter
from maintd.execution.cpus import usable_cpus
from maintd.execution.local import ProcessBackend, processes_can_open
from maintd.execution.scheduler import Backend, LocalBackend, SparkBackend, run_units
from maintd.execution.specs import ExecutionOptions, PlanDoc, TaskResult
from maintd.execution.units import combine, task_specs
from maintd.table.log.snapshot import partition_key

if TYPE_CHECKING:
    from maintd.table import Snapshot, Table


@dataclass
class ExecutionReport:
    """What running a plan did: one result per plan task (plan order), the commits, and where it ran."""

    results: list[TaskResult] = field(default_factory=list)
    outcome: CommitOutcome | None = None
    units: int = 0
    """Units run (a plan task split into key ranges counts each range)."""
    spark_tasks: int = 0
    """Spark tasks (packs of units) the run was split into."""
    retried: int = 0
    """Units whose accepted result came from a retry (a lost executor or Python worker, a failed attempt)."""
    master: str | None = None
    app_id: str | None = None
    engine: str | None = None
    """Where the units ran: ``spark``, or ``in-process`` (processes of the fork server, or threads of this
    process); None when nothing ran."""


def runs_in_process(plan: Any, snapshot: Snapshot, options: ExecutionOptions) -> bool:
    """Whether ``plan`` is small enough to execute in process (:func:`local_backend`) rather than as Spark jobs: the
    files it reads (sizes from ``snapshot``, the plan's read version) total at most
    ``options.in_process_max_bytes`` (:class:`ExecutionOptions` says why). A clustering that looks up prior rows
    (``changes.prior.rows=lookup``) may read its bucket's BaseFiles too: they count."""
    doc = PlanDoc.of(plan)
    if any(f.split(":", 1)[0] in _WORKER_FAULTS for f in options.faults.values()):
        return False  # a fault that kills or holds its Python worker is meant for a Spark worker, not this process
    size = sum(f.bytes for t in doc.tasks for p in t.inputs if (f := snapshot.files.get(p)) is not None)
    if snapshot.looks_up_prior_rows and any(t.kind == "cluster" for t in doc.tasks):
        groups = snapshot.by_bucket()
        pb = snapshot.metadata.partition_by
        size += sum(f.bytes for t in doc.tasks if t.kind == "cluster"
                    for f in groups.get((partition_key(t.partition, pb), t.bucket), []) if f.kind == "base")
    return bool(doc.tasks) and size <= options.in_process_max_bytes


_WORKER_FAULTS = frozenset({"kill_once", "hold_once"})


def local_backend(table_uri: str, options: ExecutionOptions) -> Backend:
    """Where a run in process executes its units: warm processes of the standard library's fork server
    (``options.in_process_workers``, :mod:`maintd.execution.local`), or threads of this process when asked, or
    when the table's storage is registered in this process only (a child would not find it)."""
    if options.in_process_workers == "processes" and processes_can_open(table_uri):
        return ProcessBackend(in_process_threads(options), table_uri, options)
    return LocalBackend(in_process_threads(options), pack_threads=options.pack_threads,
                        timeout=options.unit_timeout_seconds or None)


def in_process_threads(options: ExecutionOptions) -> int:
    """Units at once in process: ``options.in_process_threads``, or one per CPU this process may use
    (:func:`usable_cpus`)."""
    return options.in_process_threads or usable_cpus()


def execute(plan: Any, table: Table, spark: Any = None, options: ExecutionOptions | None = None) -> list[TaskResult]:
    """Run every task of ``plan`` (on Spark, or in process when ``spark`` is None), committing nothing.

    Returns one result per plan task, in plan order. A task that fails is reported (``ok=False``); its
    units' outputs stay until the caller commits or discards them (:func:`~maintd.execution.commit.commit_rewrites`
    deletes them).
    """
    return run_plan(plan, table, spark, options).results


def run_plan(plan: Any, table: Table, spark: Any = None, options: ExecutionOptions | None = None, *,
             commit: bool = False, before_commit: Callable[[], None] | None = None,
             backend: Backend | None = None, budget: Budget | None = None, priority: float = 0.0
             ) -> ExecutionReport:
    """Run ``plan`` and, with ``commit``, commit finished tasks in groups as they finish.

    Args:
        plan: the plan (a ``MaintenancePlan``, :class:`PlanDoc`, dict or JSON).
        table: the table it was made for.
        spark: the session to run on; None runs in process (:func:`local_backend`).
        options: memory, split and pack sizes, commit group bounds, faults.
        commit: commit finished tasks (``options.commit_max_tasks`` / ``commit_interval_seconds`` per group).
        before_commit: called before each group's commit (see :class:`IncrementalCommitter`).
        backend: where units run (tests); default from ``spark``.
        budget: the daemon's budget, which admits every pack before it is released (None: none).
        priority: the run's place in the budget's line (the table's distance from its targets; higher first).
    """
    doc = PlanDoc.of(plan)
    opts = options or ExecutionOptions()
    report = ExecutionReport()
    if not doc.tasks:
        return report
    snapshot = table.snapshot(doc.read_version)
    specs = task_specs(doc, snapshot, opts, storage=table.storage, run_id=uuid.uuid4().hex)
    run = backend or (local_backend(doc.table_uri, opts) if spark is None else
                      SparkBackend(spark, opts, f"maintd: {len(doc.tasks)} task(s) of {doc.table_uri}",
                                   table_uri=doc.table_uri))
    report.master, report.app_id = run.describe()
    report.engine = getattr(run, "engine", None)
    report.units = len(specs)
    committer = IncrementalCommitter(table, doc, max_tasks=opts.commit_max_tasks,
                                     interval_seconds=opts.commit_interval_seconds,
                                     before_commit=before_commit) if commit else None
    tasks = {t.task_id: t for t in doc.tasks}
    sizes = {t.task_id: sum(snapshot.files[p].bytes for p in t.inputs) for t in doc.tasks}
    units: dict[str, list[TaskResult]] = {}
    done: dict[str, TaskResult] = {}

    def on_result(r: TaskResult) -> None:
        report.retried += int(r.ok and r.attempt > 0)
        got = units.setdefault(r.task_id, [])
        got.append(r)
        if len(got) == r.units:
            done[r.task_id] = combine(tasks[r.task_id], got, sizes[r.task_id])
            if committer is not None:
                committer.add(done[r.task_id])

    def on_tick() -> float | None:
        if committer is None:
            return None
        if committer.due():
            committer.flush()
        return committer.seconds_to_due()

    try:
        report.spark_tasks = run_units(specs, run, opts, on_result=on_result, on_tick=on_tick,
                                       stop=lambda: committer is not None and committer.abandoned,
                                       storage=table.storage, budget=budget, priority=priority)
    finally:
        if committer is not None:
            report.outcome = committer.finish()
    report.results = [done.get(t.task_id) or combine(t, units.get(t.task_id, []), sizes[t.task_id])
                      for t in doc.tasks]
    return report
