"""Plan and carry out one reclamation: checkpoint, then log, then data files, then orphans, then the watermark.

The order keeps every retained version readable at every moment, including after a crash between any two steps:

1. a checkpoint at the oldest retained version ``R`` is written first and must read back, so ``R`` stays
   reconstructible once the commits before it are gone;
2. the checkpoints and then the commits before ``R`` are deleted, oldest first: from then on no version before
   ``R`` can be loaded, so no reader can start reading a file that step 3 deletes;
3. the data files removed at or before ``R`` are deleted;
4. orphans older than the grace are deleted, after a last check against the newest snapshot;
5. the watermark ``_log/_reclaimed`` records that the data files of every tombstone up to ``R`` are gone.

Every step is idempotent; a run that stops anywhere is finished by the next one. A log file that cannot be
deleted stops the log step there (the log stays one unbroken range) and leaves the data step to the next run.

A damaged table is never reclaimed: a log that fails its check (:class:`~maintd.errors.CorruptLogError`), a
live data file missing from storage (:class:`~maintd.errors.DataFileMissingError`), a protocol this code
cannot write, or a listing that shows a commit newer than the planned snapshot stops the plan before anything
is deleted.

docs/reclamation.md ("What is deleted, in which order", "Why it is safe") gives the reasons.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta

from loguru import logger

from maintd.errors import (
    CorruptLogError,
    DataFileMissingError,
    InvalidInputError,
    StorageError,
    VersionNotFoundError,
)
from maintd.reclaim.files import (
    Listing,
    PartitionFilter,
    commits_above,
    expired_data_files,
    find_orphans,
    in_log,
    log_files_below,
    missing_live_files,
)
from maintd.reclaim.models import FileRef, ReclaimPlan, ReclaimReport
from maintd.storage import FileInfo
from maintd.table import Snapshot, Table
from maintd.table.log import timeline
from maintd.table.log.tablelog import checkpoint_path, oldest_buildable, parse_log_name

StepHook = Callable[[str], None]
"""Called after each step and each deleted file with the step's name: ``plan`` (planned, nothing committed or
deleted yet), ``expire`` (the expire record committed), ``checkpoint``, ``log``, ``data``, ``orphan``,
``watermark`` (and ``commit`` for a PURGE). Tests use it to crash a run, or race it, at any point."""

MIN_GRACE = timedelta(hours=1)


def to_ms(now: datetime) -> int:
    """Epoch milliseconds of a datetime (a naive one is UTC, as everywhere in maintd)."""
    return timeline.to_epoch_ms(now)


def check_grace(grace: timedelta, force: bool) -> None:
    """Refuse an orphan grace below one hour unless forced: it could delete an in-flight writer's files."""
    if grace < timedelta(0):
        raise InvalidInputError(f"orphan grace {grace} is negative; give a duration of at least 1 hour")
    if grace < MIN_GRACE and not force:
        raise InvalidInputError(
            f"orphan grace {grace} is below 1 hour, which can delete files a writer is about to commit; "
            "raise it, or force it only when no writer runs (--force-short-grace on the command line, "
            "force_short_grace=True in Python, reclaim.force_short_grace in the settings)"
        )


class Listed(dict[str, FileInfo]):
    """A listing of the table's files and the (wall-clock) time it was taken at, in ms."""

    def __init__(self, files: dict[str, FileInfo], at_ms: int) -> None:
        super().__init__(files)
        self.at_ms = at_ms


def list_files(table: Table) -> Listed:
    """Every file below the table root, by relative path (taken before loading the snapshot)."""
    at_ms = int(time.time() * 1000)
    try:
        return Listed({f.path: f for f in table.storage.walk()}, at_ms)
    except OSError as exc:
        raise StorageError(f"table {table.uri}: cannot list its files ({exc}); check the storage and retry") from exc


def oldest_listed(listing: Listing, latest: int) -> int:
    """The oldest version that can still be built, from the log files of a listing (``oldest_buildable``).

    The listing is taken before the snapshot of ``latest`` is loaded, so commits made in between are not in it:
    the unbroken run is the one ending at the newest commit listed, not at ``latest`` (which would make every
    version before ``latest`` look unbuildable, and so expire them all).
    """
    commits: list[int] = []
    checkpoints: list[int] = []
    for path in listing:
        parsed = parse_log_name(path) if in_log(path) else None
        if parsed is not None:
            (commits if parsed[0] == "commit" else checkpoints).append(parsed[1])
    listed = max((c for c in commits if c <= latest), default=latest)
    return oldest_buildable(commits, checkpoints, listed)


def check_listing_behind(table: Table, listing: Listing, latest: int) -> None:
    """Refuse to plan from a listing that shows a commit the lookup of the latest version (made after the
    listing was taken) should have found: that lookup was wrong (a store that does not list in lexical order),
    and every file of the newer versions would look like an orphan."""
    missed = commits_above(listing, latest).missed
    if missed:
        raise StorageError(
            f"table {table.uri}: its listing shows commit {missed[-1]}, newer than version {latest} that the "
            "latest-version lookup found after it: the store does not list names in lexical order, or the log is "
            "inconsistent; nothing was deleted. Set the storage option listing_order=unordered for this store")


def check_intact(table: Table, snapshot: Snapshot, listing: Listing) -> None:
    """Refuse to reclaim a table this code cannot write, or whose live data files are missing from storage."""
    snapshot.check_writable(table.uri)
    missing = missing_live_files(snapshot, listing, getattr(listing, "at_ms", 0))
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise DataFileMissingError(
            f"table {table.uri}: {len(missing)} live data file(s) of version {snapshot.version} are missing from "
            f"storage ({shown}); the table is damaged and is not reclaimed (nothing was deleted). Restore the "
            "files from a backup (see docs/operations.md 'Recover')", path=missing[0])


def build_plan(table: Table, snapshot: Snapshot, listing: Listing, *, now: datetime, floor: int, floor_ms: int,
               oldest_available: int, grace: timedelta, where: PartitionFilter, unpinned_floor_ms: int | None = None,
               ) -> ReclaimPlan:
    """What to delete so that ``floor`` becomes the oldest version (pure but for the checkpoint probe).

    ``unpinned_floor_ms`` is the commit time of the oldest retained version there would be without the pins:
    the data files between the two are what the pins hold back (``pinned_bytes``).

    Raises:
        DataFileMissingError, UnsupportedProtocolError: the table is damaged or too new (:func:`check_intact`).
    """
    check_intact(table, snapshot, listing)
    orphans = find_orphans(snapshot, listing, to_ms(now), int(grace.total_seconds() * 1000), where)
    if orphans.nested:
        logger.warning("table {}: {} hold(s) another table (a _log/ of its own); reclamation leaves what is below "
                       "alone. A table inside another is refused at create: move it out", table.uri,
                       ", ".join(orphans.nested))
    # Expired commits and checkpoints, and log files left below the unbroken run of commits (a commit
    # published into removed history by a writer that died before taking it back): no version needs them.
    log_files = tuple(log_files_below(listing, floor))
    data_files = tuple(expired_data_files(snapshot, listing, floor_ms, where))
    pinned_bytes = 0
    if unpinned_floor_ms is not None and unpinned_floor_ms > floor_ms:
        pinned_bytes = _size(tuple(expired_data_files(snapshot, listing, unpinned_floor_ms, where))) - _size(data_files)
    now_ms = to_ms(now)
    return ReclaimPlan(
        table=table.uri,
        now=now,
        retain_hours=snapshot.retain_hours,
        orphan_grace_hours=grace.total_seconds() / 3600,
        latest_version=snapshot.version,
        oldest_available_version=oldest_available,
        oldest_retained_version=floor,
        retained_timestamp=floor_ms,
        partitions=where.specs,
        checkpoint_needed=bool(log_files) and not table.log.checkpoint_exists(floor),
        log_files=log_files,
        data_files=data_files,
        orphan_files=orphans.files,
        orphans_within_grace=orphans.within_grace,
        unknown_files=orphans.unknown,
        pinned_versions=tuple(p.version for p in snapshot.live_pins(now_ms)),
        pinned_bytes=pinned_bytes,
        expired_pins=tuple(sorted(i for i, p in snapshot.pins.items() if not p.live(now_ms))),
        stray_commits=commits_above(listing, snapshot.version).strays if where.everything else (),
        nested_tables=orphans.nested,
    )


def report_of(plan: ReclaimPlan, *, dry_run: bool, operation: str = "reclaim", **done: object) -> ReclaimReport:
    """A report of ``plan``: what a dry run would delete, or (with ``done``) what was deleted."""
    planned = {
        "log_files_deleted": len(plan.log_files) + len(plan.stray_commits),
        "log_bytes_deleted": _size(plan.log_files) + _size(plan.stray_commits),
        "data_files_deleted": len(plan.data_files), "data_bytes_deleted": _size(plan.data_files),
        "orphan_files_deleted": len(plan.orphan_files), "orphan_bytes_deleted": _size(plan.orphan_files),
    }
    fields = {
        "table": plan.table, "dry_run": dry_run, "operation": operation, "now": plan.now,
        "retain_hours": plan.retain_hours, "latest_version": plan.latest_version,
        "oldest_retained_version": plan.oldest_retained_version, "versions_expired": plan.versions_expired,
        "partitions": plan.partitions, "orphans_within_grace": plan.orphans_within_grace,
        "unknown_files_kept": plan.unknown_files, "nested_tables": plan.nested_tables,
        "pinned_versions": plan.pinned_versions, "pinned_bytes": plan.pinned_bytes,
        "checkpoint_written": plan.oldest_retained_version if dry_run and plan.checkpoint_needed else None,
    }
    return ReclaimReport.model_validate(fields | planned | done)


def _size(files: tuple[FileRef, ...]) -> int:
    return sum(f.bytes for f in files)


class _Deleter:
    """Deletes files, counting what went; a failing delete is logged and marks the run incomplete."""

    def __init__(self, table: Table, hook: StepHook) -> None:
        self.table = table
        self.hook = hook
        self.complete = True

    def delete(self, files: tuple[FileRef, ...] | list[FileRef], step: str, *, in_order: bool = False
               ) -> tuple[int, int]:
        """Delete ``files``, in bulk where the store offers it (up to 1,000 keys a request on S3).

        With ``in_order``, one after the other, stopping at the first that cannot be deleted (the commits: what
        is left of them must stay one unbroken range, or a committer could take a commit left behind for its
        own base); still one request each, not a look and a delete."""
        if in_order:
            count = size = 0
            for f in files:
                failed = self.table.storage.delete_many([f.path])
                if failed:
                    self._failed(failed, step, stops=True)
                    break
                count, size = count + 1, size + f.bytes
                self.hook(step)
            return count, size
        failed = self.table.storage.delete_many([f.path for f in files]) if files else {}
        if failed:
            self._failed(failed, step, stops=False)
        gone = [f for f in files if f.path not in failed]
        for _ in gone:
            self.hook(step)
        return len(gone), sum(f.bytes for f in gone)

    def _failed(self, failed: dict[str, Exception], step: str, *, stops: bool) -> None:
        self.complete = False
        path, exc = next(iter(failed.items()))
        more = f" and {len(failed) - 1} more" if len(failed) > 1 else ""
        logger.warning("table {}: could not delete {}{} ({}); the next reclamation retries{}", self.table.uri, path,
                       more, exc, ", and deletes nothing after it now" if stops else "")


def execute_plan(table: Table, plan: ReclaimPlan, *, on_step: StepHook | None = None, operation: str = "reclaim",
                 advance_watermark: bool = True, started: float | None = None) -> ReclaimReport:
    """Carry out ``plan`` in the safe order (module docstring); returns what was deleted."""
    started = time.monotonic() if started is None else started
    hook = on_step or (lambda step: None)
    deleter = _Deleter(table, hook)
    strays = deleter.delete(_still_strays(table, plan), "log")
    checkpoint, log_files, proven = _checkpoint(table, plan, hook)
    if not proven:
        deleter.complete = False  # the checkpoint at R does not read: the log waits, and the data with it
    checkpoints = tuple(f for f in log_files if (parse_log_name(f.path) or ("",))[0] == "checkpoint")
    log = deleter.delete(checkpoints, "log")  # no replay may start below R from here on
    if deleter.complete:
        more = deleter.delete(tuple(f for f in log_files if f not in checkpoints), "log", in_order=True)
        log = (log[0] + more[0], log[1] + more[1])
    log = (log[0] + strays[0], log[1] + strays[1])
    # Data files go only once no version before R can be loaded any more: after the whole log step.
    data = deleter.delete(plan.data_files, "data") if deleter.complete else (0, 0)
    orphan = deleter.delete(_still_orphans(table, plan), "orphan")
    if advance_watermark and deleter.complete and plan.partitions == ():
        table.log.advance_reclaimed_watermark(plan.oldest_retained_version, plan.retained_timestamp)
        hook("watermark")
    report = report_of(
        plan, dry_run=False, operation=operation, checkpoint_written=checkpoint,
        log_files_deleted=log[0], log_bytes_deleted=log[1], data_files_deleted=data[0], data_bytes_deleted=data[1],
        orphan_files_deleted=orphan[0], orphan_bytes_deleted=orphan[1], complete=deleter.complete,
        seconds=round(time.monotonic() - started, 3),
    )
    deleted = log[0] + data[0] + orphan[0]  # a reclamation that deleted nothing is no news: DEBUG, not INFO
    logger.log("INFO" if deleted else "DEBUG",
               "table {}: {} deleted {} log, {} data and {} orphan file(s) ({} bytes); oldest retained version {}",
               table.uri, operation, log[0], data[0], orphan[0], report.bytes_deleted, plan.oldest_retained_version)
    return report


def _checkpoint(table: Table, plan: ReclaimPlan, hook: StepHook) -> tuple[int | None, tuple[FileRef, ...], bool]:
    """Make sure the oldest retained version has a checkpoint that reads; the log files may go only then.

    The checkpoint at ``R`` stands in for every commit the log step deletes, so it must pass its check
    (Parquet, row count, checksum, version) first, not merely exist. A damaged one is deleted and written
    again from the commits it summarises, which still exist; if it still does not read, no log file is
    deleted (nor, after the log step, any data file). Returns the version written (if any), the log files that may
    go, and whether the checkpoint was proven to read (False: the run is incomplete).
    """
    if not plan.log_files:
        return None, (), True
    floor = plan.oldest_retained_version
    written: int | None = None
    damage = None if plan.checkpoint_needed else _damage(table, floor)
    if plan.checkpoint_needed or damage is not None:
        try:
            if damage is not None:
                logger.warning("table {}: the checkpoint of version {}, which reclamation relies on, does not read "
                               "({}); it is written again from the commits before any of them is deleted",
                               table.uri, floor, damage)
                snapshot = table.snapshot(floor)  # from an older checkpoint or the commits: this one is skipped
                if table.storage.delete_many([checkpoint_path(floor)]):
                    logger.warning("table {}: the damaged checkpoint of version {} cannot be deleted; no log file "
                                   "is deleted, and the commits it would replace stay", table.uri, floor)
                    return None, (), False
            else:
                snapshot = table.snapshot(floor)
            table.log.write_checkpoint(snapshot)
        except VersionNotFoundError:
            # Another reclamation went further already: its checkpoint is newer and it deleted these commits.
            logger.info("table {}: version {} was reclaimed concurrently; its log is left to that run", table.uri,
                        floor)
            return None, (), True
        written = floor
        hook("checkpoint")
    damage = _damage(table, floor)
    if damage is not None:
        logger.warning("table {}: the checkpoint of version {} does not read ({}); no log file is deleted, and the "
                       "commits it would replace stay", table.uri, floor, damage)
        return written, (), False
    return written, plan.log_files, True


def _damage(table: Table, version: int) -> str | None:
    """None if the checkpoint of ``version`` reads (passes its check), else what is wrong with it."""
    try:
        table.log.read_checkpoint(version)
    except FileNotFoundError:
        return "it is missing"
    except CorruptLogError as exc:
        return str(exc)
    return None


def _still_strays(table: Table, plan: ReclaimPlan) -> tuple[FileRef, ...]:
    """The planned stray commits that still stand above a gap, looked at once more, oldest first (a commit the
    lookup would take for a version is never deleted as a stray)."""
    out = []
    for f in plan.stray_commits:
        parsed = parse_log_name(f.path)
        if parsed is not None and not table.log.stands_on_history(parsed[1]):
            out.append(f)
    return tuple(out)


def _still_orphans(table: Table, plan: ReclaimPlan) -> tuple[FileRef, ...]:
    """The planned orphans that the newest snapshot still does not reference (a last check)."""
    if not plan.orphan_files:
        return ()
    latest = table.snapshot()
    referenced = latest.referenced()
    return tuple(f for f in plan.orphan_files if f.path not in referenced)


__all__ = ["MIN_GRACE", "Listed", "StepHook", "build_plan", "check_grace", "check_intact", "check_listing_behind",
           "execute_plan",
           "list_files", "oldest_listed", "report_of", "to_ms"]
