"""Reclamation by ``acid.data.retain.hours``: expire old versions, delete what no retained version needs.

Every moment of the last ``acid.data.retain.hours`` before ``now`` stays readable: the oldest retained version
``R`` is the newest version committed at or before ``now - retain hours`` (Delta Lake's rule), and every version
after it stays; ``0`` keeps the latest version only. The reader's ``VersionNotFoundError`` check computes ``R``
the same way (:func:`maintd.table.log.timeline.oldest_retained_version`). The property is read from the latest
version at each run.

Pins (:mod:`maintd.table.pins`) hold history back: ``R`` is never newer than the oldest version a live pin
holds at ``now``. Pins whose TTL passed are ignored, and removed by the run's expire commit.

Before it deletes anything, a run commits what it expires (an ``EXPIRE`` commit) on top of the state it
planned from, so a pin of an expired version that lands first makes it fail
(:class:`~maintd.errors.PinConflictError`) and the run plans again. No pin is acknowledged for a version whose
files are deleted. A run with nothing to expire commits nothing, and expire commits are no history
(:func:`maintd.table.log.timeline.past_expire_commits`), so runs on an idle table add no commits.

DeltaFiles the current state still reads are never reclaimed however old they are; only a compaction (which
the planner schedules under retention pressure) or an overwrite frees them.

docs/reclamation.md ("Retention") gives the rules.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from loguru import logger

from maintd.errors import CommitConflictError, StorageError
from maintd.reclaim.engine import (
    StepHook,
    build_plan,
    check_grace,
    check_listing_behind,
    execute_plan,
    list_files,
    oldest_listed,
    report_of,
    to_ms,
)
from maintd.reclaim.files import PartitionFilter
from maintd.reclaim.models import ReclaimPlan, ReclaimReport
from maintd.table import Pin, Snapshot, Table
from maintd.table.log import timeline
from maintd.table.log.actions import EXPIRE_OPERATION
from maintd.table.pins import oldest_pinned

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
        check_listing_behind(table, listing, latest)
        # Versions before the reclaimed mark are expired even where a log file could still build one: a writer's
        # late checkpoint of an old version beside a commit published into removed history at that version.
        oldest_available = max(oldest_listed(listing, latest), min(table.log.reclaimed_version() or 0, latest))
        by_time = timeline.oldest_retained_version(table.log, latest, snapshot.retain_hours, to_ms(now),
                                                   start=oldest_available)
        held = oldest_pinned(snapshot, to_ms(now))
        floor = by_time if held is None else max(oldest_available, min(by_time, held))
        floor_ms = retained_time(table, floor, latest)
        unpinned_ms = timeline.commit_time(table.log, by_time) if floor < by_time else None
        if floor_ms is not None:
            return build_plan(table, snapshot, listing, now=now, floor=floor, floor_ms=floor_ms,
                              oldest_available=oldest_available, grace=orphan_grace,
                              where=PartitionFilter(snapshot.metadata.partition_by), unpinned_floor_ms=unpinned_ms)
        # Commit ``floor`` was reclaimed while this run looked at it (another run went further): look again.
    raise StorageError(f"table {table.uri}: the log changed under three reclamation plans in a row; retry later")


def retained_time(table: Table, floor: int, latest: int) -> int | None:
    """The commit time of ``floor``, below that of ``floor + 1``; None if commit ``floor`` is gone.

    Real commit times strictly increase, so data files removed before the commit after ``floor`` are exactly
    those removed at or before ``floor``. A commit file at ``floor`` with a later time was published into
    removed history by a stale writer: its time says nothing about the table's history, and taken as the
    cutoff it would delete files that retained versions still read.
    """
    floor_ms = timeline.commit_time(table.log, floor)
    after = timeline.commit_time(table.log, floor + 1) if floor_ms is not None and floor < latest else None
    if floor_ms is not None and after is not None and floor_ms >= after:
        logger.warning("table {}: commit {} is timed after commit {} (a commit published into removed history?); "
                       "files removed after commit {} are kept", table.uri, floor, floor + 1, floor)
        return after - 1
    return floor_ms


def record_expiry(table: Table, plan: ReclaimPlan) -> int | None:
    """Commit what ``plan`` expires (and remove the pins whose TTL passed) on top of the state it was planned
    from, before anything is deleted; the version committed, None when there is nothing to record.

    Raises:
        CommitConflictError: a concurrent commit changed what the plan may expire (a pin of a version it expires:
            :class:`~maintd.errors.PinConflictError`, a protocol or metadata change); nothing was deleted.
    """
    if plan.versions_expired <= 0 and not plan.expired_pins:
        return None
    txn = table.new_transaction(EXPIRE_OPERATION, read_snapshot=table.snapshot(plan.latest_version))
    if plan.versions_expired > 0:
        txn.expire(plan.oldest_retained_version, plan.retained_timestamp)
    for pin_id in plan.expired_pins:
        txn.unpin(pin_id, "expired")
    return txn.commit(
        parameters={"retain_hours": plan.retain_hours, "pinned_versions": list(plan.pinned_versions),
                    "pins_removed": list(plan.expired_pins)},
        metrics={"versions_expired": plan.versions_expired, "data_files": len(plan.data_files),
                 "data_bytes": sum(f.bytes for f in plan.data_files), "pinned_bytes": plan.pinned_bytes})


def held_by_pins(table: Table, snapshot: Snapshot, now: datetime) -> tuple[list[Pin], int]:
    """The pins live at ``now`` and the bytes they hold back: of the data files reclamation at ``now`` would
    delete but for the pins (removed after the oldest pinned version, at or before the version retention keeps).

    Read from the log alone (the sizes the ``remove`` actions record), without listing the storage: what
    ``maintd table describe`` and the daemon's gauges show; a reclamation plan counts the files on storage.
    """
    now_ms = to_ms(now)
    live = snapshot.live_pins(now_ms)
    if not live:
        return live, 0
    by_time = timeline.oldest_retained_version(table.log, snapshot.version, snapshot.retain_hours, now_ms)
    floor = live[0].version
    if floor >= by_time:
        return live, 0
    floor_ms, by_time_ms = timeline.commit_time(table.log, floor), timeline.commit_time(table.log, by_time)
    if floor_ms is None or by_time_ms is None:
        return live, 0
    held = sum(r.bytes or 0 for r in snapshot.tombstones.values() if floor_ms < r.deletion_time <= by_time_ms)
    held += sum(p.bytes for p in snapshot.priors.values()
                if not p.attached and floor_ms < p.deletion_time <= by_time_ms)
    return live, held


REPLANS = 3
"""A reclamation whose expire commit meets a conflict plans again this often before it gives up."""


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
    hook = on_step or (lambda step: None)
    for attempt in range(1, REPLANS + 1):
        plan = plan_reclamation(table, now=now, orphan_grace=orphan_grace)
        if dry_run:
            return report_of(plan, dry_run=True, seconds=round(time.monotonic() - started, 3))
        hook("plan")
        try:
            expire_version = record_expiry(table, plan)
        except CommitConflictError as exc:
            if attempt == REPLANS:
                raise
            logger.info("table {}: reclamation plans again, nothing was deleted: {}", table.uri, exc)
            continue
        if expire_version is not None:
            hook("expire")
        report = execute_plan(table, plan, on_step=on_step, started=started)
        return report.model_copy(update={"expire_version": expire_version, "pins_removed": plan.expired_pins})
    raise AssertionError("unreachable")


__all__ = ["DEFAULT_ORPHAN_GRACE", "held_by_pins", "plan_reclamation", "reclaim_table", "record_expiry"]
