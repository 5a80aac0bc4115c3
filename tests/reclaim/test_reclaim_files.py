"""The pure rules of which file reclamation may delete."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from maintd import InvalidInputError, Table
from maintd.reclaim.files import (
    SKEW_MS,
    PartitionFilter,
    find_orphans,
    is_maintd_file,
    log_files_below,
    missing_live_files,
)
from maintd.storage import FileInfo
from maintd.table.log.tablelog import checkpoint_path, commit_path

HEX = "0123456789abcdef" * 2
HEX2 = "fedcba9876543210" * 2
NOW_MS = 1_800_000_000_000
GRACE_MS = 3_600_000


@pytest.mark.parametrize(("path", "ours"), [
    (f"ds=a/bucket-00001/delta-L0-{HEX}.parquet", True),
    (f"bucket-00000/delta-L2-{HEX}.parquet", True),
    (f"ds=a/bucket-00001/base-{HEX}.parquet", True),
    ("ds=a/bucket-00001/.tmp-5b1c", True),
    ("ds=a/bucket-00001/part-0000.parquet", False),
    (f"ds=a/bucket-00001/base-{HEX}.parquet.bak", False),
    ("ds=a/README.md", False),
])
def test_only_names_maintd_writes_count_as_its_files(path: str, ours: bool) -> None:
    assert is_maintd_file(path) is ours


def test_a_partition_filter_matches_files_by_their_quoted_directories() -> None:
    where = PartitionFilter.of(("ds", "region"), [{"region": "eu west"}], table="t")
    assert where.matches({"ds": "1", "region": "eu west"}) and not where.matches({"ds": "1", "region": "us"})
    assert where.matches_path(f"ds=2026-01-01/region=eu%20west/bucket-00000/base-{HEX}.parquet")
    assert not where.matches_path(f"ds=2026-01-01/region=us/bucket-00000/base-{HEX}.parquet")
    assert not where.matches_path(f"bucket-00000/base-{HEX}.parquet")
    assert PartitionFilter.of(("ds",), [], table="t").matches_path("anything")


def test_a_partition_filter_names_what_is_wrong() -> None:
    with pytest.raises(InvalidInputError, match="not partitioned"):
        PartitionFilter.of((), [{"ds": "1"}], table="t")
    with pytest.raises(InvalidInputError, match="hour is not a partition column; the partition columns are ds"):
        PartitionFilter.of(("ds",), [{"hour": "1"}], table="t")


def test_expired_checkpoints_go_first_then_the_commits_oldest_first() -> None:
    """No checkpoint below the oldest retained version is left to replay from while its commits go, so a
    commit published into the removed history by a late writer is never read as a version of the table."""
    names = [commit_path(v) for v in (4, 0, 2, 3, 1, 5)] + [checkpoint_path(v) for v in (2, 4, 1)] + [
        "_log/_last_checkpoint", "_log/.tmp-1"]
    listing = {n: FileInfo(n, 10, 0) for n in names}
    picked = [f.path for f in log_files_below(listing, 4)]
    assert picked == [checkpoint_path(1), checkpoint_path(2)] + [commit_path(v) for v in range(4)]


def test_a_file_at_the_table_root_is_judged_by_its_name_too() -> None:
    assert is_maintd_file(f"base-{HEX}.parquet") and is_maintd_file(".tmp-5b1c")
    assert not is_maintd_file("part-0000.parquet")


def test_an_empty_partition_spec_is_skipped_and_the_specs_after_it_still_apply() -> None:
    where = PartitionFilter.of(("ds",), [{}, {"ds": "a"}], table="t")
    assert where.specs == ({"ds": "a"},) and not where.everything
    assert not where.matches({"ds": "b"})


def test_a_partition_filter_names_every_unknown_column_and_every_partition_column() -> None:
    with pytest.raises(InvalidInputError, match="hour, minute is not a partition column; "
                                                "the partition columns are ds, region"):
        PartitionFilter.of(("ds", "region"), [{"minute": "1", "hour": "1", "ds": "a"}], table="t")


def test_a_null_partition_value_selects_the_null_partition_and_no_other() -> None:
    where = PartitionFilter.of(("ds",), [{"ds": None}], table="t")
    assert where.specs == ({"ds": None},)
    assert where.matches({"ds": None}) and not where.matches({"ds": "None"})
    assert where.matches_path(f"ds=__NULL__/bucket-00000/base-{HEX}.parquet")
    assert not where.matches_path(f"ds=None/bucket-00000/base-{HEX}.parquet")


def test_a_directory_naming_another_column_is_in_no_partition() -> None:
    where = PartitionFilter.of(("ds",), [{"ds": None}], table="t")
    assert not where.matches_path(f"region=eu/bucket-00000/base-{HEX}.parquet")


def test_a_partition_directory_splits_at_its_first_equals_sign() -> None:
    where = PartitionFilter.of(("ds",), [{"ds": "a=b"}], table="t")
    assert where.matches_path(f"ds=a=b/bucket-00000/base-{HEX}.parquet")


def listing_of(ages: dict[str, int]) -> dict[str, FileInfo]:
    """A listing of files by path, each last modified ``ages[path]`` ms before :data:`NOW_MS`."""
    return {p: FileInfo(p, 10, NOW_MS - age) for p, age in ages.items()}


def test_orphans_count_every_unknown_name_and_every_young_file_and_keep_those_exactly_at_the_grace(
        tmp_path: Path) -> None:
    snapshot = Table.create(str(tmp_path / "t"), "id:int64!,ds:string", primary_key="id", partition_by="ds",
                            buckets=1).snapshot()
    listing = listing_of({
        "_log/notes.txt": 0,  # unknown
        commit_path(0): 10 * GRACE_MS,  # a log name: neither unknown nor an orphan
        "_log/_last_checkpoint": 10 * GRACE_MS,
        "_log/junk": 0,  # unknown
        "README.md": 0,  # unknown
        "ds=a/notes.txt": 10 * GRACE_MS,  # unknown, however old
        f"ds=a/bucket-00000/base-{HEX}.parquet": GRACE_MS,  # exactly at the grace: young
        f"ds=a/bucket-00000/delta-L0-{HEX2}.parquet": 1,  # young
        "ds=a/bucket-00000/.tmp-1": GRACE_MS + 1,  # past the grace: an orphan
        "_log/.tmp-2": GRACE_MS + 1,  # a temporary file in the log: an orphan
    })
    found = find_orphans(snapshot, listing, NOW_MS, GRACE_MS, PartitionFilter(("ds",)))
    assert [f.path for f in found.files] == ["_log/.tmp-2", "ds=a/bucket-00000/.tmp-1"]
    assert (found.within_grace, found.unknown) == (2, 4)


def test_orphans_of_a_partition_filter_are_only_that_partitions_files(tmp_path: Path) -> None:
    snapshot = Table.create(str(tmp_path / "t"), "id:int64!,ds:string", primary_key="id", partition_by="ds",
                            buckets=1).snapshot()
    listing = listing_of({
        f"ds=a/bucket-00000/base-{HEX}.parquet": 10 * GRACE_MS,  # another partition: kept, not counted
        f"ds=b/bucket-00000/base-{HEX}.parquet": 10 * GRACE_MS,
        "_log/.tmp-1": 10 * GRACE_MS,  # the log is no partition's
        f"ds=b/bucket-00000/delta-L0-{HEX2}.parquet": 1,
    })
    where = PartitionFilter.of(("ds",), [{"ds": "b"}], table="t")
    found = find_orphans(snapshot, listing, NOW_MS, GRACE_MS, where)
    assert [f.path for f in found.files] == [f"ds=b/bucket-00000/base-{HEX}.parquet"]
    assert (found.within_grace, found.unknown) == (1, 0)


def test_a_missing_live_file_is_damage_only_once_committed_more_than_the_clock_skew_before_the_listing(
        tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "t"), "id:int64!", primary_key="id", buckets=1)
    table.upsert(pa.table({"id": [1]}))
    snapshot = table.snapshot()
    (path, added), = snapshot.files.items()
    listed_ms = added.modification_time + SKEW_MS
    assert missing_live_files(snapshot, {}, listed_ms) == []
    assert missing_live_files(snapshot, {}, listed_ms + 1) == [path]
    assert missing_live_files(snapshot, {path: FileInfo(path, 10, 0)}, listed_ms + 1) == []
