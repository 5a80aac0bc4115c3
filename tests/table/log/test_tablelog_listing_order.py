"""Listing order is a property of the store, checked, not assumed (docs/format.md, "Latest-version lookup").

The latest-version lookup on object stores takes the first commit name of a lexical listing. Stores exist that
do not list in lexical order (S3 Express One Zone directory buckets, some S3-compatible servers): there a reader
took version 0 for the latest of a table at version 5, and reclamation then deleted all its live files as
orphans. The test S3 server answers a bucket's listings in no lexical order when asked to (tests/s3app.py).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from maintd import Table
from maintd.errors import StorageConfigError, StorageError
from maintd.reclaim import reclaim_table
from maintd.storage import configure_storage, storage_for_uri
from maintd.storage.objectstore import listing_order
from maintd.table.log.tablelog import TableLog

ROWS = [{"id": i, "v": f"row {i}"} for i in range(12)]


def written(uri: str, commits: int = 12) -> Table:
    """A table with one row per commit, a checkpoint every 5 commits: more than 8 names in ``_log/``."""
    table = Table.create(uri, "id:int64!,v:string", primary_key="id", buckets=2,
                         properties={"log.checkpoint.interval": 5, "acid.data.retain.hours": 0})
    for row in ROWS[:commits]:
        table.upsert(pa.Table.from_pylist([row]))
    return table


def unordered_bucket(s3_server: Any, **options: str) -> str:
    bucket = s3_server.create_bucket()
    configure_storage(f"s3://{bucket}", {**s3_server.options, **options})
    return bucket


@pytest.mark.parametrize(("bucket", "option", "lexical"), [
    ("plain", None, True), ("plain", "auto", True), ("plain", "lexical", True), ("plain", "unordered", False),
    ("data--usw2-az1--x-s3", None, False), ("data--usw2-az1--x-s3", "unordered", False),
])
def test_directory_buckets_and_the_listing_order_option_decide_whether_names_list_in_order(
        bucket: str, option: str | None, lexical: bool) -> None:
    options = {} if option is None else {"listing_order": option}
    assert listing_order(f"s3://{bucket}/t", "s3", bucket, options) is lexical


def test_a_directory_bucket_said_to_list_in_order_and_an_unknown_order_are_refused_naming_the_option() -> None:
    with pytest.raises(StorageConfigError, match=r"listing_order=lexical, but .* is an S3 directory bucket"):
        listing_order("s3://d--use1-az4--x-s3/t", "s3", "d--use1-az4--x-s3", {"listing_order": "lexical"})
    with pytest.raises(StorageConfigError, match=r"listing_order is 'sorted'; use one of auto, lexical, unordered"):
        listing_order("s3://b/t", "s3", "b", {"listing_order": "sorted"})


def test_tables_on_a_bucket_that_lists_in_no_order_read_their_latest_version(s3_server: Any) -> None:
    bucket = unordered_bucket(s3_server)
    counts = {"t0": 12, "t1": 9, "t2": 11, "t3": 7}
    for name, commits in counts.items():
        written(f"s3://{bucket}/{name}", commits)
    s3_server.set_modes(bucket, unordered=True)
    for name, commits in counts.items():  # storages that were never told: the listing shows it
        table = Table.open(f"s3://{bucket}/{name}")
        assert (table.version, table.read().num_rows) == (commits, commits), name
    assert storage_for_uri(f"s3://{bucket}/other").lists_in_order is False  # the bucket, for the whole process


def test_a_table_on_a_store_configured_as_unordered_never_asks_for_the_first_names(s3_server: Any,
                                                                                  monkeypatch: pytest.MonkeyPatch
                                                                                  ) -> None:
    bucket = unordered_bucket(s3_server, listing_order="unordered")
    written(f"s3://{bucket}/t")
    s3_server.set_modes(bucket, unordered=True)
    table = Table.open(f"s3://{bucket}/t")
    monkeypatch.setattr(table.storage, "list_first", lambda *a: pytest.fail("an ordered listing was relied on"))
    assert TableLog(table.storage).latest_version() == 12
    assert table.read().num_rows == 12
    table.upsert(pa.Table.from_pylist([{"id": 99, "v": "new"}]))
    assert Table.open(f"s3://{bucket}/t").read().num_rows == 13


def test_reclamation_on_a_bucket_that_lists_in_no_order_keeps_every_live_file(s3_server: Any) -> None:
    bucket = unordered_bucket(s3_server)
    table = written(f"s3://{bucket}/t", commits=5)
    live = set(table.snapshot().files)
    s3_server.set_modes(bucket, unordered=True)
    report = reclaim_table(Table.open(f"s3://{bucket}/t"), orphan_grace=timedelta(0), force_short_grace=True,
                           now=datetime.now(UTC) + timedelta(hours=1))
    assert report.orphan_files_deleted == 0 and report.latest_version == 5
    reopened = Table.open(f"s3://{bucket}/t")
    assert set(reopened.snapshot().files) == live and reopened.read().num_rows == 5


def test_reclamation_refuses_to_delete_anything_when_its_listing_shows_a_commit_the_lookup_missed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever the lookup: a listing (taken first) that shows commits after the version the lookup found means
    the lookup was wrong, and every file of those versions would look like an orphan."""
    table = written(str(tmp_path / "t"), commits=5)
    files = {p: (tmp_path / "t" / p).stat().st_size for p in table.snapshot().files}
    monkeypatch.setattr(TableLog, "latest_version", lambda self, hint=None: 0)  # a lookup that answers wrong
    with pytest.raises(StorageError, match=r"listing shows commit 5, newer than version 0.*nothing was deleted"):
        reclaim_table(Table.open(str(tmp_path / "t")), orphan_grace=timedelta(0), force_short_grace=True,
                      now=datetime.now(UTC) + timedelta(hours=1))
    assert all((tmp_path / "t" / p).stat().st_size == size for p, size in files.items())
