"""The public API: what ``maintd`` exports, and the ``Table`` methods as the format promises them."""

from __future__ import annotations

import importlib
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import maintd
from maintd import (
    CommitConflictError,
    CommitRecord,
    InvalidInputError,
    MaintdError,
    Snapshot,
    Table,
    TableExistsError,
    TableNotFoundError,
)
from maintd.table.files.schema import OP_COLUMN, OP_DELETE, VERSION_COLUMN

from .table_helpers import groups, rewrite_bucket, sorted_rows

SCHEMA = "id:int64!,name:string,ds:string"


def test_every_public_name_is_importable_and_errors_share_one_root() -> None:
    module = importlib.import_module("maintd")
    assert len(set(maintd.__all__)) == len(maintd.__all__)
    for name in maintd.__all__:
        assert hasattr(module, name), name
        obj = getattr(module, name)
        if isinstance(obj, type) and name.endswith("Error"):
            assert issubclass(obj, MaintdError), name
    conflicts = ["ProtocolChangedError", "MetadataChangedError", "ConcurrentTransactionError",
                 "ConcurrentAppendError", "ConcurrentDeleteReadError", "ConcurrentDeleteDeleteError"]
    assert all(issubclass(getattr(maintd, c), CommitConflictError) for c in conflicts)
    namespace: dict[str, object] = {}
    exec("from maintd import *", namespace)
    assert set(maintd.__all__) <= set(namespace)


@pytest.fixture
def table(tmp_path: Path) -> Table:
    return Table.create(str(tmp_path / "t"), SCHEMA, primary_key="id", partition_by="ds", buckets=4)


def test_create_writes_version_zero_with_the_layout_and_properties(tmp_path: Path) -> None:
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string()), ("ds", pa.string())])
    table = Table.create(str(tmp_path / "t"), schema, primary_key=["id"], partition_by=["ds"], buckets=8,
                         properties={"isolation.level": "Serializable", "maintd.compaction.enabled": "false"})
    assert table.version == 0
    md = Table.open(f"file://{tmp_path}/t").metadata
    assert (md.primary_key, md.partition_by, md.buckets) == (("id",), ("ds",), 8)
    assert [(f.name, f.type, f.nullable) for f in md.fields] == [
        ("id", "int64", False), ("name", "string", True), ("ds", "string", True)]
    assert md.properties == {"write.bucket.num": "8", "isolation.level": "Serializable",
                             "maintd.compaction.enabled": "false"}
    assert table.history()[0].operation == "CREATE TABLE"
    with pytest.raises(TableExistsError, match="already exists"):
        Table.create(str(tmp_path / "t"), SCHEMA, primary_key="id")


def test_open_a_location_without_a_table(tmp_path: Path) -> None:
    with pytest.raises(TableNotFoundError, match="no table at"):
        Table.open(str(tmp_path / "nothing"))


def test_writes_return_the_committed_version_and_read_merges_them(table: Table) -> None:
    assert table.upsert(pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"], "ds": ["x", "x", "y"]})) == 1
    assert table.upsert(pd.DataFrame({"id": [2], "name": ["B"], "ds": ["x"]})) == 2
    assert table.delete(pd.DataFrame({"id": [3], "ds": ["y"]})) == 3
    assert table.overwrite(pd.DataFrame({"id": [7], "name": ["z"], "ds": ["y"]}), partition={"ds": "y"}) == 4
    assert table.set_properties({"acid.data.retain.hours": 48}) == 5
    assert table.version == 5
    assert sorted_rows(table.read(), ["ds", "id"]) == [
        {"id": 1, "name": "a", "ds": "x"}, {"id": 2, "name": "B", "ds": "x"}, {"id": 7, "name": "z", "ds": "y"}]
    assert table.read(columns=["name"]).column_names == ["name"]
    assert table.metadata.properties["acid.data.retain.hours"] == "48"
    assert table.overwrite(pa.table({"id": [9], "name": ["w"], "ds": ["q"]})) == 6  # the whole table
    assert table.read().to_pylist() == [{"id": 9, "name": "w", "ds": "q"}]


def test_delete_accepts_a_list_of_keys_on_a_single_column_key(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "t"), "id:int64!,name:string", primary_key="id")
    table.upsert([{"id": 1, "name": "a"}, {"id": 2, "name": "b"}, {"id": 3, "name": "c"}])
    table.delete([1, 3, 99])
    assert table.read().to_pylist() == [{"id": 2, "name": "b"}]


def test_snapshot_lists_the_live_files_with_their_statistics(table: Table) -> None:
    table.upsert(pa.table({"id": [1, 2, 3, 4], "name": ["a", "b", "c", "d"], "ds": ["x"] * 4}))
    v = table.delete(pa.table({"id": [2], "ds": ["x"]}))
    snap = table.snapshot()
    assert isinstance(snap, Snapshot) and snap.version == v and table.snapshot(1).version == 1
    files = list(snap.files.values())
    assert sum(f.rows for f in files) == 5 and sum(f.delete_rows for f in files) == 1
    for f in files:
        path = Path(table.uri) / f.path
        assert f.bytes == path.stat().st_size and f.partition == {"ds": "x"} and 0 <= f.bucket < 4
        assert f.path.startswith(f"ds=x/bucket-{f.bucket:05d}/delta-L0-")
        assert (f.kind, f.level, f.data_change) == ("delta", 0, True)
        assert f.min_version == f.max_version and f.min_commit_time == f.max_commit_time
        assert f.key_min is not None and f.key_max is not None and f.key_min <= f.key_max
        written = pq.read_table(path)
        assert OP_COLUMN in written.column_names and VERSION_COLUMN not in written.column_names
        assert written.num_rows == f.rows
    delete_file = next(f for f in files if f.delete_rows)
    assert delete_file.min_version == v
    assert pq.read_table(Path(table.uri) / delete_file.path).column(OP_COLUMN).to_pylist() == [OP_DELETE]


def test_history_lists_commits_newest_first(table: Table) -> None:
    table.upsert(pa.table({"id": [1], "name": ["a"], "ds": ["x"]}))
    table.set_properties({"maintd.owner": "team"})
    snap = table.snapshot()
    prepared = rewrite_bucket(table, snap, groups(snap)[0], "compact")
    assert prepared is not None
    prepared.commit()
    history = table.history()
    assert all(isinstance(r, CommitRecord) for r in history)
    assert [(r.version, r.operation, r.data_change) for r in history] == [
        (3, "OPTIMIZE", False), (2, "SET PROPERTIES", True), (1, "UPSERT", True), (0, "CREATE TABLE", True)]
    assert history[2].read_version == 0 and history[2].files_added == 1 and history[2].metrics["rows"] == 1
    assert history[0].files_removed == 1 and history[0].isolation_level == "WriteSerializable"
    assert [r.version for r in table.history(limit=2)] == [3, 2]
    assert history[0].time.timestamp() * 1000 == pytest.approx(history[0].timestamp)


def test_changes_report_writers_changes_and_ignore_maintenance(table: Table) -> None:
    table.upsert(pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"], "ds": ["x", "x", "x"]}))
    table.upsert(pa.table({"id": [1, 4], "name": ["A", "d"], "ds": ["x", "x"]}))
    v = table.delete(pa.table({"id": [2], "ds": ["x"]}))
    changes = table.changes(1)
    assert changes.column_names == ["id", "name", "ds", "_change", "_change_version"]
    assert sorted_rows(changes, ["id"]) == [
        {"id": 1, "name": "A", "ds": "x", "_change": "update", "_change_version": 2},
        {"id": 2, "name": "b", "ds": "x", "_change": "delete", "_change_version": None},
        {"id": 4, "name": "d", "ds": "x", "_change": "insert", "_change_version": 2},
    ]
    snap = table.snapshot()
    for group in groups(snap):
        prepared = rewrite_bucket(table, table.snapshot(), group, "compact")
        assert prepared is not None
        prepared.commit()
    assert table.version > v
    assert table.changes(v).num_rows == 0, "maintenance commits change no rows"
    assert sorted_rows(table.changes(1), ["id"]) == sorted_rows(changes, ["id"])
    with pytest.raises(InvalidInputError, match="after end version"):
        table.changes(3, 1)


@pytest.mark.parametrize("commits", [7, 8, 9, 23])
def test_a_bucket_of_many_level0_files_reads_the_newest_row_of_each_key(tmp_path: Path, commits: int) -> None:
    """Every commit rewrites the same keys; the read (files decoded on threads from 8 files on) must keep the
    newest row of each key and drop a key whose newest row is a delete, whatever the file count."""
    table = Table.create(str(tmp_path / "t"), "id:int64!,v:int64", primary_key="id", buckets=1)
    for c in range(commits):
        table.upsert(pa.table({"id": list(range(10)), "v": [c * 100 + k for k in range(10)]}))
    table.delete(pa.table({"id": [3]}))
    assert len(table.snapshot().files) == commits + 1
    assert table.read().sort_by("id").to_pylist() == [
        {"id": k, "v": (commits - 1) * 100 + k} for k in range(10) if k != 3]
