"""Commit rewrites to the table's log (``data_change=false``): all at once, or in groups as tasks finish.

Maintenance commits at snapshot isolation at the plan's read version, so writers' appends never conflict with
it (:mod:`maintd.table.log.conflicts`). Only a concurrent removal of an input conflicts
(``ConcurrentDeleteDeleteError``, naming the paths): the tasks that read those paths are dropped and the others
committed in a fresh transaction at the same read version.

**Groups.** :class:`IncrementalCommitter` commits finished plan tasks in groups while the run goes on: a group
is committed once it holds ``max_tasks`` tasks or its first task has waited ``interval_seconds``. The groups of
one run remove disjoint inputs, so they never conflict with each other.

**Clean-up.** Files of tasks that do not land are deleted only when the commit certainly did not land (a
conflict, the retry budget exhausted: :mod:`maintd.table.log.landing`) or they were never part of a commit
attempt. When the outcome is unknown (:class:`~maintd.errors.CommitStateUnknownError`), or after any other
error, they are left for orphan cleanup: the commit may have landed. A commit that certainly failed, or whose
outcome is unknown, abandons the run.

docs/architecture.md ("Plan, execute, commit") gives the reasons.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from loguru import logger

from maintd.errors import (
    CommitConflictError,
    CommitRetriesExhaustedError,
    ConcurrentDeleteDeleteError,
    InvalidInputError,
)
from maintd.execution.specs import PlanDoc, TaskResult
from maintd.table import Snapshot, Table

OPERATION = "OPTIMIZE"


@dataclass
class CommitOutcome:
    """What the commit step did: the versions that landed and the fate of every task."""

    version: int | None = None
    """The last version this run committed (None if nothing landed)."""
    versions: list[int] = field(default_factory=list)
    """Every version this run committed, one per group."""
    committed: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    conflicts: int = 0
    error: str | None = None
    outputs_left: list[str] = field(default_factory=list)
    """Output files left on storage for orphan cleanup (commit outcome unknown)."""
    retries: int = 0
    """Commit attempts that lost the race for a version and were retried (over every transaction)."""
    conflict_types: list[str] = field(default_factory=list)
    """The class name of every conflict met, in order (``ConcurrentDeleteDeleteError``...)."""
    error_type: str | None = None
    """The class name of the error in ``error``."""
    abandoned: bool = False
    """A commit failed for good (or the run was stopped): no further task of the run is committed."""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def commit_rewrites(table: Table, plan: Any, results: Sequence[TaskResult]) -> CommitOutcome:
    """Commit every successful task's rewrite in one transaction; drop tasks whose inputs were removed
    concurrently. A failed task's outputs (its finished key ranges) are deleted."""
    doc = PlanDoc.of(plan)
    outcome = CommitOutcome()
    ok = [r for r in results if r.ok]
    settle_failed(table, [r for r in results if not r.ok], outcome)
    commit_group(table, doc, ok, outcome, table.snapshot(doc.read_version))
    return outcome


def settle_failed(table: Table, failed: Sequence[TaskResult], outcome: CommitOutcome) -> None:
    """Record failed tasks and delete what their successful key ranges wrote (never part of any commit)."""
    discard_outputs(table, failed)
    outcome.failed += [r.task_id for r in failed]


def commit_group(table: Table, doc: PlanDoc, results: Sequence[TaskResult], outcome: CommitOutcome,
                 read: Snapshot) -> None:
    """Commit ``results`` (all ok) in one transaction at ``read``, retrying without conflicting tasks."""
    pending = list(results)
    while pending:
        txn = table.new_transaction(OPERATION, read_snapshot=read)
        try:
            for r in pending:
                for p in r.inputs:
                    txn.remove(p, data_change=False)
                for a in r.adds:
                    txn.add(a)
                for prior in r.priors:
                    txn.add_prior(prior)
            version = txn.commit(metrics=_metrics(pending), parameters=_parameters(doc, pending))
            outcome.version = version
            outcome.versions.append(version)
            outcome.committed += [r.task_id for r in pending]
            return
        except ConcurrentDeleteDeleteError as exc:
            outcome.conflicts += 1
            outcome.conflict_types.append(type(exc).__name__)
            gone = set(getattr(exc, "paths", ()))
            stale = [r for r in pending if not gone & set(r.inputs) and gone & _looked_up_in(r)]
            if stale:  # a clustering whose BaseFiles were compacted meanwhile: commit it without its lookup
                pending = [_without_lookup(table, r) if r in stale else r for r in pending]
                continue
            lost = [r for r in pending if gone & set(r.inputs)]
            if not lost:  # cannot tell which task clashed: give up on all, certainly not landed
                lost = pending
            logger.info("table {}: {} task(s) dropped, their inputs were removed concurrently: {}",
                        table.uri, len(lost), exc)
            _discard(table, lost, outcome)
            pending = [r for r in pending if r not in lost]
        except (CommitConflictError, CommitRetriesExhaustedError, InvalidInputError) as exc:
            if isinstance(exc, CommitConflictError):
                outcome.conflicts += 1
                outcome.conflict_types.append(type(exc).__name__)
            outcome.error, outcome.error_type = f"{type(exc).__name__}: {exc}", type(exc).__name__
            outcome.abandoned = True
            logger.warning("table {}: maintenance commit abandoned: {}", table.uri, exc)
            _discard(table, pending, outcome)
            return
        except Exception as exc:  # CommitStateUnknownError or another error: it may have landed; keep the outputs
            outcome.error, outcome.error_type = f"{type(exc).__name__}: {exc}", type(exc).__name__
            outcome.abandoned = True
            outcome.dropped += [r.task_id for r in pending]
            left = [path for r in pending for path in r.written]
            outcome.outputs_left += left
            logger.error("table {}: maintenance commit failed, outcome unknown; {} output file(s) left for orphan "
                         "cleanup: {}", table.uri, len(left), exc)
            return
        finally:
            outcome.retries += max(0, txn.attempts - 1)


def discard_outputs(table: Table, results: Sequence[TaskResult]) -> None:
    """Delete the outputs of tasks that will not be committed (their commit certainly did not land)."""
    for r in results:
        for path in r.written:
            table.storage.delete(path)


def _looked_up_in(r: TaskResult) -> set[str]:
    """The BaseFiles ``r``'s looked-up prior-rows files answer for (they must stay live until it commits)."""
    return {b for p in r.priors if p.lookup for b in p.of}


def _without_lookup(table: Table, r: TaskResult) -> TaskResult:
    """``r`` without its looked-up prior-rows files, which are deleted (never part of any commit): a concurrent
    commit removed BaseFiles they answer for, so they may not be added; the clustering itself still holds."""
    for p in r.priors:
        if p.lookup:
            table.storage.delete(p.path)
    return r.model_copy(update={"priors": tuple(p for p in r.priors if not p.lookup)})


def _discard(table: Table, lost: Sequence[TaskResult], outcome: CommitOutcome) -> None:
    discard_outputs(table, lost)
    outcome.dropped += [r.task_id for r in lost]


class IncrementalCommitter:
    """Commits finished plan tasks in groups bounded by count and time, while the run goes on.

    Args:
        table: the table.
        plan: the plan being executed (its read version is every group's read version).
        max_tasks: a group is committed once it holds this many tasks.
        interval_seconds: ... or once its first task has waited this long (0: every task at once).
        before_commit: called right before each group's commit (the daemon checks its lease there); an
            exception abandons the run, and the group's outputs are left for orphan cleanup.
    """

    def __init__(self, table: Table, plan: Any, *, max_tasks: int = 64, interval_seconds: float = 30.0,
                 before_commit: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.table = table
        self.doc = PlanDoc.of(plan)
        self.max_tasks = max(1, max_tasks)
        self.interval = max(0.0, interval_seconds)
        self.before_commit = before_commit or (lambda: None)
        self.clock = clock
        self.outcome = CommitOutcome()
        self.groups = 0
        self._read = table.snapshot(self.doc.read_version)
        self._pending: list[TaskResult] = []
        self._since: float | None = None

    @property
    def abandoned(self) -> bool:
        return self.outcome.abandoned

    def add(self, result: TaskResult) -> None:
        """A plan task finished: queue it for the next group (commit the group if it is due)."""
        if self.abandoned:  # not run, or run in vain: never part of a commit attempt
            _discard(self.table, [result], self.outcome)
        elif not result.ok:
            settle_failed(self.table, [result], self.outcome)
        else:
            self._pending.append(result)
            self._since = self._since if self._since is not None else self.clock()
        if self.due():
            self.flush()

    def due(self) -> bool:
        wait = self.seconds_to_due()
        return wait is not None and wait <= 0

    def seconds_to_due(self) -> float | None:
        """Seconds until the pending group is due by time (None: nothing pending)."""
        if not self._pending or self._since is None:
            return None
        if len(self._pending) >= self.max_tasks:
            return 0.0
        return self.interval - (self.clock() - self._since)

    def flush(self) -> None:
        """Commit the pending group now."""
        group, self._pending, self._since = self._pending, [], None
        if not group:
            return
        if self.abandoned:
            _discard(self.table, group, self.outcome)
            return
        try:
            self.before_commit()
        except Exception as exc:  # e.g. the daemon lost the table's lease: commit nothing more
            self.outcome.error, self.outcome.error_type = f"{type(exc).__name__}: {exc}", type(exc).__name__
            self.outcome.abandoned = True
            self.outcome.dropped += [r.task_id for r in group]
            self.outcome.outputs_left += [path for r in group for path in r.written]
            logger.warning("table {}: {} finished task(s) not committed: {}", self.table.uri, len(group), exc)
            return
        self.groups += 1
        commit_group(self.table, self.doc, group, self.outcome, self._read)

    def finish(self) -> CommitOutcome:
        """Commit what is pending and return the outcome of every group."""
        self.flush()
        return self.outcome


def _metrics(results: Sequence[TaskResult]) -> dict[str, Any]:
    return {
        "tasks": len(results),
        "files_removed": sum(len(r.inputs) for r in results),
        "files_added": sum(len(r.adds) for r in results),
        "bytes_read": sum(r.bytes_read for r in results),
        "bytes_written": sum(r.bytes_written for r in results),
        "rows_read": sum(r.rows_read for r in results),
        "rows_written": sum(r.rows_written for r in results),
        "task_seconds": round(sum(r.seconds for r in results), 3),
    } | ({"prior_files": sum(len(r.priors) for r in results),
          "prior_bytes": sum(p.bytes for r in results for p in r.priors)} if any(r.priors for r in results) else {})


def _parameters(doc: PlanDoc, results: Sequence[TaskResult]) -> dict[str, Any]:
    kinds = sorted({r.kind for r in results})
    return {"policy": doc.policy_name, "kinds": kinds, "plan_read_version": doc.read_version}
