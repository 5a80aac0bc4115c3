"""A table with NOT NULL value columns, read after maintenance.

The files of a bucket differ in nullability: a DeltaFile above level 0 holds delete rows (null values), a
BaseFile's columns are as the table says. Reads concatenate buckets and files; they once failed with
``ArrowInvalid: Schema at index 1 was different`` as soon as one bucket had been compacted and another had not.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa

from maintd import Table
from maintd.execution import run_plan
from maintd.planner import default_policy, plan, with_overrides


def test_reads_scans_and_the_feed_of_not_null_value_columns_work_after_a_partial_compaction(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "t"), "id:int64!,name:string!,n:int32!,ds:string!", primary_key="id",
                         partition_by="ds", buckets=2)
    for i in range(3):
        table.upsert(pa.table({"id": pa.array([i, i + 10], pa.int64()), "name": [f"a{i}", f"b{i}"],
                               "n": pa.array([i, i], pa.int32()), "ds": ["x", "x"]}))
    table.delete(pa.table({"id": pa.array([1], pa.int64()), "ds": ["x"]}))
    policy = with_overrides(default_policy(), {"clustering": {"level1": {"min_files": 2}},
                                               "compaction": {"enabled": False}})
    clustered = run_plan(plan(table.snapshot(), policy, datetime.now(UTC), table.uri), table, None, commit=True)
    assert clustered.outcome is not None and clustered.outcome.version is not None
    compact = with_overrides(default_policy(), {"clustering": {"enabled": False},
                                                "compaction": {"max_delta_files": 1, "min_interval_hours": 0}})
    made = plan(table.snapshot(), compact, datetime.now(UTC), table.uri)
    run_plan(made.model_copy(update={"tasks": made.tasks[:1]}), table, None, commit=True)  # one bucket only
    kinds = {frozenset(f.kind for f in fs) for fs in table.snapshot().by_bucket().values()}
    assert kinds == {frozenset({"base"}), frozenset({"delta"})}, kinds
    table.upsert(pa.table({"id": pa.array([50], pa.int64()), "name": ["late"], "n": pa.array([5], pa.int32()),
                           "ds": ["x"]}))
    read = table.read()
    assert sorted(read.column("id").to_pylist()) == [0, 2, 10, 11, 12, 50]
    assert not read.schema.field("name").nullable and not read.schema.field("n").nullable
    assert table.scan(split_bytes=1).to_table().num_rows == 6
    assert table.changes(0).num_rows == 6
    assert {r["_change"] for r in table.changes(table.version - 4).to_pylist()} <= {"insert", "update", "delete"}
