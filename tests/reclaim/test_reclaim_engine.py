"""The reclamation engine one piece at a time: the grace check, the listing, the plan, the report, the deletes.

The safe order of a whole run is tested in test_reclaim_safety.py and test_reclaim_retention.py; here each
function is called on its own, on a small table or a hand-made plan, and its exact result is checked.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from loguru import logger

from maintd import DataFileMissingError, InvalidInputError, StorageError, Table, UnsupportedProtocolError
from maintd.errors import VersionNotFoundError
from maintd.reclaim import engine
from maintd.reclaim.engine import (
    Listed,
    build_plan,
    check_grace,
    check_intact,
    execute_plan,
    list_files,
    oldest_listed,
    report_of,
)
from maintd.reclaim.files import PartitionFilter
from maintd.reclaim.models import FileRef, ReclaimPlan
from maintd.storage import FileInfo, LocalStorage
from maintd.table.log.actions import WRITER_VERSION, Protocol
from maintd.table.log.tablelog import checkpoint_path, commit_path

NOW = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)


@pytest.fixture
def messages() -> Iterator[list[str]]:
    """The messages maintd logs during the test."""
    out: list[str] = []
    sink = logger.add(lambda m: out.append(m.record["message"]), level="INFO")
    yield out
    logger.remove(sink)


def small_table(root: Path) -> Table:
    table = Table.create(str(root), "id:int64!,name:string", primary_key="id", buckets=1,
                         properties={"acid.data.retain.hours": 0})
    table.upsert(pa.table({"id": [1], "name": ["a"]}))
    return table


def plan_of(table: Table, **fields: Any) -> ReclaimPlan:
    """A plan of ``table`` deleting what ``fields`` say (nothing by default)."""
    base: dict[str, Any] = {"table": table.uri, "now": NOW, "retain_hours": 0, "orphan_grace_hours": 72.0,
                            "latest_version": table.version, "oldest_available_version": 0,
                            "oldest_retained_version": 0, "retained_timestamp": 0, "checkpoint_needed": False}
    return ReclaimPlan.model_validate(base | fields)


def files(root: Path, sizes: dict[str, int]) -> tuple[FileRef, ...]:
    """Files written below ``root`` with the given sizes, as a plan names them."""
    for path, size in sizes.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(b"x" * size)
    return tuple(FileRef(path=p, bytes=s) for p, s in sizes.items())


# -- the grace ------------------------------------------------------------------------------------------------------


def test_a_negative_grace_is_refused_even_when_forced() -> None:
    with pytest.raises(InvalidInputError) as err:
        check_grace(timedelta(seconds=-1), force=True)
    assert str(err.value) == "orphan grace -1 day, 23:59:59 is negative; give a duration of at least 1 hour"


def test_a_grace_below_one_hour_is_refused_unless_forced_and_one_hour_is_enough() -> None:
    with pytest.raises(InvalidInputError) as err:
        check_grace(timedelta(minutes=59, seconds=59), force=False)
    assert str(err.value) == (
        "orphan grace 0:59:59 is below 1 hour, which can delete files a writer is about to commit; "
        "raise it, or force it only when no writer runs (--force-short-grace on the command line, "
        "force_short_grace=True in Python, reclaim.force_short_grace in the settings)")
    check_grace(timedelta(minutes=59, seconds=59), force=True)
    check_grace(timedelta(hours=1), force=False)
    check_grace(timedelta(0), force=True)


# -- the listing ------------------------------------------------------------------------------------------------------


def test_a_listing_holds_every_file_by_path_and_the_time_it_was_taken(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    table = small_table(tmp_path / "t")
    monkeypatch.setattr(engine.time, "time", lambda: 1234.5678)
    listed = list_files(table)
    assert listed.at_ms == 1234567
    assert set(listed) == {f.path for f in table.storage.walk()}
    assert all(isinstance(info, FileInfo) and info.path == path for path, info in listed.items())


def test_a_listing_that_fails_says_which_table_and_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = small_table(tmp_path / "t")

    def walk(path: str = "") -> list[FileInfo]:
        raise OSError("connection reset")

    monkeypatch.setattr(table.storage, "walk", walk)
    with pytest.raises(StorageError) as err:
        list_files(table)
    assert str(err.value) == f"table {table.uri}: cannot list its files (connection reset); check the storage and retry"
    assert isinstance(err.value.__cause__, OSError)


def _listing(commits: list[int], checkpoints: list[int] = (), others: tuple[str, ...] = ()) -> dict[str, FileInfo]:
    paths = [commit_path(v) for v in commits] + [checkpoint_path(v) for v in checkpoints] + list(others)
    return {p: FileInfo(path=p, size=1, mtime_ms=0) for p in paths}


def test_the_oldest_listed_version_ends_its_run_at_the_newest_commit_listed_up_to_the_latest() -> None:
    # commit 9 was listed but is newer than the snapshot: the run ends at 7, which is buildable from 5
    assert oldest_listed(_listing([5, 6, 7, 9], [5]), 7) == 5
    # without a commit up to the latest, the run ends at the latest
    assert oldest_listed(_listing([9], [3]), 4) == 4
    # names outside the log, or not log files, are not versions
    assert oldest_listed(_listing([4, 5], [], (commit_path(3).removeprefix("_log/"), "_log/x.json")), 5) == 4
    # the latest is listed too: version 6 has no checkpoint, but the run up to 7 has one at 7
    assert oldest_listed(_listing([6, 7], [7]), 7) == 7


# -- a damaged table --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("missing", "shown"), [
    (1, "bucket-0/f0.parquet"),
    (5, "bucket-0/f0.parquet, bucket-0/f1.parquet, bucket-0/f2.parquet, bucket-0/f3.parquet, bucket-0/f4.parquet"),
    (6, "bucket-0/f0.parquet, bucket-0/f1.parquet, bucket-0/f2.parquet, bucket-0/f3.parquet, bucket-0/f4.parquet "
        "and 1 more"),
    (7, "bucket-0/f0.parquet, bucket-0/f1.parquet, bucket-0/f2.parquet, bucket-0/f3.parquet, bucket-0/f4.parquet "
        "and 2 more"),
])
def test_missing_live_files_name_the_first_five_and_count_the_rest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   missing: int, shown: str) -> None:
    table = small_table(tmp_path / "t")
    snapshot = table.snapshot()
    gone = [f"bucket-0/f{i}.parquet" for i in range(missing)]
    monkeypatch.setattr(engine, "missing_live_files", lambda *a: gone)
    with pytest.raises(DataFileMissingError) as err:
        check_intact(table, snapshot, Listed({}, 0))
    assert str(err.value) == (
        f"table {table.uri}: {missing} live data file(s) of version {snapshot.version} are missing from storage "
        f"({shown}); the table is damaged and is not reclaimed (nothing was deleted). Restore the files from a "
        "backup (see docs/operations.md 'Recover')")
    assert err.value.path == "bucket-0/f0.parquet"


def test_a_live_file_is_missing_only_once_committed_before_the_listing(tmp_path: Path) -> None:
    table = small_table(tmp_path / "t")
    snapshot = table.snapshot()
    (live,) = snapshot.files.values()
    check_intact(table, snapshot, Listed({}, live.modification_time))  # committed after the listing was taken
    check_intact(table, snapshot, {})  # a listing without its time: taken at 0, before any commit
    with pytest.raises(DataFileMissingError):
        check_intact(table, snapshot, Listed({}, live.modification_time + 10**6))


def test_a_table_for_a_newer_writer_is_not_reclaimed_and_the_error_names_it(tmp_path: Path) -> None:
    table = small_table(tmp_path / "t")
    snapshot = table.snapshot()
    newer = replace(snapshot, protocol=Protocol(min_reader_version=1, min_writer_version=WRITER_VERSION + 1))
    with pytest.raises(UnsupportedProtocolError) as err:
        check_intact(table, newer, list_files(table))
    assert str(err.value).startswith(f"table {table.uri} requires writer protocol version {WRITER_VERSION + 1}")


# -- the plan ---------------------------------------------------------------------------------------------------------


def test_a_plan_names_what_it_deletes_and_why(tmp_path: Path) -> None:
    table = small_table(tmp_path / "t")
    table.overwrite(pa.table({"id": [2], "name": ["b"]}))  # a tombstone
    snapshot = table.snapshot()
    (tomb,) = snapshot.tombstones.values()
    listing = list_files(table)
    plan = build_plan(table, snapshot, listing, now=NOW, floor=2, floor_ms=tomb.deletion_time,
                      oldest_available=0, grace=timedelta(hours=3, minutes=30), where=PartitionFilter(()))
    assert plan.table == table.uri and plan.now == NOW and plan.retain_hours == 0
    assert plan.orphan_grace_hours == 3.5
    assert (plan.latest_version, plan.oldest_available_version, plan.oldest_retained_version) == (2, 0, 2)
    assert plan.retained_timestamp == tomb.deletion_time and plan.partitions == ()
    assert [f.path for f in plan.log_files] == [commit_path(0), commit_path(1)]
    assert [(f.path, f.bytes) for f in plan.data_files] == [(tomb.path, listing[tomb.path].size)]
    assert plan.checkpoint_needed and plan.pinned_bytes == 0 and plan.pinned_versions == ()
    assert plan.expired_pins == () and plan.orphan_files == ()
    table.log.write_checkpoint(table.snapshot(2))
    again = build_plan(table, snapshot, listing, now=NOW, floor=2, floor_ms=tomb.deletion_time,
                       oldest_available=0, grace=timedelta(hours=1), where=PartitionFilter(()))
    assert not again.checkpoint_needed  # the floor has one already
    none = build_plan(table, snapshot, listing, now=NOW, floor=0, floor_ms=0, oldest_available=0,
                      grace=timedelta(hours=1), where=PartitionFilter(()))
    assert none.log_files == () and not none.checkpoint_needed  # no log file to delete: no checkpoint needed


def test_a_plan_deletes_the_maintd_files_no_version_references_once_older_than_the_grace(tmp_path: Path) -> None:
    table = small_table(tmp_path / "t")
    snapshot = table.snapshot()
    listing = dict(list_files(table))
    now_ms, grace_ms = engine.to_ms(NOW), 2 * 3600 * 1000

    def orphan(name: str, age_ms: int) -> str:
        path = f"bucket-00000/{name}"
        listing[path] = FileInfo(path=path, size=len(name), mtime_ms=now_ms - age_ms)
        return path

    old = orphan(f"delta-L0-{'a' * 32}.parquet", grace_ms + 1)
    orphan(f"delta-L0-{'b' * 32}.parquet", grace_ms)  # exactly as old as the grace: kept
    orphan(f"base-{'c' * 32}.parquet", 5)
    orphan("notes.txt", 10 * grace_ms)  # not a name maintd writes: kept, and counted
    plan = build_plan(table, snapshot, listing, now=NOW, floor=0, floor_ms=0, oldest_available=0,
                      grace=timedelta(hours=2), where=PartitionFilter(()))
    assert plan.orphan_files == (FileRef(path=old, bytes=len(old.split("/")[1])),)
    assert (plan.orphans_within_grace, plan.unknown_files) == (2, 1)


def test_a_plan_names_its_partitions_the_live_pins_and_the_expired_ones(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "t"), "id:int64!,ds:string", primary_key="id", partition_by="ds", buckets=1)
    table.upsert(pa.table({"id": [1, 2], "ds": ["a", "b"]}))
    table.upsert(pa.table({"id": [3], "ds": ["a"]}))
    short = table.pin(1, timedelta(hours=1))
    table.pin(2, timedelta(days=3))
    table.pin(1, timedelta(days=3))
    snapshot = table.snapshot()
    listing = list_files(table)
    now = datetime.fromtimestamp(short.expires / 1000, UTC) + timedelta(minutes=1)  # the short pin has ended
    where = PartitionFilter(("ds",), ({"ds": "a"},))
    plan = build_plan(table, snapshot, listing, now=now, floor=1, floor_ms=0, oldest_available=0,
                      grace=timedelta(hours=1), where=where)
    assert plan.partitions == ({"ds": "a"},)
    assert plan.pinned_versions == (1, 2) and plan.expired_pins == (short.id,)
    before = build_plan(table, snapshot, listing, now=now - timedelta(minutes=2), floor=1, floor_ms=0,
                        oldest_available=0, grace=timedelta(hours=1), where=where)
    assert before.pinned_versions == (1, 1, 2) and before.expired_pins == ()


def test_the_pinned_bytes_are_those_only_the_pins_keep(tmp_path: Path) -> None:
    table = small_table(tmp_path / "t")
    table.overwrite(pa.table({"id": [2], "name": ["b"]}))
    table.overwrite(pa.table({"id": [3], "name": ["c"]}))
    snapshot = table.snapshot()
    listing = list_files(table)
    by_time = sorted(snapshot.tombstones.values(), key=lambda r: r.deletion_time)
    first, second = by_time[0].deletion_time, by_time[1].deletion_time
    size = listing[by_time[1].path].size

    def plan(floor_ms: int, unpinned: int | None) -> ReclaimPlan:
        return build_plan(table, snapshot, listing, now=NOW, floor=1, floor_ms=floor_ms, oldest_available=0,
                          grace=timedelta(hours=1), where=PartitionFilter(()), unpinned_floor_ms=unpinned)

    assert plan(first, second).pinned_bytes == size
    assert plan(first, first).pinned_bytes == 0  # no newer floor without the pins
    assert plan(second, first).pinned_bytes == 0
    assert plan(first, None).pinned_bytes == 0


# -- the report -------------------------------------------------------------------------------------------------------


def test_a_dry_run_report_counts_what_the_plan_would_delete(tmp_path: Path) -> None:
    table = small_table(tmp_path / "t")
    ref = lambda p, b: FileRef(path=p, bytes=b)  # noqa: E731
    plan = plan_of(table, log_files=(ref("_log/a", 1), ref("_log/b", 2)), data_files=(ref("d1", 10),),
                   orphan_files=(ref("o1", 100), ref("o2", 200), ref("o3", 300)), oldest_retained_version=2,
                   oldest_available_version=1, retain_hours=5, partitions=({"ds": "a"},), orphans_within_grace=4,
                   unknown_files=6, pinned_versions=(2,), pinned_bytes=7, checkpoint_needed=True)
    report = report_of(plan, dry_run=True)
    assert report.model_dump() == {
        "table": table.uri, "dry_run": True, "operation": "reclaim", "now": NOW, "retain_hours": 5,
        "latest_version": table.version, "oldest_retained_version": 2, "versions_expired": 1,
        "checkpoint_written": 2, "purge_version": None, "expire_version": None, "pinned_versions": (2,),
        "pinned_bytes": 7, "pins_removed": (), "partitions": ({"ds": "a"},),
        "log_files_deleted": 2, "log_bytes_deleted": 3, "data_files_deleted": 1, "data_bytes_deleted": 10,
        "orphan_files_deleted": 3, "orphan_bytes_deleted": 600, "orphans_within_grace": 4, "unknown_files_kept": 6,
        "nested_tables": (),
        "complete": True, "seconds": 0.0,
    }
    assert report_of(plan, dry_run=False).checkpoint_written is None  # a run reports the one it wrote
    assert report_of(plan.model_copy(update={"checkpoint_needed": False}), dry_run=True).checkpoint_written is None
    done = report_of(plan, dry_run=False, operation="purge", log_files_deleted=0, seconds=1.5)
    assert (done.operation, done.log_files_deleted, done.log_bytes_deleted, done.seconds) == ("purge", 0, 3, 1.5)


# -- the deletes -------------------------------------------------------------------------------------------------------


class FailingDeletes(LocalStorage):
    """Fails the delete of the given paths."""

    def __init__(self, uri: str, failing: set[str]) -> None:
        super().__init__(uri)
        self.failing = failing
        self.deleted: list[str] = []

    def delete(self, path: str) -> bool:
        if path in self.failing:
            raise OSError(f"cannot delete {path}")
        self.deleted.append(path)
        return super().delete(path)


def test_deletes_count_the_files_that_went_and_their_bytes(tmp_path: Path, messages: list[str]) -> None:
    table = small_table(tmp_path / "t")
    root = tmp_path / "t"
    gone = files(root, {"bucket-0/a.parquet": 3, "bucket-0/b.parquet": 5})
    already = (FileRef(path="bucket-0/never-there.parquet", bytes=7),)
    steps: list[str] = []
    deleter = engine._Deleter(table, steps.append)
    # deleted in bulk, without asking first: a file already gone (another run took it) counts as deleted
    assert deleter.delete(gone + already, "data") == (3, 15)
    assert steps == ["data", "data", "data"] and deleter.complete
    assert not any((root / f.path).exists() for f in gone)


def test_a_failed_delete_marks_the_run_incomplete_and_the_log_stops_there(tmp_path: Path,
                                                                         messages: list[str]) -> None:
    root = tmp_path / "t"
    small_table(root)
    refs = files(root, {"x/a": 1, "x/b": 2, "x/c": 4})
    storage = FailingDeletes(str(root), {"x/b"})
    table = Table(storage)
    steps: list[str] = []
    deleter = engine._Deleter(table, steps.append)
    assert deleter.delete(refs, "data") == (2, 5)  # the others still go
    assert not deleter.complete and steps == ["data", "data"]
    assert messages[-1] == f"table {table.uri}: could not delete x/b (cannot delete x/b); the next reclamation retries"

    refs = files(root, {"x/a": 1, "x/b": 2, "x/c": 4})
    deleter = engine._Deleter(table, steps.append)
    assert deleter.delete(refs, "log", in_order=True) == (1, 1)  # nothing after the failure
    assert not deleter.complete and (root / "x/c").exists()
    assert messages[-1] == (f"table {table.uri}: could not delete x/b (cannot delete x/b); the next reclamation "
                            "retries, and deletes nothing after it now")


def test_a_run_whose_log_step_failed_deletes_no_data_files_and_leaves_the_watermark(tmp_path: Path) -> None:
    root = tmp_path / "t"
    small_table(root)
    log_refs = files(root, {"_log/stray-1": 1, "_log/stray-2": 2})
    data = files(root, {"x/d": 5})
    orphans = files(root, {"x/o": 9})
    table = Table(FailingDeletes(str(root), {"_log/stray-1"}))
    plan = plan_of(table, log_files=log_refs, data_files=data, orphan_files=orphans, oldest_retained_version=1,
                   retained_timestamp=123)
    report = execute_plan(table, plan)
    assert (root / "_log/stray-2").exists()  # the log step stops at the first it cannot delete
    assert (root / "x/d").exists() and not (root / "x/o").exists()  # orphans still go
    assert (report.log_files_deleted, report.data_files_deleted, report.orphan_files_deleted) == (0, 0, 1)
    assert (report.log_bytes_deleted, report.data_bytes_deleted, report.orphan_bytes_deleted) == (0, 0, 9)
    assert not report.complete and table.log.reclaimed_watermark() is None
    assert report.operation == "reclaim"  # the default


def test_a_complete_run_reports_what_it_deleted_and_advances_the_watermark(tmp_path: Path,
                                                                           messages: list[str]) -> None:
    root = tmp_path / "t"
    table = small_table(root)
    log_refs = files(root, {"_log/stray-1": 1, "_log/stray-2": 2})
    data = files(root, {"x/d": 5})
    orphans = files(root, {"x/o": 9})
    table.log.write_checkpoint(table.snapshot(1))  # the checkpoint the deleted log files stand in for
    plan = plan_of(table, log_files=log_refs, data_files=data, orphan_files=orphans, oldest_retained_version=1,
                   retained_timestamp=123)
    steps: list[str] = []
    report = execute_plan(table, plan, on_step=steps.append, operation="purge", started=0.0)
    assert steps == ["log", "log", "data", "orphan", "watermark"]
    assert (report.log_files_deleted, report.log_bytes_deleted, report.data_files_deleted, report.data_bytes_deleted,
            report.orphan_files_deleted, report.orphan_bytes_deleted) == (2, 3, 1, 5, 1, 9)
    assert report.complete and report.operation == "purge" and not report.dry_run
    assert report.checkpoint_written is None and report.seconds > 0
    assert (table.log.reclaimed_version(), table.log.reclaimed_watermark()) == (1, 123)
    assert messages[-1] == (f"table {table.uri}: purge deleted 2 log, 1 data and 1 orphan file(s) (17 bytes); "
                            "oldest retained version 1")


@pytest.mark.parametrize(("advance", "partitions"), [(False, ()), (True, ({"id": "1"},))])
def test_the_watermark_stays_when_not_asked_for_or_for_some_partitions(tmp_path: Path, advance: bool,
                                                                       partitions: tuple[dict[str, str], ...]
                                                                       ) -> None:
    table = small_table(tmp_path / "t")
    plan = plan_of(table, oldest_retained_version=1, retained_timestamp=123, partitions=partitions)
    steps: list[str] = []
    assert execute_plan(table, plan, on_step=steps.append, advance_watermark=advance).complete
    assert table.log.reclaimed_watermark() is None and steps == []


def test_a_run_writes_the_checkpoint_its_log_step_needs_first(tmp_path: Path) -> None:
    table = small_table(tmp_path / "t")
    table.upsert(pa.table({"id": [2], "name": ["b"]}))
    plan = plan_of(table, log_files=(FileRef(path=commit_path(0), bytes=1),), oldest_retained_version=1,
                   checkpoint_needed=True)
    steps: list[str] = []
    report = execute_plan(table, plan, on_step=steps.append)
    assert steps[:2] == ["checkpoint", "log"] and report.checkpoint_written == 1
    assert table.log.checkpoint_exists(1) and not table.log.commit_exists(0)


def test_a_checkpoint_another_run_made_unneeded_leaves_the_log_to_that_run(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch,
                                                                           messages: list[str]) -> None:
    table = small_table(tmp_path / "t")
    plan = plan_of(table, log_files=(FileRef(path=commit_path(0), bytes=1),), oldest_retained_version=1,
                   checkpoint_needed=True)

    def reclaimed(version: int | None = None) -> object:
        raise VersionNotFoundError("gone", latest=1, oldest_retained=2)

    monkeypatch.setattr(table, "snapshot", reclaimed)
    steps: list[str] = []
    report = execute_plan(table, plan, on_step=steps.append, advance_watermark=False)
    assert report.checkpoint_written is None and report.log_files_deleted == 0 and table.log.commit_exists(0)
    assert steps == [] and report.complete
    assert f"table {table.uri}: version 1 was reclaimed concurrently; its log is left to that run" in messages


def test_the_last_check_keeps_planned_orphans_the_newest_state_references_even_as_tombstones(tmp_path: Path) -> None:
    root = tmp_path / "t"
    table = small_table(root)
    (live,) = table.snapshot().files
    table.overwrite(pa.table({"id": [2], "name": ["b"]}))
    (newer,) = table.snapshot().files
    orphans = (FileRef(path=live, bytes=1), FileRef(path=newer, bytes=1), *files(root, {"x/o": 9}))
    report = execute_plan(table, plan_of(table, orphan_files=orphans), advance_watermark=False)
    assert report.orphan_files_deleted == 1 and (root / live).exists() and (root / newer).exists()
    assert report.orphan_bytes_deleted == 9  # the files kept are not counted


def test_a_run_reports_the_seconds_since_the_start_it_is_given_to_the_millisecond(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = small_table(tmp_path / "t")
    monkeypatch.setattr(engine.time, "monotonic", lambda: 100.0)
    report = execute_plan(table, plan_of(table), advance_watermark=False, started=98.7654)
    assert report.seconds == 1.235
