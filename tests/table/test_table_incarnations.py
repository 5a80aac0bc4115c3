"""A writer never publishes above a gap or into another incarnation of its table (docs/format.md, "A writer's
next write").

A writer that commits continuously prepares each write on the commit it made last, without a lookup. When the
table is dropped and created again (or rolled back to an older copy) meanwhile, that state names a version the
table no longer has. Publishing the next version there put a commit file above a gap: on S3 the newest name in
the listing, and the table was unreadable for everyone; on a local disk the commit was adopted once the new table
grew to it, and the stale writer's row appeared in the new table.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from stores import TableStore

from maintd import Table
from maintd.errors import TableReplacedError
from maintd.storage import storage_for_uri
from maintd.table.log.landing import Attempt
from maintd.table.log.tablelog import LOG_DIR, parse_log_name

SCHEMA = "id:int64!,v:string"


def rows(table: Table) -> dict[int, str]:
    return {r["id"]: r["v"] for r in table.read().to_pylist()}


def upsert(table: Table, key: int, value: str) -> int:
    return table.upsert(pa.Table.from_pylist([{"id": key, "v": value}]))


def commits(uri: str) -> list[int]:
    return sorted(p[1] for p in (parse_log_name(f.path) for f in storage_for_uri(uri).list_dir(LOG_DIR))
                  if p is not None and p[0] == "commit")


def drop(uri: str) -> None:
    """Drop the table as a user would: delete everything below its root."""
    storage = storage_for_uri(uri)
    for f in storage.walk():
        storage.delete(f.path)


@pytest.fixture
def root(table_store: TableStore) -> str:
    """A fresh root for tables, on each store in turn (``table_store``, tests/conftest.py)."""
    return table_store.root


def test_a_writer_whose_table_was_dropped_and_created_again_writes_into_the_new_table_only(root: str) -> None:
    uri = f"{root}/t"
    stale = Table.create(uri, SCHEMA, primary_key="id", buckets=1)
    for i in range(5):
        upsert(stale, i, "old")  # each prepared on the commit before: versions 1..5
    drop(uri)
    fresh = Table.create(uri, SCHEMA, primary_key="id", buckets=1)
    upsert(fresh, 100, "new")
    upsert(fresh, 101, "new")

    version = upsert(stale, 7, "stale writer, new table")  # prepared on version 5 of the dropped table
    assert version == 3 and commits(uri) == [0, 1, 2, 3]
    assert rows(Table.open(uri)) == {100: "new", 101: "new", 7: "stale writer, new table"}
    for i in range(4):  # the new table grows past the versions of the dropped one: nothing of it comes back
        upsert(fresh, 200 + i, "new")
    assert commits(uri) == list(range(8))
    assert set(rows(Table.open(uri))) == {100, 101, 7, 200, 201, 202, 203}


def test_a_writer_whose_table_was_rolled_back_writes_after_the_restored_version(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table = Table.create(uri, SCHEMA, primary_key="id", buckets=1)
    for i in range(3):
        upsert(table, i, "kept")
    backup = tmp_path / "backup"
    shutil.copytree(tmp_path / "t" / LOG_DIR, backup)
    for i in range(3, 5):
        upsert(table, i, "rolled back")
    shutil.rmtree(tmp_path / "t" / LOG_DIR)
    shutil.copytree(backup, tmp_path / "t" / LOG_DIR)  # restored to version 3

    assert upsert(table, 9, "after the restore") == 4
    assert commits(uri) == [0, 1, 2, 3, 4]
    assert rows(Table.open(uri)) == {0: "kept", 1: "kept", 2: "kept", 9: "after the restore"}


def test_a_transaction_that_read_another_incarnation_of_its_table_fails_and_lands_nothing(root: str) -> None:
    uri = f"{root}/t"
    table = Table.create(uri, SCHEMA, primary_key="id", buckets=1)
    upsert(table, 1, "old")
    txn = table.new_transaction("SET PROPERTIES", read_snapshot=table.snapshot())
    txn.set_metadata(table.snapshot().metadata.model_copy(update={"name": "renamed"}))
    drop(uri)
    Table.create(uri, SCHEMA, primary_key="id", buckets=1)
    upsert(Table.open(uri), 2, "new")
    with pytest.raises(TableReplacedError, match=r"dropped and created again, or rolled back.*nothing of it landed"):
        txn.commit()
    assert commits(uri) == [0, 1] and Table.open(uri).snapshot().metadata.name is None


def test_a_publish_that_lands_above_a_gap_after_all_is_taken_back(root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The table is dropped and created again between the writer's look at its base and its publish: the landing
    check finds that the table does not reach the version published, takes the file back and writes again."""
    uri = f"{root}/t"
    stale = Table.create(uri, SCHEMA, primary_key="id", buckets=1)
    for i in range(4):
        upsert(stale, i, "old")
    drop(uri)
    Table.create(uri, SCHEMA, primary_key="id", buckets=1)
    real: Any = Attempt.base_stands
    looks: list[bool] = []

    def stood_a_moment_ago(self: Attempt) -> bool:
        looks.append(real(self))
        return len(looks) == 1 or looks[-1]  # the first look passed: the drop came right after it

    monkeypatch.setattr(Attempt, "base_stands", stood_a_moment_ago)
    assert upsert(stale, 9, "stale") == 1
    assert commits(uri) == [0, 1] and rows(Table.open(uri)) == {9: "stale"}
