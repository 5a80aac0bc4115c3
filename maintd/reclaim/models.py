"""What reclamation decides and what it did: frozen, validated models (JSON for ``maintd gc --json``)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FileRef(_Model):
    """A file below the table root that reclamation deletes: path relative to the root, size in bytes."""

    path: str
    bytes: int = Field(ge=0)


class ReclaimPlan(_Model):
    """Everything one reclamation (or PURGE) deletes, decided before anything is deleted.

    The oldest retained version ``R`` splits the history: versions before it expire, their commit
    files go once a checkpoint at ``R`` exists, and a data file goes once it was removed at or before
    ``R`` (no retained version reads it). Orphans are files no log entry references, older than the grace.
    """

    table: str
    now: datetime
    retain_hours: int
    orphan_grace_hours: float
    latest_version: int
    oldest_available_version: int = Field(description="the oldest version the log could rebuild before this run")
    oldest_retained_version: int = Field(description="R: versions before it expire")
    retained_timestamp: int = Field(description="commit time of R (ms): tombstones removed at or before it go")
    partitions: tuple[dict[str, str | None], ...] = Field(
        default=(), description="partition filters of a PURGE (data and orphan files only); empty: all")
    checkpoint_needed: bool
    log_files: tuple[FileRef, ...] = ()
    data_files: tuple[FileRef, ...] = ()
    orphan_files: tuple[FileRef, ...] = ()
    orphans_within_grace: int = Field(default=0, description="unreferenced files kept: younger than the grace")
    unknown_files: int = Field(default=0, description="files maintd did not write (by name): never deleted")
    pinned_versions: tuple[int, ...] = Field(default=(), description="versions live pins hold at ``now``")
    pinned_bytes: int = Field(default=0, ge=0, description="bytes of data files kept only because of the pins")
    expired_pins: tuple[str, ...] = Field(default=(), description="ids of pins whose TTL passed: removed by the "
                                                                  "expire commit")
    stray_commits: tuple[FileRef, ...] = Field(
        default=(), description="commit files above a gap in the log (published into a table dropped and created "
                                "again, or rolled back): no version of the table")
    nested_tables: tuple[str, ...] = Field(
        default=(), description="directories holding another table (a _log/ of their own): never descended into")

    @property
    def versions_expired(self) -> int:
        return self.oldest_retained_version - self.oldest_available_version

    @property
    def deletes_anything(self) -> bool:
        return bool(self.log_files or self.data_files or self.orphan_files or self.stray_commits)


class ReclaimReport(_Model):
    """What a reclamation did (or, with ``dry_run``, would do) to one table.

    The ``<reason>_files_deleted`` / ``<reason>_bytes_deleted`` fields are what the daemon publishes as
    ``maintd_files_reclaimed_total{reason=...}`` and ``maintd_bytes_reclaimed_total``.
    """

    table: str
    dry_run: bool
    operation: str = Field(default="reclaim", description="reclaim or purge")
    now: datetime
    retain_hours: int
    latest_version: int
    oldest_retained_version: int
    versions_expired: int
    checkpoint_written: int | None = None
    purge_version: int | None = Field(default=None, description="the version of the PURGE audit commit")
    expire_version: int | None = Field(default=None, description="the version of the commit that recorded what "
                                                                 "this run expires (before it deleted anything)")
    pinned_versions: tuple[int, ...] = ()
    pinned_bytes: int = Field(default=0, description="bytes of data files kept only because of live pins")
    pins_removed: tuple[str, ...] = Field(default=(), description="expired (or, PURGE --force-unpin, live) pins "
                                                                  "removed")
    partitions: tuple[dict[str, str | None], ...] = ()
    log_files_deleted: int = 0
    log_bytes_deleted: int = 0
    data_files_deleted: int = 0
    data_bytes_deleted: int = 0
    orphan_files_deleted: int = 0
    orphan_bytes_deleted: int = 0
    orphans_within_grace: int = 0
    unknown_files_kept: int = 0
    nested_tables: tuple[str, ...] = Field(default=(), description="directories below the table holding another "
                                                                   "table: left alone")
    complete: bool = Field(
        default=True, description="false when a delete failed: the next run finishes the job")
    seconds: float = 0.0

    @property
    def files_deleted(self) -> int:
        return self.log_files_deleted + self.data_files_deleted + self.orphan_files_deleted

    @property
    def bytes_deleted(self) -> int:
        return self.log_bytes_deleted + self.data_bytes_deleted + self.orphan_bytes_deleted


__all__ = ["FileRef", "ReclaimPlan", "ReclaimReport"]
