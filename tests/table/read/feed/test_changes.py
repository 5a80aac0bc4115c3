"""Property tests of the incremental change feed: ``Table.changes(a, b)`` reads only the changed keys, and
must equal the full diff of two reads (``Table.full_changes``) and the dict model, on random histories of
upserts (repeated keys included), deletes, overwrites, clustering and compaction (maintd's own: planner,
execution, commit), for every pair of versions.
"""

from __future__ import annotations

import tempfile
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from maintd import Table

from ...table_helpers import Model, groups, maintain, rewrite_bucket, sorted_rows

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("ds", pa.string()), ("name", pa.string()),
                    ("amount", pa.float64())])
PARTITIONS = ("d1", "d2")
KEYS = ("ds", "id")


def rows(min_size: int, max_size: int, ds: str | None = None) -> st.SearchStrategy[list[dict[str, Any]]]:
    row = st.fixed_dictionaries({
        "id": st.integers(0, 40), "ds": st.just(ds) if ds else st.sampled_from(PARTITIONS),
        "name": st.none() | st.sampled_from(["a", "b", "c"]), "amount": st.none() | st.integers(0, 3).map(float)})
    return st.lists(row, min_size=min_size, max_size=max_size)


OPS = st.one_of(
    st.tuples(st.just("upsert"), rows(1, 12)),
    st.tuples(st.just("upsert"), rows(1, 12)),
    st.tuples(st.just("delete"), rows(1, 6)),
    st.sampled_from(PARTITIONS).flatmap(lambda ds: st.tuples(st.just("overwrite"), st.just(ds), rows(0, 5, ds))),
    st.tuples(st.just("overwrite"), st.none(), rows(0, 5)),
    st.tuples(st.sampled_from(["cluster", "compact"]), st.integers(0, 20)),
)


def apply(table: Table, model: Model, op: tuple[Any, ...]) -> None:
    kind = op[0]
    if kind == "upsert":
        model.upsert(table.upsert(pa.Table.from_pylist(op[1], schema=SCHEMA)), op[1])
    elif kind == "delete":
        model.delete(table.delete(pa.Table.from_pylist([{k: r[k] for k in KEYS} for r in op[1]])), op[1])
    elif kind == "overwrite":
        partition = None if op[1] is None else {"ds": op[1]}
        model.overwrite(table.overwrite(pa.Table.from_pylist(op[2], schema=SCHEMA), partition=partition), op[2],
                        partition)
    else:  # maintd's own maintenance (planner, execution, commit), into one BaseFile or several per bucket
        version = maintain(table, kind, target_file_bytes=None if op[1] % 2 else 1_500)
        if version is not None:
            model.unchanged(version)


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(history=st.lists(OPS, min_size=1, max_size=9), buckets=st.integers(1, 3))
def test_incremental_changes_equal_the_full_diff_and_the_model(history: list[tuple[Any, ...]], buckets: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        table = Table.create(f"{d}/t", SCHEMA, primary_key="id", partition_by="ds", buckets=buckets)
        model = Model(tuple(SCHEMA.names), ("id",), ("ds",))
        model.commit(0)
        for op in history:
            apply(table, model, op)
        versions = sorted(model.versions)
        for a in versions:
            for b in versions:
                if a > b:
                    continue
                got = table.changes(a, b)
                full = table.full_changes(a, b)
                assert got.schema == full.schema, (a, b)
                assert sorted_rows(got, KEYS) == sorted_rows(full, KEYS) == model.diff(a, b), f"changes({a}, {b})"


def test_changes_read_only_the_row_groups_of_changed_keys(tmp_path: Any, monkeypatch: Any) -> None:
    """A change to a few keys of a compacted bucket reads the row groups whose key statistics enclose a
    changed key, never the whole file through the reader; only the changed files themselves (every row of
    which is a changed row) are read whole."""
    import maintd.table.files.datafiles as files

    table = Table.create(str(tmp_path / "t"), SCHEMA, primary_key="id", partition_by="ds", buckets=1)
    table.upsert(pa.table({"id": list(range(1000)), "ds": ["d1"] * 1000, "name": ["a"] * 1000,
                           "amount": [1.0] * 1000}))
    snap = table.snapshot()
    txn = rewrite_bucket(table, snap, groups(snap)[0], "compact")
    assert txn is not None
    start = txn.commit()
    end = table.upsert(pa.table({"id": [5, 2000], "ds": ["d1", "d1"], "name": ["b", "c"], "amount": [2.0, 3.0]}))
    changed = sorted(p for p in table.snapshot(end).files if p not in table.snapshot(start).files)
    assert len(changed) == 1
    full_reads: list[str] = []
    real, real_many = files.read_data_file, files.read_data_files

    def spy(storage: Any, metadata: Any, f: Any, columns: Any = None, **kwargs: Any) -> pa.Table:
        if columns is None or set(columns) - {"id"}:
            full_reads.append(f.path)
        return real(storage, metadata, f, columns, **kwargs)

    def spy_many(storage: Any, metadata: Any, fs: Any, columns: Any, threads: int) -> list[pa.Table]:
        if columns is None or set(columns) - {"id"}:
            full_reads.extend(f.path for f in fs)
        return real_many(storage, metadata, fs, columns, threads)

    monkeypatch.setattr("maintd.table.read.feed.driver.read_data_files", spy_many)
    monkeypatch.setattr("maintd.table.read.reader.read_data_file", spy)
    got = sorted_rows(table.changes(start, end), KEYS)
    assert [(r["id"], r["_change"]) for r in got] == [(5, "update"), (2000, "insert")]
    assert full_reads == changed, "the change feed read a whole file other than the changed one"


def test_rows_of_keys_across_many_row_groups_equal_a_filter(tmp_path: Any) -> None:
    """The rows read for some keys, from a file of 11 row groups, are exactly the file's rows of those keys."""
    import numpy as np
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from maintd.table.files.datafiles import read_rows_of_keys

    table = Table.create(str(tmp_path / "t"), "id:int64!,name:string", primary_key="id", buckets=1)
    table.upsert(pa.table({"id": list(range(1000)), "name": [str(i) for i in range(1000)]}))
    snap = table.snapshot()
    f = next(iter(snap.files.values()))
    full = table.storage.full_path(f.path)
    data = pq.read_table(full)
    pq.write_table(data, full, row_group_size=97)
    assert pq.ParquetFile(full).metadata.num_row_groups == 11
    rng = np.random.default_rng(1)
    for _ in range(20):
        keys = pa.array(np.unique(rng.integers(0, 1200, rng.integers(1, 60))), pa.int64())
        got = read_rows_of_keys(table.storage, snap.metadata, f, pa.table({"id": keys}))
        want = data.filter(pc.is_in(data.column("id"), value_set=keys))
        assert got.select(["id", "name"]).to_pylist() == want.select(["id", "name"]).to_pylist()


def test_rows_of_keys_skip_row_groups_and_files_by_key_statistics(tmp_path: Any, monkeypatch: Any) -> None:
    """String and two-column keys: the rows read equal a filter of the file, only the row groups whose
    leading-key statistics enclose a wanted value are decoded, and a file whose key range holds none is not
    opened."""
    import os

    import numpy as np
    import pyarrow.parquet as pq

    from maintd.errors import DataFileMissingError
    from maintd.table.files.datafiles import read_rows_of_keys

    table = Table.create(str(tmp_path / "t"), "a:string!,b:int64!,v:double", primary_key=["a", "b"], buckets=1)
    a = [f"k{i:04d}" for i in range(500) for _ in range(2)]
    b = [j for _ in range(500) for j in range(2)]
    table.upsert(pa.table({"a": a, "b": b, "v": [float(i) for i in range(1000)]}))
    snap = table.snapshot()
    f = next(iter(snap.files.values()))
    full = table.storage.full_path(f.path)
    data = pq.read_table(full)
    pq.write_table(data, full, row_group_size=100)  # row group i holds a = k{50i}..k{50i+49}
    decoded: list[list[int]] = []
    real = pq.ParquetFile.read_row_groups

    def spy(self: Any, row_groups: Any, *args: Any, **kwargs: Any) -> pa.Table:
        decoded.append(list(row_groups))
        return real(self, row_groups, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read_row_groups", spy)
    rng = np.random.default_rng(2)
    for _ in range(20):
        n = int(rng.integers(1, 12))
        wanted = pa.table({"a": [f"k{i:04d}" for i in rng.integers(0, 600, n)],
                           "b": pa.array(rng.integers(0, 3, n), pa.int64())})
        decoded.clear()
        got = read_rows_of_keys(table.storage, snap.metadata, f, wanted)
        pairs = set(zip(wanted.column("a").to_pylist(), wanted.column("b").to_pylist(), strict=True))
        want = [r for r in data.select(["a", "b", "v"]).to_pylist() if (r["a"], r["b"]) in pairs]
        assert got.select(["a", "b", "v"]).to_pylist() == want
        groups = {int(x[1:]) // 50 for x in wanted.column("a").to_pylist() if int(x[1:]) < 500}
        assert decoded == ([sorted(groups)] if groups else [])
    decoded.clear()
    outside = pa.table({"a": ["k0600", "k0700"], "b": pa.array([0, 1], pa.int64())})
    os.remove(full)  # not opened: its key range (k0000..k0499, in the log) holds no wanted key
    assert read_rows_of_keys(table.storage, snap.metadata, f, outside).num_rows == 0
    assert decoded == []
    with pytest.raises(DataFileMissingError):  # one wanted key inside the range: the file is opened
        read_rows_of_keys(table.storage, snap.metadata, f, pa.table({"a": ["k0600", "k0001"], "b": [0, 0]}))


def test_when_the_changed_files_are_not_known_the_feed_diffs_the_touched_groups_whole(tmp_path: Any,
                                                                                       monkeypatch: Any) -> None:
    """A removed file that no commit added (a damaged log): every strategy but the full diff declines, and the
    feed equals the full diff."""
    from maintd.table.read.feed import STRATEGIES

    table = Table.create(str(tmp_path / "t"), SCHEMA, primary_key="id", partition_by="ds", buckets=2)
    start = table.upsert(pa.table({"id": list(range(20)), "ds": ["d1", "d2"] * 10, "name": ["a"] * 20,
                                   "amount": [1.0] * 20}))
    table.upsert(pa.table({"id": [1, 30], "ds": ["d2", "d1"], "name": ["b", "c"], "amount": [2.0, 3.0]}))
    table.delete(pa.table({"id": [2], "ds": ["d1"]}))

    def unknown(*_: Any) -> Any:
        raise KeyError("a removed file of unknown origin")

    monkeypatch.setattr("maintd.table.table.changed_files", unknown)
    assert table.change_inputs(start, table.version).changed is None
    used: list[str] = []

    def counted(answer: Any) -> Any:
        def wrapped(self: Any, group: Any) -> Any:
            found = answer(self, group)
            if found is not None:
                used.append(self.name)
            return found
        return wrapped

    for strategy in STRATEGIES:
        monkeypatch.setattr(type(strategy), "answer", counted(type(strategy).answer))
    got = sorted_rows(table.changes(start), KEYS)
    assert {(r["id"], r["_change"]) for r in got} == {(1, "update"), (2, "delete"), (30, "insert")}
    assert got == sorted_rows(table.full_changes(start), KEYS)
    assert used and set(used) == {"full diff"}
