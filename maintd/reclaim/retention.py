"""Reclamation by ``acid.data.retain.hours``: expire old versions, delete what no retained version needs.

Every moment of the last ``acid.data.retain.hours`` before ``now`` stays readable, so the oldest retained
version ``R`` is the newest version committed at or before ``now - retain hours`` (the state of the table
at that moment; Delta Lake's rule), and every version after it; ``0`` keeps the latest version only. The
reader's ``VersionNotFoundError`` check computes ``R`` the same way
(:func:`maintd.table.timeline.oldest_retained_version`).
The property is read from the latest version at each run, so a change takes effect at the next one.

DeltaFiles the current state still reads are live, never tombstones, so they are never reclaimed however
old they are; only a compaction (which the planner schedules under retention pressure) or an overwrite
frees them.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from maintd.errors import StorageError
from maintd.reclaim.engine import (
    StepHook,
    build_plan,
    check_grace,
    execute_plan,
    list_files,
    oldest_listed,
    report_of,
    to_ms,
)
from maintd.reclaim.files import PartitionFilter
from maintd.reclaim.models import ReclaimPlan, ReclaimReport
from maintd.table import Table, timeline

DEFAULT_ORPHAN_GRACE = timedelta(hours=72)
"""Files no commit references are kept this long: a writer may be about to commit them (Iceberg: 3 days)."""


def plan_reclamation(table: Table, *, now: datetime | None = None,
                     orphan_grace: timedelta = DEFAULT_ORPHAN_GRACE) -> ReclaimPlan:
    """What reclamation of ``table`` at ``now`` deletes; reads the log and lists the files, deletes nothing."""
    now = now or datetime.now(UTC)
    for _ in range(3):
        listing = list_files(table)  # before the snapshot: see find_orphans
        snapshot = table.snapshot()
        latest = snapshot.version
        oldest_available = oldest_listed(listing, latest)
        floor = timeline.oldest_retained_version(table.log, latest, snapshot.retain_hours, to_ms(now),
                                                 start=oldest_available)
        floor_ms = timeline.commit_time(table.log, floor)
        if floor_ms is not None:
            return build_plan(table, snapshot, listing, now=now, floor=floor, floor_ms=floor_ms,
                              oldest_available=oldest_available, grace=orphan_grace,
                              where=PartitionFilter(snapshot.metadata.partition_by))
        # Commit ``floor`` was reclaimed while this run looked at it (another run went further): look again.
    raise StorageError(f"table {table.uri}: the log changed under three reclamation plans in a row; retry later")


def reclaim_table(table: Table, *, now: datetime | None = None, orphan_grace: timedelta = DEFAULT_ORPHAN_GRACE,
                  dry_run: bool = False, force_short_grace: bool = False,
                  on_step: StepHook | None = None) -> ReclaimReport:
    """Reclaim ``table`` now: expired versions, the data files only they read, and old orphans.

    Args:
        table: the table.
        now: the time retention and the orphan grace are measured against (default: the clock).
        orphan_grace: unreferenced files younger than this are kept (at least 1 hour unless forced).
        dry_run: report what would be deleted, delete nothing.
        force_short_grace: allow a grace below 1 hour (only when no writer runs).
        on_step: called after each step and each deleted file (tests inject crashes with it).

    Raises:
        InvalidInputError: a grace below 1 hour without ``force_short_grace``.
    """
    started = time.monotonic()
    check_grace(orphan_grace, force_short_grace)
    plan = plan_reclamation(table, now=now, orphan_grace=orphan_grace)
    if dry_run:
        return report_of(plan, dry_run=True, seconds=round(time.monotonic() - started, 3))
    return execute_plan(table, plan, on_step=on_step, started=started)


__all__ = ["DEFAULT_ORPHAN_GRACE", "plan_reclamation", "reclaim_table"]
