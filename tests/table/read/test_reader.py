"""Merge-on-read one piece at a time: a bucket's files read and merged, a snapshot read, two states diffed.

Reads of whole tables are tested through ``Table.read`` and ``Table.changes`` elsewhere (tests/table/test_table_api.py,
feed/test_changes.py, the model check); here the reader's functions are called on data files written by hand
(each with the rows, versions and key statistics a test needs) and their exact result is checked: rows and
their order, columns and their types, and which way the files were read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from maintd import InvalidInputError, Table
from maintd.table.files.datafiles import file_schema, write_data_file
from maintd.table.files.schema import OP_COLUMN, VERSION_COLUMN
from maintd.table.log.actions import AddFile, Metadata
from maintd.table.read import reader
from maintd.table.read.feed import CHANGE_COLUMN, CHANGE_VERSION_COLUMN, changes_between, diff_states, state_schema
from maintd.table.read.reader import key_columns, read_bucket, read_snapshot

SCHEMA = "id:int64!,ds:string!,name:string"
UPSERT, DELETE = 0, 1


def new_table(root: Path) -> Table:
    return Table.create(str(root), SCHEMA, primary_key="id", partition_by="ds", buckets=1)


def write(table: Table, rows: list[tuple[Any, ...]], *, kind: str = "delta", level: int | None = 0,
          version: int = 1) -> AddFile:
    """A data file of partition ``ds=a``, bucket 0. ``rows``: (id, name) for a level-0 file (all upserts) or a
    BaseFile, (id, name, op) for a level-0 file with deletes, (id, name, op, version) for a level-1 file, whose
    rows are sorted by key, then oldest version first (as clustering writes them)."""
    md = table.snapshot().metadata
    schema = file_schema(md, kind, level)  # type: ignore[arg-type]
    out = []
    for r in sorted(rows, key=lambda r: (r[0], r[3] if len(r) > 3 else 0)):
        row: dict[str, Any] = {"id": r[0], "ds": "a", "name": r[1]}
        if OP_COLUMN in schema.names:
            row[OP_COLUMN] = r[2] if len(r) > 2 else UPSERT
        if VERSION_COLUMN in schema.names:
            row[VERSION_COLUMN] = r[3] if len(r) > 3 else version
        out.append(row)
    versions = [r[3] for r in rows if len(r) > 3] or [version]
    f = write_data_file(table.storage, md, pa.Table.from_pylist(out, schema=schema), partition={"ds": "a"}, bucket=0,
                        kind=kind, level=level, min_version=min(versions), max_version=max(versions))  # type: ignore[arg-type]
    deletes = sum(1 for r in rows if len(r) > 2 and r[2] == DELETE)
    return f.model_copy(update={"delete_rows": deletes})


def rows_of(t: pa.Table) -> list[tuple[Any, ...]]:
    return [tuple(r.values()) for r in t.to_pylist()]


def metadata(table: Table) -> Metadata:
    return table.snapshot().metadata


# -- the columns ------------------------------------------------------------------------------------------------------


def test_the_key_is_the_partition_columns_then_the_primary_key_each_once(tmp_path: Path) -> None:
    table = new_table(tmp_path / "t")
    assert key_columns(metadata(table)) == ["ds", "id"]
    both = Table.create(str(tmp_path / "u"), SCHEMA, primary_key=["ds", "id"], partition_by="ds", buckets=1)
    assert key_columns(metadata(both)) == ["ds", "id"]


def test_a_state_has_every_column_nullable_then_the_version(tmp_path: Path) -> None:
    schema = state_schema(metadata(new_table(tmp_path / "t")))
    assert schema == pa.schema([pa.field("id", pa.int64(), nullable=True), pa.field("ds", pa.string(), nullable=True),
                                pa.field("name", pa.string(), nullable=True),
                                pa.field(VERSION_COLUMN, pa.int64(), nullable=True)])
    assert all(f.nullable for f in schema)


# -- one bucket -------------------------------------------------------------------------------------------------------


def test_a_bucket_without_files_reads_as_no_rows_of_its_key_and_columns(tmp_path: Path) -> None:
    md = metadata(new_table(tmp_path / "t"))
    storage = new_table(tmp_path / "u").storage
    assert read_bucket(storage, md, [], ["name"]).schema == pa.schema(
        [pa.field("ds", pa.string(), nullable=False), pa.field("id", pa.int64(), nullable=False),
         pa.field("name", pa.string())])
    hidden = read_bucket(storage, md, [], None, keep_hidden=True)
    assert hidden.num_rows == 0 and hidden.schema == pa.schema(
        [pa.field("ds", pa.string(), nullable=False), pa.field("id", pa.int64(), nullable=False),
         pa.field("name", pa.string()), pa.field(OP_COLUMN, pa.int8()), pa.field(VERSION_COLUMN, pa.int64())])


def test_a_bucket_reads_the_columns_asked_for_in_their_order_and_no_hidden_ones_unless_asked(tmp_path: Path) -> None:
    table = new_table(tmp_path / "t")
    files = [write(table, [(1, "x"), (2, "y")], version=1), write(table, [(2, "z")], version=2)]
    md = metadata(table)
    plain = read_bucket(table.storage, md, files, None)
    assert plain.column_names == ["id", "ds", "name"] and rows_of(plain) == [(1, "a", "x"), (2, "a", "z")]
    assert read_bucket(table.storage, md, files, ["name", "id"]).column_names == ["name", "id"]
    hidden = read_bucket(table.storage, md, files, ["name"], keep_hidden=True)
    assert hidden.column_names == ["name", VERSION_COLUMN, OP_COLUMN]
    assert rows_of(hidden) == [("x", 1, UPSERT), ("z", 2, UPSERT)]


def test_basefiles_are_read_in_key_order_those_without_key_statistics_first(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    table = new_table(tmp_path / "t")
    high = write(table, [(5, "e"), (6, "f")], kind="base", level=None)
    low = write(table, [(1, "a"), (2, "b")], kind="base", level=None)
    unknown = write(table, [(9, "i")], kind="base", level=None).model_copy(update={"key_min": None, "key_max": None})

    # name the files so that their paths sort against their keys: the path only breaks ties
    def renamed(f: AddFile, name: str) -> AddFile:
        path = f"ds=a/bucket-00000/base-{name * 32}.parquet"
        (tmp_path / "t" / f.path).rename(tmp_path / "t" / path)
        return f.model_copy(update={"path": path})

    high, low, unknown = renamed(high, "1"), renamed(low, "2"), renamed(unknown, "0")
    merged: list[Any] = []
    monkeypatch.setattr(reader, "latest_rows", lambda *a, **k: merged.append(a))
    t = read_bucket(table.storage, metadata(table), [high, low, unknown], None)
    assert [r[0] for r in rows_of(t)] == [9, 1, 2, 5, 6] and merged == []  # BaseFiles are never merged
    same = low.model_copy(update={"path": f"ds=a/bucket-00000/base-{'3' * 32}.parquet"})
    (tmp_path / "t" / same.path).write_bytes((tmp_path / "t" / low.path).read_bytes())
    other = write(table, [(1, "q")], kind="base", level=None)  # the same first key: the path decides
    t = read_bucket(table.storage, metadata(table), [same, other, low], None)
    by_path = sorted([same, other, low], key=lambda f: f.path)
    assert [r[2] for r in rows_of(t)] == [x for f in by_path for x in (["q"] if f is other else ["a", "b"])]


def test_a_lone_writers_file_without_deletes_is_read_as_it_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = new_table(tmp_path / "t")
    f = write(table, [(1, "x"), (2, "y")], version=3)
    merged: list[Any] = []
    latest_rows, first_of_each = reader.latest_rows, reader.first_of_each_key_hashed
    monkeypatch.setattr(reader, "latest_rows", lambda *a, **k: merged.append(a) or latest_rows(*a, **k))
    monkeypatch.setattr(reader, "first_of_each_key_hashed", lambda *a, **k: merged.append(a) or first_of_each(*a, **k))
    t = read_bucket(table.storage, metadata(table), [f], None, keep_hidden=True)
    assert rows_of(t) == [(1, "a", "x", 3, UPSERT), (2, "a", "y", 3, UPSERT)] and merged == []  # not deduplicated


def test_a_lone_writers_file_with_deletes_drops_them(tmp_path: Path) -> None:
    table = new_table(tmp_path / "t")
    f = write(table, [(1, "x", UPSERT), (2, None, DELETE)], version=3)
    assert f.delete_rows == 1
    assert rows_of(read_bucket(table.storage, metadata(table), [f], None)) == [(1, "a", "x")]


def test_a_lone_merged_file_keeps_the_newest_row_of_each_key(tmp_path: Path) -> None:
    table = new_table(tmp_path / "t")
    f = write(table, [(1, "old", UPSERT, 1), (1, "new", UPSERT, 4), (2, "y", UPSERT, 2), (3, None, DELETE, 5)],
              level=1)
    t = read_bucket(table.storage, metadata(table), [f], None, keep_hidden=True)
    assert rows_of(t) == [(1, "a", "new", 4, UPSERT), (2, "a", "y", 2, UPSERT)]
    # without deletes too: unlike a writer's file, a merged file holds several versions of a key
    g = write(table, [(1, "old", UPSERT, 1), (1, "new", UPSERT, 4), (2, "y", UPSERT, 2)], level=1)
    assert g.delete_rows == 0
    t = read_bucket(table.storage, metadata(table), [g], None, keep_hidden=True)
    assert rows_of(t) == [(1, "a", "new", 4, UPSERT), (2, "a", "y", 2, UPSERT)]


def test_writers_files_in_any_order_give_the_newest_row_of_each_key(tmp_path: Path) -> None:
    table = new_table(tmp_path / "t")
    v2 = write(table, [(1, "two", UPSERT), (2, "b", UPSERT)], version=2)
    v5 = write(table, [(1, "five", UPSERT), (2, None, DELETE)], version=5)
    v3 = write(table, [(1, "three", UPSERT), (3, "c", UPSERT)], version=3)
    md = metadata(table)
    for files in ([v2, v5, v3], [v5, v3, v2], [v2, v3, v5]):
        t = read_bucket(table.storage, md, files, ["name"], keep_hidden=True)
        assert rows_of(t) == [("five", 5, UPSERT), ("c", 3, UPSERT)]


def test_writers_and_merged_files_together_give_the_newest_row_of_each_key(tmp_path: Path) -> None:
    table = new_table(tmp_path / "t")
    merged = write(table, [(1, "m1", UPSERT, 1), (1, "m4", UPSERT, 4), (2, "m2", UPSERT, 2)], level=1)
    newer = write(table, [(2, "w5", UPSERT)], version=5)
    older = write(table, [(1, "w3", UPSERT)], version=3)
    base = write(table, [(3, "b", UPSERT)], kind="base", level=None, version=1)
    t = read_bucket(table.storage, metadata(table), [newer, merged, older, base], None, keep_hidden=True)
    assert rows_of(t) == [(1, "a", "m4", 4, UPSERT), (2, "a", "w5", 5, UPSERT), (3, "a", "b", 1, UPSERT)]


@pytest.mark.parametrize(("count", "threads"), [(7, 1), (8, 4)])
def test_many_files_of_a_bucket_are_read_on_threads_a_few_on_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   count: int, threads: int) -> None:
    import maintd.table.files.datafiles as files_mod

    table = new_table(tmp_path / "t")
    files = [write(table, [(i, f"n{v}"), (100 + v, "x")], version=v) for v, i in enumerate(range(count), start=1)]
    runs: list[int] = []
    decodes: list[bool] = []
    hashed: list[tuple[int, bool, bool]] = []
    read_runs, decode, first_of_each = reader.read_runs_of_files, files_mod._decode, reader.first_of_each_key_hashed

    def spy_runs(storage: Any, md: Metadata, fs: Any, columns: Any, n: int, per_run: Any) -> Any:
        runs.append(n)
        return read_runs(storage, md, fs, columns, n, per_run)

    def spy_decode(storage: Any, f: AddFile, path: str, projection: Any, threads: bool) -> pa.Table:
        decodes.append(threads)
        return decode(storage, f, path, projection, threads)

    def spy_hashed(t: pa.Table, key: str, **kw: Any) -> pa.Array:
        # (rows, deletes kept, in key order) as the kernel reads its flags
        hashed.append((t.num_rows, bool(kw["keep_deletes"]), bool(kw.get("in_key_order", True))))
        return first_of_each(t, key, **kw)

    monkeypatch.setattr(reader, "read_runs_of_files", spy_runs)
    monkeypatch.setattr(files_mod, "_decode", spy_decode)
    monkeypatch.setattr(reader, "first_of_each_key_hashed", spy_hashed)
    t = read_bucket(table.storage, metadata(table), files, ["name"], keep_hidden=True)
    # a few files: one run, each file decoded on pyarrow's threads; many: runs on threads, one thread per file
    assert runs == [threads] and decodes == [threads == 1] * count
    # a few files: one dedupe of all their rows; many: each run of 2 files (4 rows, keys all different) deduped
    # on its thread, deletes kept, in the rows' order (no sort), then the runs' survivors once, in key order
    runs_deduped = [(4, True, False)] * 4 if threads > 1 else []
    assert sorted(hashed) == sorted([*runs_deduped, (2 * count, False, True)])
    expected = sorted([(i, f"n{v}", v) for v, i in enumerate(range(count), start=1)]
                      + [(100 + v, "x", v) for v in range(1, count + 1)])
    assert rows_of(t) == [(n, v, UPSERT) for _, n, v in expected]
    assert t.schema.field(VERSION_COLUMN) == pa.field(VERSION_COLUMN, pa.int64(), nullable=False)


# -- a snapshot --------------------------------------------------------------------------------------------------------


def partitioned(root: Path) -> Table:
    table = Table.create(str(root), SCHEMA, primary_key="id", partition_by="ds", buckets=2)
    table.upsert(pa.table({"id": list(range(8)), "ds": ["b", "a"] * 4, "name": [f"n{i}" for i in range(8)]}))
    return table


def test_a_snapshot_reads_its_partitions_and_buckets_in_order(tmp_path: Path) -> None:
    table = partitioned(tmp_path / "t")
    snapshot = table.snapshot()
    groups = sorted(snapshot.by_bucket(), key=lambda g: (str(g[0]), g[1]))
    assert len(groups) == 4
    expected = [r for g in groups for r in rows_of(read_bucket(table.storage, snapshot.metadata,
                                                               snapshot.by_bucket()[g], None))]
    assert rows_of(read_snapshot(table.storage, snapshot)) == expected
    assert [r[1] for r in expected] == ["a"] * 4 + ["b"] * 4
    some = read_snapshot(table.storage, snapshot, ["name"], groups={groups[1], groups[2]})
    assert rows_of(some) == [(r[2],) for g in groups[1:3] for r in rows_of(
        read_bucket(table.storage, snapshot.metadata, snapshot.by_bucket()[g], None))]
    hidden = read_snapshot(table.storage, snapshot, ["id"], keep_hidden=True)
    assert hidden.column_names == ["id", VERSION_COLUMN, OP_COLUMN] and hidden.num_rows == 8


def test_a_snapshot_reads_its_partitions_in_the_order_of_their_keys_text(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "t"), SCHEMA, primary_key="id", partition_by="ds", buckets=1)
    table.upsert(pa.table({"id": [1, 2, 3], "ds": ["b", "it's", "a"], "name": ["b", "i", "a"]}))
    # the text of (("ds", "it's"),) quotes the value with '"', which sorts before "'": neither the values' order
    # nor their directories' (ds=a, ds=b, ds=it%27s)
    assert rows_of(read_snapshot(table.storage, table.snapshot(), ["name"])) == [("i",), ("a",), ("b",)]


def test_a_snapshot_without_files_or_groups_reads_as_no_rows_of_its_columns(tmp_path: Path) -> None:
    table = partitioned(tmp_path / "t")
    snapshot = table.snapshot()
    assert read_snapshot(table.storage, snapshot, groups=set()).schema == pa.schema(
        [pa.field("id", pa.int64(), nullable=False), pa.field("ds", pa.string(), nullable=False),
         pa.field("name", pa.string())])
    empty = read_snapshot(table.storage, table.snapshot(0), ["name"], keep_hidden=True)
    assert empty.num_rows == 0 and empty.column_names == ["name", OP_COLUMN, VERSION_COLUMN]


def test_unknown_columns_are_refused_naming_them_and_the_tables_columns(tmp_path: Path) -> None:
    table = partitioned(tmp_path / "t")
    with pytest.raises(InvalidInputError) as err:
        read_snapshot(table.storage, table.snapshot(), ["name", "size", "id", "colour"])
    assert str(err.value) == f"table {table.uri}: unknown column(s) size, colour; the table has id, ds, name"


# -- changes ----------------------------------------------------------------------------------------------------------


def state(md: Metadata, rows: list[tuple[Any, ...]]) -> pa.Table:
    schema = state_schema(md)
    return pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for r in rows], schema=schema)


def test_the_diff_of_two_states_has_each_insert_update_and_delete_once_by_key(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "t"), "id:int64!,ds:string!,name:string,n:int64", primary_key="id",
                         partition_by="ds", buckets=1)
    md = metadata(table)
    a = state(md, [(1, "a", "same", 1, 1), (2, "a", "old", 1, 1), (3, "a", "gone", 7, 2), (4, "b", None, 1, 1),
                   (5, "a", "x", None, 1), (6, "a", None, None, 1), (7, "a", "x", 1, 1)])
    b = state(md, [(1, "a", "same", 1, 5), (2, "a", "new", 1, 6), (4, "b", "now", 1, 6), (5, "a", "x", 3, 7),
                   (6, "a", None, None, 9), (7, "a", None, 1, 8), (8, "a", "born", 2, 9), (0, "b", "b0", 0, 4)])
    d = diff_states(md, a, b)
    assert d.schema == pa.schema([pa.field("id", pa.int64()), pa.field("ds", pa.string()),
                                  pa.field("name", pa.string()), pa.field("n", pa.int64()),
                                  pa.field(CHANGE_COLUMN, pa.string()), pa.field(CHANGE_VERSION_COLUMN, pa.int64())])
    assert rows_of(d) == [
        (2, "a", "new", 1, "update", 6), (3, "a", "gone", 7, "delete", None), (5, "a", "x", 3, "update", 7),
        (7, "a", None, 1, "update", 8), (8, "a", "born", 2, "insert", 9),
        (0, "b", "b0", 0, "insert", 4), (4, "b", "now", 1, "update", 6),
    ]


def test_the_diff_of_equal_states_is_empty(tmp_path: Path) -> None:
    md = metadata(new_table(tmp_path / "t"))
    a = state(md, [(1, "a", "x", 1), (2, "a", None, 1)])
    assert diff_states(md, a, a).num_rows == 0


def test_the_changes_between_two_snapshots_read_the_touched_groups_only(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "t"), SCHEMA, primary_key="id", partition_by="ds", buckets=1)
    table.upsert(pa.table({"id": [1, 2, 3], "ds": ["a", "a", "b"], "name": ["x", "y", "z"]}))
    table.upsert(pa.table({"id": [1, 4, 3], "ds": ["a", "a", "b"], "name": ["x2", "w", "z2"]}))
    table.delete(pa.table({"id": [2], "ds": ["a"]}))
    before, after = table.snapshot(1), table.snapshot(3)
    (group_a,) = [g for g in after.by_bucket() if g[0] == (("ds", "a"),)]
    d = changes_between(table.storage, before, after, {group_a})
    assert rows_of(d) == [(1, "a", "x2", "update", 2), (2, "a", "y", "delete", None), (4, "a", "w", "insert", 2)]
    everything = changes_between(table.storage, before, after, set(after.by_bucket()))
    assert rows_of(everything)[-1] == (3, "b", "z2", "update", 2) and everything.num_rows == 4


def test_basefiles_are_read_for_the_key_and_the_columns_asked_for_only(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    table = Table.create(str(tmp_path / "t"), "id:int64!,ds:string!,name:string,n:int64", primary_key="id",
                         partition_by="ds", buckets=1)
    md = metadata(table)
    schema = file_schema(md, "base", None)
    rows = pa.Table.from_pylist([{"id": 1, "ds": "a", "name": "x", "n": 7, VERSION_COLUMN: 1}], schema=schema)
    f = write_data_file(table.storage, md, rows, partition={"ds": "a"}, bucket=0, kind="base", level=None)
    asked: list[Any] = []
    read_data_file = reader.read_data_file

    def spy(storage: Any, md: Metadata, f: AddFile, columns: Any = None, **kw: Any) -> pa.Table:
        asked.append(columns)
        return read_data_file(storage, md, f, columns, **kw)

    monkeypatch.setattr(reader, "read_data_file", spy)
    assert rows_of(read_bucket(table.storage, md, [f], ["name"])) == [("x",)]
    assert asked == [["ds", "id", "name"]]


def test_writers_files_are_read_for_the_key_and_the_columns_asked_for_only(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    table = Table.create(str(tmp_path / "t"), "id:int64!,ds:string!,name:string,n:int64", primary_key="id",
                         partition_by="ds", buckets=1)
    md = metadata(table)
    schema = file_schema(md, "delta", 0)

    def level0(version: int, name: str) -> AddFile:
        rows = pa.Table.from_pylist([{"id": 1, "ds": "a", "name": name, "n": 7, OP_COLUMN: UPSERT}], schema=schema)
        return write_data_file(table.storage, md, rows, partition={"ds": "a"}, bucket=0, kind="delta", level=0,
                               min_version=version, max_version=version)

    older, newer = level0(1, "x"), level0(2, "y")
    asked: list[Any] = []
    read_data_file, read_runs = reader.read_data_file, reader.read_runs_of_files

    def spy(storage: Any, md: Metadata, f: AddFile, columns: Any = None, **kw: Any) -> pa.Table:
        asked.append(columns)
        return read_data_file(storage, md, f, columns, **kw)

    def spy_runs(storage: Any, md: Metadata, fs: Any, columns: Any, n: int, per_run: Any) -> Any:
        asked.append(columns)
        return read_runs(storage, md, fs, columns, n, per_run)

    monkeypatch.setattr(reader, "read_data_file", spy)
    monkeypatch.setattr(reader, "read_runs_of_files", spy_runs)
    assert rows_of(read_bucket(table.storage, md, [older], ["name"])) == [("x",)]  # alone
    assert rows_of(read_bucket(table.storage, md, [older, newer], ["name"])) == [("y",)]  # merged
    assert asked == [["ds", "id", "name"]] * 2


def test_writers_files_alone_are_merged_by_key_newest_file_first(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    table = new_table(tmp_path / "t")
    v2 = write(table, [(1, "two", UPSERT)], version=2)
    v5 = write(table, [(1, "five", UPSERT)], version=5)
    merged_file = write(table, [(1, "m1", UPSERT, 1)], level=1)
    hashed: list[list[int]] = []
    calls: list[tuple[list[int], bool]] = []
    hidden: list[str] = []
    first_of_each, latest_rows, with_hidden_columns = (reader.first_of_each_key_hashed, reader.latest_rows,
                                                       reader.with_hidden_columns)

    def spy_hashed(t: pa.Table, key: str, **kw: Any) -> pa.Array:
        hashed.append(t.column(VERSION_COLUMN).to_pylist())
        return first_of_each(t, key, **kw)

    def spy(t: pa.Table, keys: Any, **kw: Any) -> pa.Table:
        calls.append((t.column(VERSION_COLUMN).to_pylist(), kw["newest_first"]))
        return latest_rows(t, keys, **kw)

    def spy_hidden(t: pa.Table, f: AddFile) -> pa.Table:
        hidden.append(f.path)
        return with_hidden_columns(t, f)

    monkeypatch.setattr(reader, "first_of_each_key_hashed", spy_hashed)
    monkeypatch.setattr(reader, "latest_rows", spy)
    monkeypatch.setattr(reader, "with_hidden_columns", spy_hidden)
    md = metadata(table)
    assert rows_of(read_bucket(table.storage, md, [v2, v5], ["name"])) == [("five",)]
    # writers' files only: newest file first, the first row of each key wins, the versions added once for all
    assert hashed == [[5, 2]] and calls == [] and hidden == []
    hashed.clear()
    assert rows_of(read_bucket(table.storage, md, [v2, merged_file, v5], ["name"])) == [("five",)]
    assert hashed == [] and calls == [([2, 1, 5], False)] and hidden == [v2.path, merged_file.path, v5.path]


def test_merged_files_with_writers_files_are_merged_by_version(tmp_path: Path) -> None:
    table = new_table(tmp_path / "t")
    merged = write(table, [(1, "m1", UPSERT, 1), (2, "k1", UPSERT, 1), (2, "k2", UPSERT, 2)], level=1)
    newer = write(table, [(1, "w5", UPSERT)], version=5)
    t = read_bucket(table.storage, metadata(table), [merged, newer], ["name"], keep_hidden=True)
    assert rows_of(t) == [("w5", 5, UPSERT), ("k2", 2, UPSERT)]


def test_writers_files_of_different_layouts_are_merged_too(tmp_path: Path) -> None:
    table = new_table(tmp_path / "t")
    md = metadata(table)
    ours = write(table, [(1, "x", UPSERT), (2, "y", UPSERT)], version=2)
    # another writer's file: the same columns and types, but "name" declared not null
    schema = file_schema(md, "delta", 0)
    strict = schema.set(schema.get_field_index("name"), pa.field("name", pa.string(), nullable=False))
    path = f"ds=a/bucket-00000/delta-L0-{'f' * 32}.parquet"
    pq.write_table(pa.Table.from_pylist([{"id": 2, "ds": "a", "name": "z", OP_COLUMN: UPSERT}], schema=strict),
                   tmp_path / "t" / path)
    theirs = ours.model_copy(update={"path": path, "min_version": 3, "max_version": 3, "rows": 1})
    t = read_bucket(table.storage, md, [ours, theirs], ["name"], keep_hidden=True)
    assert rows_of(t) == [("x", 2, UPSERT), ("z", 3, UPSERT)]


@pytest.mark.parametrize(("count", "threads"), [(7, 1), (8, 4)])
def test_writers_files_of_a_composite_key_are_merged_newest_file_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                       count: int, threads: int) -> None:
    """A primary key of two columns: the files are read for the key and the columns asked for (on one thread up to
    7 files, on 4 from 8), their versions added once for all of them, and merged newest file first."""
    table = Table.create(str(tmp_path / "t"), SCHEMA, primary_key=["ds", "id"], partition_by="ds", buckets=1)
    md = metadata(table)
    files = [write(table, [(0, f"n{v}", UPSERT), (v, f"k{v}", UPSERT), *([(1, None, DELETE)] if v == count else [])],
                   version=v) for v in range(1, count + 1)]
    read_files, latest_rows, with_hidden_columns = (reader.read_data_files, reader.latest_rows,
                                                    reader.with_hidden_columns)
    reads: list[tuple[Any, int]] = []
    merges: list[tuple[list[str], list[int], bool]] = []
    hidden: list[str] = []

    def spy_read(storage: Any, md: Metadata, fs: Any, columns: Any, n: int) -> Any:
        reads.append((columns, n))
        return read_files(storage, md, fs, columns, n)

    def spy_latest(t: pa.Table, keys: Any, **kw: Any) -> pa.Table:
        merges.append((list(keys), t.column(VERSION_COLUMN).to_pylist(), kw["newest_first"]))
        return latest_rows(t, keys, **kw)

    def spy_hidden(t: pa.Table, f: AddFile) -> pa.Table:
        hidden.append(f.path)
        return with_hidden_columns(t, f)

    monkeypatch.setattr(reader, "read_data_files", spy_read)
    monkeypatch.setattr(reader, "latest_rows", spy_latest)
    monkeypatch.setattr(reader, "with_hidden_columns", spy_hidden)
    shuffled = files[1::2] + files[::2]
    t = read_bucket(table.storage, md, shuffled, ["name"], keep_hidden=True)
    assert rows_of(t) == [("n" + str(count), count, UPSERT)] + [(f"k{v}", v, UPSERT) for v in range(2, count + 1)]
    assert t.schema.field(VERSION_COLUMN) == pa.field(VERSION_COLUMN, pa.int64(), nullable=False)
    assert reads == [(["ds", "id", "name"], threads)] and hidden == []
    newest_first = [v for v in range(count, 0, -1) for _ in range(3 if v == count else 2)]
    assert merges == [(["ds", "id"], newest_first, True)]


def test_writers_files_of_different_layouts_are_merged_on_threads_too(tmp_path: Path) -> None:
    """Many writers' files: the two newest, of another writer's layout ("name" declared not null), make a run of
    their own, whose rows are settled with the other runs' all the same."""
    table = new_table(tmp_path / "t")
    md = metadata(table)
    files = [write(table, [(v, f"k{v}", UPSERT), (0, f"n{v}", UPSERT)], version=v) for v in range(1, 7)]
    schema = file_schema(md, "delta", 0)
    strict = schema.set(schema.get_field_index("name"), pa.field("name", pa.string(), nullable=False))
    for v in (7, 8):
        path = f"ds=a/bucket-00000/delta-L0-{str(v) * 32}.parquet"
        pq.write_table(pa.Table.from_pylist([{"id": 0, "ds": "a", "name": f"n{v}", OP_COLUMN: UPSERT},
                                             {"id": v, "ds": "a", "name": f"k{v}", OP_COLUMN: UPSERT}], schema=strict),
                       tmp_path / "t" / path)
        files.append(files[0].model_copy(update={"path": path, "min_version": v, "max_version": v, "rows": 2}))
    t = read_bucket(table.storage, md, files, ["name"], keep_hidden=True)
    assert rows_of(t) == [("n8", 8, UPSERT)] + [(f"k{v}", v, UPSERT) for v in range(1, 9)]
