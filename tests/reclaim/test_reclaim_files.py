"""The pure rules of which file reclamation may delete."""

from __future__ import annotations

import pytest

from maintd import InvalidInputError
from maintd.reclaim.files import PartitionFilter, is_maintd_file, log_files_below
from maintd.storage import FileInfo
from maintd.table.log import checkpoint_path, commit_path

HEX = "0123456789abcdef" * 2


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
