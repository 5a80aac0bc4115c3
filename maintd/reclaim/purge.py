"""PURGE: drop all history before the current version now, whatever ``acid.data.retain.hours`` says.

A PURGE first records itself: an audit commit (operation ``PURGE``, no data change) that names who ran
it, from where, on which partitions, and what it is about to delete. That commit ``P`` then becomes the
oldest version: a checkpoint at ``P``, the log before ``P`` deleted, then every data file ``P`` does not
reference (tombstones), then orphans older than the grace, in the order of a reclamation
(:mod:`maintd.reclaim.engine`).

With partition filters only the data files and orphans of those partitions are deleted now. Time travel
still ends for the whole table, because the log is one for all partitions and an older version would read
the deleted files; the other partitions' unreferenced files go at the next reclamation, whose oldest
retained version is then ``P`` or later.

Files no commit references but younger than the grace are kept even by a PURGE: they may belong to a
writer that is about to commit them, and deleting them would lose its rows.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import socket
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta

from maintd.reclaim.engine import StepHook, build_plan, check_grace, execute_plan, list_files, oldest_listed, report_of
from maintd.reclaim.files import PartitionFilter
from maintd.reclaim.models import ReclaimPlan, ReclaimReport
from maintd.reclaim.retention import DEFAULT_ORPHAN_GRACE
from maintd.table import Snapshot, Table

OPERATION = "PURGE"


def who() -> str:
    """``user@host`` of this process, for the audit record."""
    user = os.environ.get("MAINTD_USER")
    if not user:
        with contextlib.suppress(OSError, KeyError):
            user = getpass.getuser()
    return f"{user or f'uid {os.getuid()}'}@{socket.gethostname()}"


def _plan(table: Table, snapshot: Snapshot, *, now: datetime, floor: int, grace: timedelta,
          where: PartitionFilter) -> ReclaimPlan:
    listing = list_files(table)
    return build_plan(table, snapshot, listing, now=now, floor=floor, floor_ms=snapshot.timestamp,
                      oldest_available=oldest_listed(listing, snapshot.version),
                      grace=grace, where=where)


def plan_purge(table: Table, *, now: datetime | None = None, partitions: Iterable[Mapping[str, object]] = (),
               orphan_grace: timedelta = DEFAULT_ORPHAN_GRACE) -> ReclaimPlan:
    """What a PURGE now would delete: every version before the current one expires (nothing is changed)."""
    now = now or datetime.now(UTC)
    snapshot = table.snapshot()
    where = PartitionFilter.of(snapshot.metadata.partition_by, partitions, table=table.uri)
    # The audit commit will be the next version; everything up to the current one goes.
    plan = _plan(table, snapshot, now=now, floor=snapshot.version + 1, grace=orphan_grace, where=where)
    return plan.model_copy(update={"checkpoint_needed": True})


def purge_table(table: Table, *, now: datetime | None = None, partitions: Iterable[Mapping[str, object]] = (),
                orphan_grace: timedelta = DEFAULT_ORPHAN_GRACE, dry_run: bool = False,
                force_short_grace: bool = False, user: str | None = None,
                on_step: StepHook | None = None) -> ReclaimReport:
    """PURGE ``table``: record an audit commit, then delete all history before it (see the module docstring).

    Args:
        table: the table.
        now: the time the orphan grace is measured against (default: the clock).
        partitions: limit the deletion of data files and orphans to these partitions (column -> value).
        orphan_grace: unreferenced files younger than this are kept (at least 1 hour unless forced).
        dry_run: report what would be deleted; commit and delete nothing.
        force_short_grace: allow a grace below 1 hour (only when no writer runs).
        user: who runs it, for the audit commit (default: ``$MAINTD_USER`` or the OS user, at the host).
        on_step: called after each step and each deleted file.

    Raises:
        InvalidInputError: a partition filter naming a column that is not a partition column, or a
            short grace without ``force_short_grace``.
        CommitConflictError: a concurrent metadata change; nothing was deleted, run it again.
    """
    started = time.monotonic()
    check_grace(orphan_grace, force_short_grace)
    now = now or datetime.now(UTC)
    preview = plan_purge(table, now=now, partitions=partitions, orphan_grace=orphan_grace)
    if dry_run:
        return report_of(preview, dry_run=True, operation="purge", seconds=round(time.monotonic() - started, 3))
    where = PartitionFilter.of(table.snapshot().metadata.partition_by, partitions, table=table.uri)
    version = _audit_commit(table, preview, user or who())
    if on_step is not None:
        on_step("commit")
    plan = _plan(table, table.snapshot(version), now=now, floor=version, grace=orphan_grace, where=where)
    report = execute_plan(table, plan, on_step=on_step, operation="purge", started=started)
    return report.model_copy(update={"purge_version": version})


def _audit_commit(table: Table, preview: ReclaimPlan, user: str) -> int:
    txn = table.new_transaction(OPERATION)
    parameters = {
        "user": user,
        "partitions": [dict(p) for p in preview.partitions],
        "orphan_grace_hours": preview.orphan_grace_hours,
    }
    metrics = {
        "versions_expired": preview.versions_expired,
        "log_files": len(preview.log_files),
        "data_files": len(preview.data_files),
        "data_bytes": sum(f.bytes for f in preview.data_files),
        "orphan_files": len(preview.orphan_files),
        "orphan_bytes": sum(f.bytes for f in preview.orphan_files),
    }
    return txn.commit(parameters=parameters, metrics=metrics)


__all__ = ["OPERATION", "plan_purge", "purge_table", "who"]
