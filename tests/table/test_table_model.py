"""Property tests: any sequence of writes reads back, at every version, as a plain dict model says.

Random sequences of upserts (repeated keys in one batch included), key deletes, overwrites of a
partition or of the whole table, property changes and maintd's own maintenance (clustering and compaction:
planner, execution, commit) run against a real table;
``read()`` at every version must equal the model at that version, and ``changes(a, b)`` the
model's diff, for every pair of versions.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from maintd import Table

from .table_helpers import Model, groups, maintain, rewrite_bucket, sorted_rows


@dataclass(frozen=True)
class Layout:
    name: str
    schema: pa.Schema
    primary_key: tuple[str, ...]
    partition_by: tuple[str, ...]
    buckets: int

    @property
    def keys(self) -> tuple[str, ...]:
        return (*self.partition_by, *self.primary_key)


LAYOUTS = [
    Layout("composite key, unpartitioned",
           pa.schema([pa.field("id", pa.int64(), False), pa.field("tag", pa.string(), False), ("name", pa.string()),
                      ("amount", pa.float64())]),
           ("id", "tag"), (), 3),
    Layout("partitioned by ds",
           pa.schema([pa.field("id", pa.int64(), False), ("ds", pa.string()), ("name", pa.string()),
                      ("amount", pa.float64())]),
           ("id",), ("ds",), 2),
]
PARTITIONS = ("2024-01-01", "2024-01-02")

names = st.none() | st.sampled_from(["a", "b", "é", "long name"])
amounts = st.none() | st.integers(-4, 4).map(lambda i: i / 2)


def rows_of(layout: Layout, min_size: int, max_size: int, ds: str | None = None) -> st.SearchStrategy[list[Any]]:
    def row(id_: int, tag: str, part: str, name: str | None, amount: float | None) -> dict[str, Any]:
        r: dict[str, Any] = {"id": id_, "name": name, "amount": amount}
        r |= {"ds": ds or part} if layout.partition_by else {"tag": tag}
        return r

    one = st.builds(row, st.integers(0, 11), st.sampled_from(["x", "yy"]), st.sampled_from(PARTITIONS), names,
                    amounts)
    return st.lists(one, min_size=min_size, max_size=max_size)


def operations(layout: Layout) -> st.SearchStrategy[tuple[Any, ...]]:
    upsert = st.tuples(st.just("upsert"), rows_of(layout, 1, 6), st.booleans())
    delete = st.tuples(st.just("delete"), rows_of(layout, 1, 4))
    whole = st.tuples(st.just("overwrite"), st.none(), rows_of(layout, 0, 4))
    overwrite = whole
    if layout.partition_by:
        one_partition = st.sampled_from(PARTITIONS).flatmap(
            lambda ds: st.tuples(st.just("overwrite"), st.just(ds), rows_of(layout, 0, 4, ds)))
        overwrite = whole | one_partition
    props = st.tuples(st.just("properties"), st.integers(1, 168))
    compact = st.tuples(st.just("compact"), st.integers(0, 20))
    return st.one_of(upsert, upsert, delete, overwrite, props, compact)


def apply(table: Table, model: Model, layout: Layout, op: tuple[Any, ...]) -> None:
    """Run one operation on the table and the model; every operation that commits takes the next version."""
    expected = table.version + 1
    kind = op[0]
    if kind == "upsert":
        data = pa.Table.from_pylist(op[1], schema=layout.schema)
        version = table.upsert(data.to_pandas() if op[2] else data)
        model.upsert(version, op[1])
    elif kind == "delete":
        keys = pa.Table.from_pylist([{k: r[k] for k in layout.keys} for r in op[1]])
        version = table.delete(keys)
        model.delete(version, op[1])
    elif kind == "overwrite":
        partition = None if op[1] is None else {"ds": op[1]}
        version = table.overwrite(pa.Table.from_pylist(op[2], schema=layout.schema), partition=partition)
        model.overwrite(version, op[2], partition)
    elif kind == "properties":
        version = table.set_properties({"acid.data.retain.hours": op[1]})
        model.unchanged(version)
    else:  # maintd's own maintenance: clustering or compaction of every bucket the planner picks
        maintained = maintain(table, "cluster" if op[1] % 3 == 0 else "compact")
        if maintained is None:
            return
        version = maintained
        model.unchanged(version)
    assert version == expected, f"{kind} committed version {version}, expected the next version {expected}"


def check_reads_and_changes(table: Table, model: Model, layout: Layout) -> None:
    versions = sorted(model.versions)
    for v in versions:
        assert sorted_rows(table.read(version=v), layout.keys) == model.visible(v), f"read at version {v}"
    for i, a in enumerate(versions):
        for b in versions[i + 1:]:
            assert sorted_rows(table.changes(a, b), layout.keys) == model.diff(a, b), f"changes({a}, {b})"
    assert sorted_rows(table.changes(versions[0]), layout.keys) == model.diff(versions[0], versions[-1])


@pytest.mark.slow
@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda lay: lay.name)
def test_reads_and_changes_match_the_model_at_every_version(layout: Layout) -> None:
    @settings(max_examples=30, deadline=None)
    @given(ops=st.lists(operations(layout), min_size=1, max_size=12))
    def run(ops: list[tuple[Any, ...]]) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            table = Table.create(f"{tmp}/t", layout.schema, primary_key=layout.primary_key,
                                 partition_by=layout.partition_by, buckets=layout.buckets)
            model = Model(tuple(layout.schema.names), layout.primary_key, layout.partition_by)
            model.unchanged(0)
            for op in ops:
                apply(table, model, layout, op)
            reopened = Table.open(table.uri)  # a fresh process's view: from the log alone
            check_reads_and_changes(reopened, model, layout)

    run()


def test_repeated_keys_in_one_batch_settle_to_the_last_occurrence(tmp_path: Any) -> None:
    table = Table.create(str(tmp_path / "t"), "id:int64!,name:string", primary_key="id", buckets=2)
    v = table.upsert(pd.DataFrame({"id": [1, 2, 1, 1], "name": ["a", "b", "c", "d"]}))
    assert sorted_rows(table.read(), ["id"]) == [{"id": 1, "name": "d"}, {"id": 2, "name": "b"}]
    assert sum(f.rows for f in table.snapshot(v).files.values()) == 2  # one row per key in a commit


def test_a_bucket_holding_only_a_clustered_file_reads_one_row_per_key(tmp_path: Any) -> None:
    table = Table.create(str(tmp_path / "t"), "id:int64!,name:string", primary_key="id", buckets=1)
    table.upsert(pa.table({"id": [1, 2], "name": ["a", "b"]}))
    table.upsert(pa.table({"id": [1], "name": ["c"]}))
    snap = table.snapshot()
    prepared = rewrite_bucket(table, snap, groups(snap)[0], "cluster")
    assert prepared is not None
    prepared.commit()
    assert [(f.kind, f.level) for f in table.snapshot().files.values()] == [("delta", 1)]
    assert sorted_rows(table.read(), ["id"]) == [{"id": 1, "name": "c"}, {"id": 2, "name": "b"}]
