"""Which files below a table root reclamation may delete: pure functions of a listing and a snapshot.

Three kinds of file are deleted, each for its own reason:

* **log files** (``log``): commits and checkpoints of versions older than the oldest retained version.
* **data files** (``data``): files removed by a commit at or before the oldest retained version, so no
  retained version reads them (they are tombstones of the latest snapshot). Prior-rows files go with their
  BaseFiles (they carry the deletion time of the commit that removed them; a looked-up one whose BaseFiles
  are all live has none, and stays).
* **orphans** (``orphan``): files no log entry references (a writer or a job that crashed before its
  commit landed), once older than the grace period, because an in-flight writer's files look the same.

Only files whose names maintd itself writes are ever deleted (data files ``base-<hex>.parquet`` and
``delta-L<n>-<hex>.parquet``, prior-rows files ``prior-<hex>.parquet``, temporary ``.tmp-<hex>`` files, and
log names); anything else a user put in the table directory is counted and left alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import unquote

from maintd.errors import InvalidInputError
from maintd.reclaim.models import FileRef
from maintd.storage import FileInfo
from maintd.table.files.partitions import partition_text
from maintd.table.log.actions import PriorRows, RemoveFile
from maintd.table.log.snapshot import Snapshot
from maintd.table.log.tablelog import LAST_CHECKPOINT, LOG_DIR, RECLAIMED, checkpoint_path, parse_log_name

DATA_FILE_NAME = re.compile(r"(base|delta-L\d|prior)-[0-9a-f]{32}\.parquet")
TEMP_PREFIX = ".tmp-"
_NULL = "__NULL__"

Listing = Mapping[str, FileInfo]
"""Files below the table root by relative path."""


def is_maintd_file(path: str) -> bool:
    """True for names maintd writes outside the log: data files and temporary files."""
    name = path.rsplit("/", 1)[-1]
    return bool(DATA_FILE_NAME.fullmatch(name)) or name.startswith(TEMP_PREFIX)


def in_log(path: str) -> bool:
    return path.startswith(f"{LOG_DIR}/")


@dataclass(frozen=True)
class PartitionFilter:
    """Partitions a PURGE is limited to: a file matches if its partition matches any spec (no spec: all)."""

    partition_by: tuple[str, ...]
    specs: tuple[dict[str, str | None], ...] = ()

    @classmethod
    def of(cls, partition_by: Sequence[str], specs: Iterable[Mapping[str, object]], *, table: str,
           types: Mapping[str, str] | None = None) -> PartitionFilter:
        """Validate ``specs`` (column -> value) against the table's partition columns.

        A value is a value of its column or the partition's text, made the partition's text as a writer
        writes it (:func:`~maintd.table.files.partitions.partition_text`, for the column's maintd type in
        ``types``; a column missing there is a ``string`` column); None selects the directories of null values.

        Raises:
            InvalidInputError: the table is not partitioned, a column is not a partition column, or a value
                cannot be a value of its column.
        """
        clean: list[dict[str, str | None]] = []
        for spec in specs:
            if not spec:
                continue
            if not partition_by:
                raise InvalidInputError(f"table {table} is not partitioned; drop the partition filter")
            unknown = sorted(set(spec) - set(partition_by))
            if unknown:
                raise InvalidInputError(
                    f"table {table}: {', '.join(unknown)} is not a partition column; "
                    f"the partition columns are {', '.join(partition_by)}"
                )
            clean.append({k: None if v is None else partition_text(k, (types or {}).get(k, "string"), v, table=table)
                          for k, v in spec.items()})
        return cls(tuple(partition_by), tuple(clean))

    @property
    def everything(self) -> bool:
        return not self.specs

    def matches(self, partition: Mapping[str, str | None]) -> bool:
        return self.everything or any(all(partition.get(k) == v for k, v in s.items()) for s in self.specs)

    def matches_path(self, path: str) -> bool:
        """Whether a file's directory (``col=value/...``) lies in a selected partition."""
        if self.everything:
            return True
        parts = path.split("/")[: len(self.partition_by)]
        found: dict[str, str | None] = {}
        for segment in parts:
            col, sep, value = segment.partition("=")
            if not sep or col not in self.partition_by:
                return False
            found[col] = None if value == _NULL else unquote(value)
        return len(found) == len(self.partition_by) and self.matches(found)


def log_files_below(listing: Listing, floor: int) -> list[FileRef]:
    """Checkpoints and commits of versions before ``floor``: checkpoints first, then commits oldest first.

    Checkpoints go first so that none is left to start a replay from while commits below ``floor`` go: a
    commit a late writer publishes into the removed history is then never read as part of a version.
    Commits go oldest first so that the commits left always form one unbroken range up to the latest
    version, which the version lookups rely on, even if the deletion stops half-way. They also go oldest first so
    that while a commit is there, every commit after it is too (how a committer tells that its version was never
    removed).
    """
    commits: list[tuple[int, FileRef]] = []
    checkpoints: list[tuple[int, FileRef]] = []
    for info in listing.values():
        if not in_log(info.path):
            continue
        parsed = parse_log_name(info.path)
        if parsed is None or parsed[1] >= floor:
            continue
        (commits if parsed[0] == "commit" else checkpoints).append((parsed[1], FileRef(path=info.path,
                                                                                        bytes=info.size)))
    return [f for _, f in sorted(checkpoints, key=lambda x: x[0])] + [f for _, f in sorted(commits, key=lambda x: x[0])]


SKEW_MS = 10 * 60_000
"""Clock difference between processes that :func:`missing_live_files` tolerates."""


def missing_live_files(snapshot: Snapshot, listing: Listing, listed_ms: int) -> list[str]:
    """Live files of ``snapshot`` that must be in ``listing`` but are not: the table is damaged.

    ``listing`` was taken at ``listed_ms`` (before ``snapshot`` was loaded). A file is written before the
    commit that adds it, and a live file is never deleted, so a file committed well before the listing
    (more than :data:`SKEW_MS`, for clocks that differ) was on storage when it was taken.
    """
    return sorted(p for p, f in snapshot.files.items()
                  if p not in listing and f.modification_time < listed_ms - SKEW_MS)


def expired_data_files(snapshot: Snapshot, listing: Listing, cutoff_ms: int, where: PartitionFilter) -> list[FileRef]:
    """Tombstones (and prior-rows files) removed at or before ``cutoff_ms`` (a commit time) whose files are still
    on storage. A looked-up prior-rows file whose BaseFiles are all live is not removed: it has no deletion time.

    Commit times strictly increase with the version, so "removed at or before the commit time of R" is
    "removed at a version <= R": no version from R on holds the file.
    """
    out = []
    priors = [(p, r) for p, r in snapshot.priors.items() if not r.attached]
    removed: list[tuple[str, RemoveFile | PriorRows]] = [*snapshot.tombstones.items(), *priors]
    for path, tomb in removed:
        info = listing.get(path)
        if info is None or tomb.deletion_time > cutoff_ms or path in snapshot.files:
            continue
        if where.matches(tomb.partition):
            out.append(FileRef(path=path, bytes=info.size))
    return sorted(out, key=lambda f: f.path)


@dataclass(frozen=True)
class CommitsAbove:
    """Commits of a listing newer than the snapshot a plan was made from."""

    missed: tuple[int, ...]
    """Versions the snapshot should have seen: the run of commits after it, or a commit standing on a checkpoint
    of its own version. A listing that shows one means the lookup that found the snapshot's version was wrong
    (a store that does not list in lexical order): nothing may be deleted from such a plan."""
    strays: tuple[FileRef, ...]
    """Commit files above a gap (neither the commit before one nor a checkpoint of its version is listed): no
    version of the table, published by a writer whose table was dropped and created again, or rolled back."""


def commits_above(listing: Listing, latest: int) -> CommitsAbove:
    """The commits of ``listing`` newer than ``latest`` (the version of the snapshot loaded after the listing).

    A commit is published only on top of the one before it, and the listing was taken before the snapshot's
    lookup: a commit of that run, or one a checkpoint of its own version stands under, is one the lookup
    should have found.
    """
    names = {p for p in listing if in_log(p)}
    newer: dict[int, FileRef] = {}
    for path in names:
        parsed = parse_log_name(path)
        if parsed is not None and parsed[0] == "commit" and parsed[1] > latest:
            newer[parsed[1]] = FileRef(path=path, bytes=listing[path].size)
    missed = []
    run = latest
    while run + 1 in newer:
        run += 1
        missed.append(run)
    missed += [v for v in newer if v > run and checkpoint_path(v) in names]
    strays = [f for v, f in sorted(newer.items()) if v not in missed]
    return CommitsAbove(tuple(sorted(missed)), tuple(strays))


def nested_tables(listing: Listing) -> tuple[str, ...]:
    """The directories below the table root that hold a ``_log/`` of their own: other tables, created inside
    this one, whose files are theirs (their log references them), never this table's orphans."""
    roots = {p.split(f"/{LOG_DIR}/", 1)[0] for p in listing if f"/{LOG_DIR}/" in p}
    return tuple(sorted(r for r in roots if not any(r.startswith(f"{o}/") for o in roots)))


@dataclass(frozen=True)
class Orphans:
    """Unreferenced files: those old enough to delete, and counts of what is kept."""

    files: tuple[FileRef, ...]
    within_grace: int
    unknown: int
    nested: tuple[str, ...] = ()
    """Directories holding another table (a ``_log/``): never descended into."""


def find_orphans(snapshot: Snapshot, listing: Listing, now_ms: int, grace_ms: int, where: PartitionFilter) -> Orphans:
    """Files no entry of ``snapshot`` references (live, tombstone, prior rows), maintd's by name, past the grace.

    ``listing`` must have been taken *before* ``snapshot`` was loaded: a file that a commit references is
    then either in the snapshot or was committed after it, by a writer that wrote it moments before,
    which the grace protects. A directory that holds a ``_log/`` of its own is another table's: nothing below
    it is an orphan of this one.
    """
    referenced = snapshot.referenced()
    nested = nested_tables(listing)
    old: list[FileRef] = []
    young = unknown = 0
    for path, info in listing.items():
        if path in referenced or any(path.startswith(f"{root}/") for root in nested):
            continue
        if in_log(path):
            name = path.rsplit("/", 1)[-1]
            if not name.startswith(TEMP_PREFIX):
                unknown += not _log_name(name)
                continue
            if not where.everything:
                continue
        elif not is_maintd_file(path):
            unknown += 1
            continue
        if not where.matches_path(path):
            continue
        if now_ms - info.mtime_ms > grace_ms:
            old.append(FileRef(path=path, bytes=info.size))
        else:
            young += 1
    return Orphans(tuple(sorted(old, key=lambda f: f.path)), young, unknown, nested)


_HINTS = frozenset(p.rsplit("/", 1)[-1] for p in (LAST_CHECKPOINT, RECLAIMED))


def _log_name(name: str) -> bool:
    return parse_log_name(name) is not None or name in _HINTS


__all__ = [
    "DATA_FILE_NAME",
    "CommitsAbove",
    "Listing",
    "Orphans",
    "PartitionFilter",
    "commits_above",
    "expired_data_files",
    "find_orphans",
    "in_log",
    "is_maintd_file",
    "log_files_below",
    "missing_live_files",
    "nested_tables",
]
