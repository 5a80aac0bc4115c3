"""Bad input: a clear error (a class of ``maintd.errors``) naming what is wrong, and nothing committed."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from maintd import (
    CorruptLogError,
    InvalidInputError,
    InvalidPropertyError,
    PrimaryKeyError,
    SchemaMismatchError,
    Table,
)
from maintd.table.log.tablelog import checkpoint_path, commit_path

from .table_helpers import data_files_on_disk

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("name", pa.string()), ("amount", pa.float64()),
                    ("ds", pa.string())])


@pytest.fixture
def table(tmp_path: Path) -> Iterator[Table]:
    """A table with one commit; after the test, nothing more must have been committed or written."""
    t = Table.create(str(tmp_path / "t"), SCHEMA, primary_key="id", partition_by="ds", buckets=2)
    t.upsert(pa.table({"id": [1], "name": ["a"], "amount": [1.0], "ds": ["x"]}))
    files, log = data_files_on_disk(tmp_path / "t"), sorted((tmp_path / "t" / "_log").iterdir())
    yield t
    assert Table.open(str(tmp_path / "t")).version == 1, "a rejected write must not commit"
    assert data_files_on_disk(tmp_path / "t") == files, "a rejected write must not leave data files"
    assert sorted((tmp_path / "t" / "_log").iterdir()) == log


ROW = {"id": 2, "name": "b", "amount": 2.0, "ds": "x"}


def _with(**changes: Any) -> pa.Table:
    row = ROW | changes
    return pa.Table.from_pylist([{k: v for k, v in row.items() if v is not ...}])


BAD_WRITES: list[tuple[str, Callable[[Table], object], type[Exception], str]] = [
    ("an unknown column", lambda t: t.upsert(_with(colour="red")), SchemaMismatchError,
     r"column\(s\) colour are not in the table schema"),
    ("a value that is not of the column type", lambda t: t.upsert(_with(amount="lots")), SchemaMismatchError,
     "column 'amount' has type string, expected double"),
    ("a missing column", lambda t: t.upsert(_with(name=...)), SchemaMismatchError, "column 'name'"),
    ("a missing primary key", lambda t: t.upsert(_with(id=...)), PrimaryKeyError, "lacks key column.*id"),
    ("a null primary key", lambda t: t.upsert(pa.Table.from_pylist([ROW, ROW | {"id": None}])), PrimaryKeyError,
     "key column 'id' has 1 null value"),
    ("a missing partition column", lambda t: t.upsert(_with(ds=...)), PrimaryKeyError, "partition columns ds"),
    ("a null partition value", lambda t: t.upsert(_with(ds=None)), PrimaryKeyError, "key column 'ds'"),
    ("a delete without the partition column", lambda t: t.delete(pa.table({"id": [1]})), PrimaryKeyError,
     "lacks key column.*ds"),
    ("a delete with an uncastable key", lambda t: t.delete(pa.table({"id": ["one"], "ds": ["x"]})),
     SchemaMismatchError, "column 'id'"),
    ("an overwrite with rows outside its partition",
     lambda t: t.overwrite(_with(ds="y"), partition={"ds": "x"}), InvalidInputError, "1 row.*have ds != 'x'"),
    ("an overwrite naming an unknown partition column",
     lambda t: t.overwrite(_with(), partition={"day": "x"}), InvalidInputError, "must name exactly the partition"),
    ("data that is not a table", lambda t: t.upsert("id=2"), InvalidInputError, "expected a pyarrow.Table"),
    ("an empty batch", lambda t: t.upsert([]), InvalidInputError, "the batch is empty"),
    ("unknown columns to read", lambda t: t.read(columns=["colour"]), InvalidInputError, "unknown column.*colour"),
    ("an unknown property", lambda t: t.set_properties({"retain.hours": 5}), InvalidPropertyError,
     "unknown property 'retain.hours'; known properties are acid.data.retain.hours"),
    ("a bucket count change", lambda t: t.set_properties({"write.bucket.num": 4}), InvalidPropertyError,
     "write.bucket.num is fixed after create"),
]


@pytest.mark.parametrize(("what", "call", "error", "message"), BAD_WRITES, ids=[b[0] for b in BAD_WRITES])
def test_bad_writes_are_refused_with_a_clear_error(table: Table, what: str, call: Callable[[Table], object],
                                                   error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message) as caught:
        call(table)
    if what != "unknown columns to read":  # a read names only the columns
        assert table.uri in str(caught.value), "the message names the table"


PROPERTY_VALUES = [
    ("acid.data.retain.hours", -1, "from 0 to 168"), ("acid.data.retain.hours", 169, "from 0 to 168"),
    ("acid.data.retain.hours", "a day", "is not an integer"), ("write.bucket.num", 0, "from 1 to 4096"),
    ("write.bucket.num", 4097, "from 1 to 4096"), ("log.checkpoint.interval", 0, "from 1 to 100000"),
    ("isolation.level", "Snapshot", "use one of WriteSerializable, Serializable"),
    ("maintd.", "x", "unknown property 'maintd.'"),
]


@pytest.mark.parametrize(("key", "value", "message"), PROPERTY_VALUES)
def test_out_of_range_properties_are_refused_at_create_and_later(tmp_path: Path, table: Table, key: str,
                                                                 value: object, message: str) -> None:
    with pytest.raises(InvalidPropertyError, match=message) as caught:
        Table.create(str(tmp_path / "other"), SCHEMA, primary_key="id", properties={key: value})
    assert key in str(caught.value)
    assert not (tmp_path / "other" / "_log").exists()
    if key != "write.bucket.num":
        with pytest.raises(InvalidPropertyError, match=message):
            table.set_properties({key: value})


BAD_LAYOUTS: list[tuple[str, dict[str, Any], str]] = [
    ("a primary key not in the schema", {"primary_key": "key"}, r"primary key column\(s\) key are not in the schema"),
    ("a float primary key", {"primary_key": "amount"}, "amount have a type that cannot be a key"),
    ("no primary key", {"primary_key": ()}, "a primary key is required"),
    ("a partition column not in the schema", {"partition_by": "day"}, r"partition column\(s\) day"),
    ("an unknown type", {"schema": "id:int64!,name:text"}, "unknown column type 'text'"),
    ("a reserved column name", {"schema": "id:int64!,_maintd_version:int64"}, "reserved"),
    ("a column named twice", {"schema": "id:int64!,id:string"}, "duplicate column names in schema: id"),
    ("zero buckets", {"buckets": 0}, "write.bucket.num=0 is out of range"),
    ("buckets contradicting the property", {"buckets": 16, "properties": {"write.bucket.num": 8}},
     "buckets=16 contradicts write.bucket.num=8"),
]


@pytest.mark.parametrize(("what", "overrides", "message"), BAD_LAYOUTS, ids=[b[0] for b in BAD_LAYOUTS])
def test_bad_table_layouts_are_refused(tmp_path: Path, what: str, overrides: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"schema": SCHEMA, "primary_key": "id"} | overrides
    with pytest.raises(InvalidInputError, match=message):
        Table.create(str(tmp_path / "t"), **args)
    assert not (tmp_path / "t" / "_log").exists()


# -- a corrupt log ---------------------------------------------------------------------------------------------------

CORRUPTIONS = [
    ("truncated JSON", lambda text: text[: len(text) // 2], r"line \d+ is not a valid log action"),
    ("an unknown action", lambda text: text + '{"rename":{"path":"a"}}\n', "unknown action 'rename'"),
    ("an unknown field", lambda text: text.replace('"kind":"delta"', '"colour":"red","kind":"delta"', 1), "colour"),
    ("two actions on one line", lambda text: text + '{"txn":{},"add":{}}\n', "exactly one action"),
]


def _reseal(path: Path, body: str, version: int) -> None:
    """Write ``body`` (action lines) with a header whose checksum matches: what a buggy writer would produce."""
    import hashlib
    import json

    data = body.encode()
    lines = sum(1 for line in body.splitlines() if line.strip())
    header = {"header": {"format": 2, "version": version, "actions": lines, "sha256": hashlib.sha256(data).hexdigest()}}
    path.write_bytes(json.dumps(header).encode() + b"\n" + data)


@pytest.mark.parametrize("resealed", [False, True], ids=["as damaged", "resealed by a buggy writer"])
@pytest.mark.parametrize(("what", "corrupt", "message"), CORRUPTIONS, ids=[c[0] for c in CORRUPTIONS])
def test_a_corrupt_commit_is_named_and_blocks_reads_and_writes(tmp_path: Path, what: str,
                                                               corrupt: Callable[[str], str], message: str,
                                                               resealed: bool) -> None:
    t = Table.create(str(tmp_path / "t"), SCHEMA, primary_key="id", partition_by="ds")
    t.upsert(pa.table({"id": [1], "name": ["a"], "amount": [1.0], "ds": ["x"]}))
    commit = tmp_path / "t" / commit_path(1)
    header, body = commit.read_text().split("\n", 1)
    if resealed:  # the checksum matches: the lines themselves are checked
        _reseal(commit, corrupt(body), 1)
    else:  # the damage itself: the checksum catches it, whatever it is
        commit.write_text(header + "\n" + corrupt(body))
        message = "version 1.* fails its checksum"
    files = data_files_on_disk(tmp_path / "t")
    reopened = Table.open(str(tmp_path / "t"))
    with pytest.raises(CorruptLogError, match=message) as caught:
        reopened.read()
    assert commit.name in str(caught.value) and caught.value.version == 1 and caught.value.path == commit_path(1)
    with pytest.raises(CorruptLogError):
        reopened.upsert(pa.table({"id": [2], "name": ["b"], "amount": [2.0], "ds": ["x"]}))
    assert data_files_on_disk(tmp_path / "t") == files and not (tmp_path / "t" / commit_path(2)).exists()


def test_a_corrupt_checkpoint_without_the_commits_to_replay_is_named(tmp_path: Path) -> None:
    t = Table.create(str(tmp_path / "t"), SCHEMA, primary_key="id", properties={"log.checkpoint.interval": 2})
    for i in range(2):
        t.upsert(pa.table({"id": [i], "name": ["a"], "amount": [1.0], "ds": ["x"]}))
    for v in range(2):  # reclaimed: the checkpoint is the only way to version 2
        (tmp_path / "t" / commit_path(v)).unlink()
    checkpoint = tmp_path / "t" / checkpoint_path(2)
    intact = checkpoint.read_bytes()
    checkpoint.write_bytes(intact[:40])
    with pytest.raises(CorruptLogError, match=r"checkpoint .*\(version 2\) cannot be read") as caught:
        Table.open(str(tmp_path / "t")).read()
    assert checkpoint.name in str(caught.value) and caught.value.version == 2
    buf = io.BytesIO()  # a readable Parquet file holding a line that is no action (no checksum: an old format)
    pq.write_table(pa.table({"action": ['{"add": {"path": 1}}']}), buf)
    checkpoint.write_bytes(buf.getvalue())
    with pytest.raises(CorruptLogError, match="is not a valid log action"):
        Table.open(str(tmp_path / "t")).read()


@pytest.mark.parametrize(("buckets", "properties", "expected"), [
    (None, {}, 16), (4, {}, 4), (None, {"write.bucket.num": "8"}, 8), (8, {"write.bucket.num": 8}, 8)])
def test_the_bucket_count_comes_from_either_argument_or_the_default(tmp_path: Path, buckets: int | None,
                                                                    properties: dict[str, Any], expected: int) -> None:
    t = Table.create(str(tmp_path / "t"), SCHEMA, primary_key="id", buckets=buckets, properties=properties)
    assert t.metadata.buckets == expected and t.metadata.properties["write.bucket.num"] == str(expected)


def test_a_nullable_key_column_is_refused_at_create_naming_how_to_declare_it(tmp_path: Path) -> None:
    nullable = pa.schema([("id", pa.int64()), pa.field("region", pa.string(), False), ("v", pa.float64())])
    with pytest.raises(InvalidInputError, match=r"primary key column\(s\) id are nullable.*nullable=False"):
        Table.create(str(tmp_path / "a"), nullable, primary_key=["region", "id"])
    with pytest.raises(InvalidInputError, match=r"\(id:int64!\)"):
        Table.create(str(tmp_path / "b"), "id:int64,v:double", primary_key="id")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    Table.create(str(tmp_path / "c"), "id:int64!,v:double", primary_key="id")  # a nullable value column is fine


def test_create_warns_when_the_key_leaves_out_a_partition_column(tmp_path: Path) -> None:
    from loguru import logger

    seen: list[str] = []
    sink = logger.add(lambda m: seen.append(m.record["message"]), level="WARNING")
    try:
        Table.create(str(tmp_path / "a"), "id:int64!,region:string", primary_key="id", partition_by="region")
        assert len(seen) == 1 and "identified by its partition values and its primary key" in seen[0]
        assert "does not include partition column(s) region" in seen[0]
        Table.create(str(tmp_path / "b"), "id:int64!,region:string!", primary_key=["region", "id"],
                     partition_by="region")
        assert len(seen) == 1
    finally:
        logger.remove(sink)
