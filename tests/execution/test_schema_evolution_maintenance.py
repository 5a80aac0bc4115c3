"""Maintenance of a table whose schema gained columns: clustering and compaction (whole units, key ranges,
spilled runs) by maintd's own planner and execution, in process and on Spark, read files written before and
after the change, write the new columns into their outputs, and change no row; reclamation keeps what retained
versions read. Every retained version reads as a model says, with the schema it had."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from maintd import Table
from maintd.execution import ExecutionOptions, run_plan
from maintd.planner import default_policy, plan, with_overrides
from maintd.reclaim import reclaim_table

CLUSTER = with_overrides(default_policy(), {"clustering": {"level1": {"min_files": 2}},
                                            "compaction": {"enabled": False}})
COMPACT = with_overrides(default_policy(), {"clustering": {"enabled": False},
                                            "compaction": {"max_delta_files": 1, "min_interval_hours": 0,
                                                           "target_file_bytes": 6_000}})
MODES = [ExecutionOptions(), ExecutionOptions(task_input_bytes=3_000),
         ExecutionOptions(task_input_bytes=3_000, task_memory_bytes=40_000)]
BEFORE = pa.schema([pa.field("id", pa.int64(), False), pa.field("region", pa.string(), False),
                    pa.field("name", pa.string())])


class Model:
    """The rows each version holds, by key, and the columns of each version."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, int], dict[str, Any]] = {}
        self.columns = list(BEFORE.names)
        self.at: dict[int, tuple[list[str], dict[tuple[str, int], dict[str, Any]]]] = {}

    def write(self, version: int, upserts: list[dict[str, Any]], deletes: list[tuple[str, int]] = ()) -> None:
        for r in upserts:
            self.rows[r["region"], r["id"]] = {c: r.get(c) for c in self.columns}
        for k in deletes:
            self.rows.pop(k, None)
        self.at[version] = (list(self.columns), {k: dict(v) for k, v in self.rows.items()})

    def add(self, version: int, names: list[str]) -> None:
        self.columns += names
        for r in self.rows.values():
            r.update(dict.fromkeys(names))
        self.at[version] = (list(self.columns), {k: dict(v) for k, v in self.rows.items()})

    def same(self, version: int) -> None:
        self.at[version] = self.at[max(v for v in self.at if v < version)]

    def check(self, table: Table, oldest: int = 0) -> None:
        for v, (columns, rows) in self.at.items():
            if v < oldest:
                continue
            got = table.read(version=v)
            assert got.column_names == columns, (v, got.column_names)
            assert sorted(got.to_pylist(), key=lambda r: (r["region"], r["id"])) == [
                rows[k] for k in sorted(rows)], v


def _rows(lo: int, hi: int, tag: str, **extra: Any) -> list[dict[str, Any]]:
    return [{"id": i, "region": "eu" if i % 2 else "us", "name": f"{tag}{i}", **extra} for i in range(lo, hi)]


def _maintain(table: Table, model: Model, policy: Any, options: ExecutionOptions, spark: Any) -> int:
    made = plan(table.snapshot(), policy, datetime.now(UTC), table.uri)
    if not made.tasks:
        return 0
    opts = options.model_copy(update={"in_process_max_bytes": 0 if spark is not None else 1 << 40})
    report = run_plan(made, table, spark, opts, commit=True)
    assert all(r.ok for r in report.results), [r.error for r in report.results]
    assert report.outcome is not None
    for v in report.outcome.versions:
        model.same(v)
    return len(report.outcome.committed)


def _scenario(root: Path, spark: Any) -> None:
    table = Table.create(str(root / "t"), BEFORE, primary_key=["region", "id"], partition_by="region", buckets=2,
                         properties={"changes.prior.rows": "lookup", "acid.data.retain.hours": 1,
                                     "log.checkpoint.interval": 4})
    model = Model()
    model.at[0] = (list(BEFORE.names), {})
    for n in range(4):  # files without the new columns, clustered and compacted before the change
        model.write(table.upsert(pa.Table.from_pylist(_rows(n * 10, n * 10 + 30, f"a{n}"), schema=BEFORE)),
                    _rows(n * 10, n * 10 + 30, f"a{n}"))
    assert _maintain(table, model, COMPACT, MODES[0], spark)
    model.write(table.upsert(pa.Table.from_pylist(_rows(5, 25, "b"), schema=BEFORE)), _rows(5, 25, "b"))

    added = table.add_columns("score:float64,tags:string")
    model.add(added, ["score", "tags"])
    assert table.snapshot().protocol.min_reader_version == 6
    model.check(table)

    for n in range(3):  # new rows with the columns, some writers that do not know them, deletes
        rows = _rows(n * 7, n * 7 + 12, f"c{n}", score=float(n), tags=f"t{n}")
        model.write(table.upsert(pa.Table.from_pylist(rows)), rows)
        old = _rows(40 + n, 44 + n, f"d{n}")
        model.write(table.upsert(pa.Table.from_pylist(old, schema=BEFORE)), old)
        gone = [("eu", 2 * n + 1)]
        model.write(table.delete(pa.table({"id": [k[1] for k in gone], "region": [k[0] for k in gone]})), [],
                    gone)
    model.check(table)
    assert _maintain(table, model, CLUSTER, MODES[0], spark)
    model.check(table)
    for options in MODES:
        rows = _rows(3, 9, "e", score=9.5)
        model.write(table.upsert(pa.Table.from_pylist(rows)), rows)
        assert _maintain(table, model, COMPACT, options, spark)
        model.check(table)
    snap = table.snapshot()
    bases = [f for f in snap.files.values() if f.kind == "base"]
    assert bases and all(f.max_version > added for f in bases)
    for f in bases:  # maintenance carries the new columns into what it writes
        names = pq.read_schema(Path(table.uri) / f.path).names
        assert {"score", "tags"} <= set(names), (f.path, names)
    feed = table.changes(added - 1)
    assert {"score", "tags"} <= set(feed.column_names)

    report = reclaim_table(table, now=datetime.now(UTC) + timedelta(hours=2), orphan_grace=timedelta(0),
                           force_short_grace=True)
    model.check(table, oldest=report.oldest_retained_version)


@pytest.mark.slow
def test_maintenance_in_process_carries_added_columns_and_changes_no_row(tmp_path: Path) -> None:
    _scenario(tmp_path, None)


@pytest.mark.slow
def test_maintenance_on_spark_carries_added_columns_and_changes_no_row(tmp_path: Path, spark: Any) -> None:
    _scenario(tmp_path, spark)
