"""A unit's partition columns: not read from its inputs, written back as a dictionary of one value, and read
by every reader exactly as a column written the ordinary way (docs/format.md, "Data files")."""

from __future__ import annotations

import datetime
import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from maintd import Table
from maintd.execution import ExecutionOptions, commit_rewrites, execute
from maintd.execution.output import constant_column, with_constants
from maintd.table.files.datafiles import file_schema

from .helpers import plan_all

PARTS = ("d", "ts", "n", "s", "b")
SCHEMA = "d:date!,ts:timestamp!,n:int32!,s:string!,b:binary!,id:int64!,name:string,qty:int64"


def _batch(rng: np.random.Generator, d: int, keys: np.ndarray, deletes: float = 0.2) -> pa.Table:
    n = len(keys)
    return pa.table({
        "d": pa.array([datetime.date(2026, 1, 1 + d)] * n, pa.date32()),
        "ts": pa.array([datetime.datetime(2026, 1, 1, 12, 0, 0, 123456 + d)] * n, pa.timestamp("us")),
        "n": pa.array([-7 * d] * n, pa.int32()), "s": [f"région-{d}"] * n, "b": [bytes([0x6B, d])] * n,
        "id": pa.array(keys, pa.int64()), "name": [f"n{k}-{rng.integers(9)}" for k in keys],
        "qty": pa.array(rng.integers(0, 50, n), pa.int64()),
        "op": pa.array((rng.random(n) < deletes).astype(np.int8))})


def _table(root: Path, memory: int) -> tuple[Table, ExecutionOptions]:
    table = Table.create(str(root / "t"), SCHEMA, primary_key="id", partition_by=PARTS, buckets=2,
                         properties={"changes.prior.rows": "true"})
    rng = np.random.default_rng(3)
    for i in range(12):
        for d in (0, 1):
            table.write_changes(_batch(rng, d, rng.choice(400, 60, replace=False)), "op")
        if i == 5:  # a BaseFile below the later DeltaFiles: the compaction stores prior rows
            plan = plan_all(table, "compact")
            assert commit_rewrites(table, plan, execute(plan, table, None, ExecutionOptions())).version
    return table, ExecutionOptions(task_memory_bytes=memory)


def _ordinary_footer(schema: pa.Schema) -> dict[bytes, bytes]:
    """The footer entries pyarrow writes for ``schema`` the ordinary way."""
    buf = io.BytesIO()
    pq.write_table(schema.empty_table(), buf)
    return dict(pq.read_metadata(pa.BufferReader(buf.getvalue())).metadata or {})


@pytest.mark.parametrize("memory", [1 << 29, 6_000], ids=["memory", "stream"])
def test_outputs_write_the_partition_columns_as_one_value_and_read_back_as_the_table_types(
        tmp_path: Path, memory: int) -> None:
    table, options = _table(tmp_path, memory)
    start = table.snapshot().version
    order = [("d", "ascending"), ("id", "ascending")]
    before = table.read().sort_by(order)
    expected_changes = table.full_changes(6)
    types = {f.name: f.type for f in file_schema(table.snapshot().metadata, "base", None) if f.name in PARTS}
    assert types["ts"] == pa.timestamp("us") and types["b"] == pa.binary()

    priors = 0
    for kind in ("cluster", "compact"):
        plan = plan_all(table, kind, only_level0=kind == "cluster")
        results = execute(plan, table, None, options)
        assert all(r.ok for r in results), [r.error for r in results]
        assert {r.mode for r in results} <= ({"memory"} if memory > 1 << 20 else {"stream", "spill"})
        assert commit_rewrites(table, plan, results).version is not None
        md = table.snapshot().metadata
        for r in results:
            written = [(a.path, file_schema(md, a.kind, a.level)) for a in r.adds]
            written += [(p.path, None) for p in r.priors]
            priors += len(r.priors)
            for path, schema in written:
                full = table.storage.full_path(path)
                meta = pq.read_metadata(full)
                rows = pq.read_table(full)
                if schema is not None:  # a data file: its Arrow schema is the format's, footer and all
                    assert rows.schema.equals(schema, check_metadata=True)
                    assert {k: v for k, v in (meta.metadata or {}).items() if k != b"maintd.key_index"} \
                        == _ordinary_footer(schema)
                part = {v for v in zip(*(rows.column(c).to_pylist() for c in PARTS), strict=True) if v[0] is not None}
                assert len(part) == 1, "one partition per unit"
                for c in PARTS:
                    assert rows.schema.field(c).type == types[c]
                    col = meta.row_group(0).column(meta.schema.names.index(c))
                    assert col.has_dictionary_page and "RLE_DICTIONARY" in col.encodings
                    assert col.total_uncompressed_size < 160, "one value, and indices that are all the same"
                    if schema is not None:
                        assert col.statistics.min == col.statistics.max == rows.column(c)[0].as_py()
        assert table.read().sort_by(order).equals(before)
    assert table.snapshot().version > start and priors == 4, "the compaction stored prior rows in every bucket"
    by = [*order, ("_change_version", "ascending"), ("_change", "ascending")]
    assert table.changes(6).sort_by(by).equals(expected_changes.sort_by(by))


def test_a_constant_column_is_one_dictionary_value_or_all_null() -> None:
    value = pa.array([datetime.datetime(2026, 1, 1, 0, 0, 0, 1)], pa.timestamp("us", "Europe/Berlin"))
    col = constant_column(value, 4)
    assert col.dictionary.equals(value) and col.indices.to_pylist() == [0] * 4 and col.type.value_type == value.type
    none = constant_column(pa.nulls(1, pa.string()), 3)
    assert none.null_count == 3 and len(none.dictionary) == 0
    schema = pa.schema([pa.field("p", pa.string()), pa.field("id", pa.int64(), nullable=False)])
    t = with_constants(pa.table({"id": pa.array([1, 2], pa.int64())}), schema, {"p": pa.array(["x"])})
    assert t.column_names == ["p", "id"] and t.column("p").type == pa.dictionary(pa.int32(), pa.string())
    assert t.column("p").to_pylist() == ["x", "x"]


def test_a_plan_whose_tasks_share_an_id_or_read_another_partition_is_refused_before_anything_runs(
        tmp_path: Path) -> None:
    """Results and commits are matched to tasks by id, and a task writes into its own partition and bucket:
    a plan breaking either would drop rows, so it is refused with the task named."""
    from maintd.errors import InvalidInputError
    from maintd.execution import PlanDoc, task_specs

    table, _ = _table(tmp_path, 1 << 29)
    snap = table.snapshot()
    plan = plan_all(table, "cluster")
    twins = [t.model_copy(update={"task_id": "same"}) for t in plan.tasks[:2]]
    with pytest.raises(InvalidInputError, match="two tasks with id 'same'"):
        task_specs(PlanDoc(table_uri=plan.table_uri, read_version=plan.read_version, tasks=(*twins,)), snap)
    first, other = plan.tasks[0], next(t for t in plan.tasks if t.partition != plan.tasks[0].partition)
    mixed = first.model_copy(update={"inputs": (*first.inputs, other.inputs[0])})
    with pytest.raises(InvalidInputError, match=f"task {first.task_id} is for partition .* reads {other.inputs[0]}"):
        task_specs(PlanDoc(table_uri=plan.table_uri, read_version=plan.read_version, tasks=(mixed,)), snap)
    before = {f.path for f in table.storage.walk()}
    with pytest.raises(InvalidInputError):
        execute(PlanDoc(table_uri=plan.table_uri, read_version=plan.read_version, tasks=(*twins,)), table, None,
                ExecutionOptions())
    assert {f.path for f in table.storage.walk()} == before and table.snapshot().version == snap.version


def test_a_binary_partition_value_that_is_not_utf8_is_refused_by_name_and_nothing_is_written(
        tmp_path: Path) -> None:
    from maintd.errors import InvalidInputError

    table = Table.create(str(tmp_path / "t"), "b:binary!,id:int64!,v:string", primary_key="id", partition_by="b",
                         buckets=1)
    before = table.snapshot().version
    with pytest.raises(InvalidInputError, match="partition column 'b' holds a value that is not UTF-8 text"):
        table.upsert(pa.table({"b": [b"\xff\x00"], "id": pa.array([1], pa.int64()), "v": ["x"]}))
    assert table.snapshot().version == before and not [f for f in table.storage.walk() if "_log" not in f.path]
    table.upsert(pa.table({"b": [b"ok"], "id": pa.array([1], pa.int64()), "v": ["x"]}))
    assert table.read().to_pylist() == [{"b": b"ok", "id": 1, "v": "x"}]
