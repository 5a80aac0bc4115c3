"""Commit the rewrites of one run in one transaction of the table's log (``data_change=false``).

Maintenance never blocks or fails a writer: it reads at the plan's read version and commits at
snapshot isolation (appends by writers never conflict with it, :mod:`maintd.table.conflicts`). Only a
concurrent removal of one of its inputs conflicts (``ConcurrentDeleteDeleteError``, which names the
paths); the tasks that read those paths are dropped and the others are committed in a fresh
transaction at the same read version, which is checked again against every winning commit.

Files written by tasks that do not land are deleted only when the commit certainly did not land: a
conflict, or the retry budget exhausted (the transaction raises those only once it has settled that no
attempt landed, :mod:`maintd.table.landing`). When the outcome is unknown
(:class:`~maintd.errors.CommitStateUnknownError`: the storage failed while publishing and kept failing),
or after any other error, they are left for orphan cleanup, as pyiceberg does: the commit may have landed
and may reference them.
"""

from __future__ import annotations

from collections.abc import Sequence
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
from maintd.table import Table

OPERATION = "OPTIMIZE"


@dataclass
class CommitOutcome:
    """What the commit step did: the version (None if nothing landed) and the fate of every task."""

    version: int | None = None
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

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def commit_rewrites(table: Table, plan: Any, results: Sequence[TaskResult]) -> CommitOutcome:
    """Commit every successful task's rewrite; drop tasks whose inputs were removed concurrently."""
    doc = PlanDoc.of(plan)
    outcome = CommitOutcome(failed=[r.task_id for r in results if not r.ok])
    pending = [r for r in results if r.ok]
    read = table.snapshot(doc.read_version)
    while pending:
        txn = table.new_transaction(OPERATION, read_snapshot=read)
        try:
            for r in pending:
                for p in r.inputs:
                    txn.remove(p, data_change=False)
                if r.add is not None:
                    txn.add(r.add)
            outcome.version = txn.commit(metrics=_metrics(pending), parameters=_parameters(doc, pending))
            outcome.committed += [r.task_id for r in pending]
            return outcome
        except ConcurrentDeleteDeleteError as exc:
            outcome.conflicts += 1
            outcome.conflict_types.append(type(exc).__name__)
            gone = set(getattr(exc, "paths", ()))
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
            logger.warning("table {}: maintenance commit abandoned: {}", table.uri, exc)
            _discard(table, pending, outcome)
            return outcome
        except Exception as exc:  # CommitStateUnknownError or another error: it may have landed; keep the outputs
            outcome.error, outcome.error_type = f"{type(exc).__name__}: {exc}", type(exc).__name__
            outcome.dropped += [r.task_id for r in pending]
            outcome.outputs_left += [r.add.path for r in pending if r.add is not None]
            logger.error("table {}: maintenance commit failed, outcome unknown; {} output file(s) left for orphan "
                         "cleanup: {}", table.uri, len(outcome.outputs_left), exc)
            return outcome
        finally:
            outcome.retries += max(0, txn.attempts - 1)
    return outcome


def discard_outputs(table: Table, results: Sequence[TaskResult]) -> None:
    """Delete the outputs of tasks that will not be committed (their commit certainly did not land)."""
    for r in results:
        if r.add is not None:
            table.storage.delete(r.add.path)


def _discard(table: Table, lost: Sequence[TaskResult], outcome: CommitOutcome) -> None:
    discard_outputs(table, lost)
    outcome.dropped += [r.task_id for r in lost]


def _metrics(results: Sequence[TaskResult]) -> dict[str, Any]:
    return {
        "tasks": len(results),
        "files_removed": sum(len(r.inputs) for r in results),
        "files_added": sum(1 for r in results if r.add is not None),
        "bytes_read": sum(r.bytes_read for r in results),
        "bytes_written": sum(r.bytes_written for r in results),
        "rows_read": sum(r.rows_read for r in results),
        "rows_written": sum(r.rows_written for r in results),
        "task_seconds": round(sum(r.seconds for r in results), 3),
    }


def _parameters(doc: PlanDoc, results: Sequence[TaskResult]) -> dict[str, Any]:
    kinds = sorted({r.kind for r in results})
    return {"policy": doc.policy_name, "kinds": kinds, "plan_read_version": doc.read_version}
