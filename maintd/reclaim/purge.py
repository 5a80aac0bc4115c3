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

A PURGE drops pinned versions too, so it refuses to run while live pins exist (an
:class:`~maintd.errors.InvalidInputError` naming them) unless ``force_unpin`` is given: then the audit
commit also removes those pins, recorded with who forced it. The audit commit records that it expires every
version before itself, so a pin landing concurrently makes it fail (:class:`~maintd.errors.PinConflictError`)
before anything is deleted.

Files no commit references but younger than the grace are kept even by a PURGE: they may belong to a
writer that is about to commit them, and deleting them would lose its rows.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta

from maintd.errors import InvalidInputError
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
from maintd.reclaim.retention import DEFAULT_ORPHAN_GRACE
from maintd.table import Pin, Snapshot, Table
from maintd.table.log.actions import PURGE_OPERATION, Metadata
from maintd.table.pins import who

OPERATION = PURGE_OPERATION


def _plan(table: Table, snapshot: Snapshot, *, now: datetime, floor: int, grace: timedelta,
          where: PartitionFilter) -> ReclaimPlan:
    listing = list_files(table)
    check_listing_behind(table, listing, table.log.latest_version())  # looked up after the listing
    return build_plan(table, snapshot, listing, now=now, floor=floor, floor_ms=snapshot.timestamp,
                      oldest_available=oldest_listed(listing, snapshot.version),
                      grace=grace, where=where)


def plan_purge(table: Table, *, now: datetime | None = None, partitions: Iterable[Mapping[str, object]] = (),
               orphan_grace: timedelta = DEFAULT_ORPHAN_GRACE) -> ReclaimPlan:
    """What a PURGE now would delete: every version before the current one expires (nothing is changed)."""
    now = now or datetime.now(UTC)
    snapshot = table.snapshot()
    where = PartitionFilter.of(snapshot.metadata.partition_by, partitions, table=table.uri,
                               types=_types(snapshot.metadata))
    # The audit commit will be the next version; everything up to the current one goes.
    plan = _plan(table, snapshot, now=now, floor=snapshot.version + 1, grace=orphan_grace, where=where)
    return plan.model_copy(update={"checkpoint_needed": True})


def purge_table(table: Table, *, now: datetime | None = None, partitions: Iterable[Mapping[str, object]] = (),
                orphan_grace: timedelta = DEFAULT_ORPHAN_GRACE, dry_run: bool = False,
                force_short_grace: bool = False, user: str | None = None,
                on_step: StepHook | None = None, force_unpin: bool = False) -> ReclaimReport:
    """PURGE ``table``: record an audit commit, then delete all history before it.

    Args:
        now: the clock of the orphan grace (default: now).
        partitions: delete only in these partitions (as :meth:`Table.overwrite` names them).
        orphan_grace: unreferenced files younger than this stay (at least 1 hour unless forced).
        dry_run: only report what would be deleted.
        force_short_grace: allow a grace below 1 hour (only when no writer runs).
        user: who runs it (default: ``$MAINTD_USER``, else the OS user at the host).
        on_step: called after each step and deleted file.
        force_unpin: drop pinned versions and their pins too.

    Raises:
        InvalidInputError: a bad partition filter, an unforced short grace, or live pins without
            ``force_unpin``; nothing changed.
        CommitConflictError: a concurrent metadata change or pin; nothing deleted.
    """
    started = time.monotonic()
    check_grace(orphan_grace, force_short_grace)
    now = now or datetime.now(UTC)
    preview = plan_purge(table, now=now, partitions=partitions, orphan_grace=orphan_grace)
    pinned = table.snapshot(preview.latest_version).live_pins(to_ms(now))
    if pinned and not force_unpin:
        raise InvalidInputError(
            f"table {table.uri}: PURGE would drop pinned version(s) {_shown(pinned)}; wait for the pins to expire, "
            "unpin them (`maintd table unpin`), or purge with --force-unpin (force_unpin=True) to remove them")
    if dry_run:
        return report_of(preview, dry_run=True, operation="purge", seconds=round(time.monotonic() - started, 3))
    metadata = table.snapshot().metadata
    where = PartitionFilter.of(metadata.partition_by, partitions, table=table.uri, types=_types(metadata))
    user = user or who()
    version = _audit_commit(table, preview, user, pinned)
    if on_step is not None:
        on_step("commit")
    plan = _plan(table, table.snapshot(version), now=now, floor=version, grace=orphan_grace, where=where)
    report = execute_plan(table, plan, on_step=on_step, operation="purge", started=started)
    return report.model_copy(update={"purge_version": version, "pins_removed": tuple(p.id for p in pinned)})


def _types(metadata: Metadata) -> dict[str, str]:
    return {f.name: f.type for f in metadata.fields}


def _shown(pins: list[Pin]) -> str:
    return ", ".join(f"{p.version} (pin {p.id} by {p.who or 'unknown'}, until {p.expires_at:%Y-%m-%d %H:%M} UTC)"
                     for p in pins)


def _audit_commit(table: Table, preview: ReclaimPlan, user: str, unpinned: list[Pin]) -> int:
    txn = table.new_transaction(OPERATION, read_snapshot=table.snapshot(preview.latest_version))
    txn.expire(None)  # every version before this commit: a concurrent pin conflicts with it
    for pin in unpinned:
        txn.unpin(pin.id, f"PURGE --force-unpin by {user}")
    parameters = {
        "user": user,
        "partitions": [dict(p) for p in preview.partitions],
        "orphan_grace_hours": preview.orphan_grace_hours,
        "pins_removed": [p.id for p in unpinned],
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
