"""Streaming reads: filters, pruning, key ranges, and memory bounded by one bucket (or key range)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from maintd import InvalidInputError, Table
from maintd.table.files.bucketing import bucket_of

HERE = Path(__file__).parent
SCHEMA = "id:int64!,region:string!,name:string,amount:float64"


def _table(root: Path, *, buckets: int = 4, commits: int = 6, partitioned: bool = True) -> Table:
    t = Table.create(str(root / "t"), SCHEMA, primary_key="id", partition_by="region" if partitioned else (),
                     buckets=buckets)
    rng = np.random.default_rng(3)
    for _ in range(commits):
        ids = rng.integers(0, 500, 200)
        t.write_changes(pa.table({"id": ids, "region": [("eu", "us")[int(i) % 2] for i in ids],
                                  "name": [None if i % 7 == 0 else f"n{i}" for i in ids], "amount": rng.random(200),
                                  "op": pa.array((rng.random(200) < 0.2).astype(np.int8))}), "op")
    return t


def _ranged_table(root: Path, chunks: int, rows: int) -> Table:
    """One bucket whose level-0 files hold disjoint key ranges (as compaction's per-range base files do),
    then two small files of updates and deletes spread over the whole range."""
    t = Table.create(str(root / "ranged"), SCHEMA, primary_key="id", buckets=1)
    for c in range(chunks):
        ids = np.arange(c * rows, (c + 1) * rows)
        t.upsert(pa.table({"id": ids, "region": ["eu"] * rows, "name": [f"name-{i:09d}" for i in ids],
                           "amount": ids * 0.5}))
    rng = np.random.default_rng(5)
    for op in (0, 1):
        ids = rng.choice(chunks * rows, 500, replace=False)
        t.write_changes(pa.table({"id": ids, "region": ["eu"] * 500, "name": ["changed"] * 500,
                                  "amount": np.zeros(500), "op": pa.array([op] * 500, pa.int8())}), "op")
    return t


def _streamed(t: Table, **kw: Any) -> pa.Table:
    scan = t.scan(**kw)
    return pa.Table.from_batches(list(scan.to_batches()), schema=scan.schema)


def _same(got: pa.Table, expected: pa.Table) -> bool:
    """Equal rows in equal order (nullability aside: ``Table.read()`` takes it from the files it read)."""
    return got.equals(expected.cast(got.schema))


# -- filters ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "expr"), [
    ("region = 'eu'", pc.field("region") == "eu"),
    ("id >= 100 and id < 200", (pc.field("id") >= 100) & (pc.field("id") < 200)),
    ("id in (1, 2, 3) or name is null", pc.field("id").isin([1, 2, 3]) | pc.field("name").is_null()),
    ("name not in ('n1', 'n2') and amount <> 0.5", ~pc.field("name").isin(["n1", "n2"]) & (pc.field("amount") != 0.5)),
    ("`region` != 'us' and name is not null", (pc.field("region") != "us") & pc.field("name").is_valid()),
    ("amount > 0.25 or amount <= 0.1e-1", (pc.field("amount") > 0.25) | (pc.field("amount") <= 0.01)),
])
def test_a_filter_string_selects_the_rows_a_pyarrow_expression_selects(tmp_path: Path, text: str,
                                                                      expr: pc.Expression) -> None:
    t = _table(tmp_path)
    full = t.read()
    expected = full.filter(expr & pc.field("name").is_valid()) if "not in" in text else full.filter(expr)
    assert _same(_streamed(t, filter=text).sort_by("id"), expected.sort_by("id"))


def test_tuple_filters_are_anded_and_lists_of_them_ored(tmp_path: Path) -> None:
    t = _table(tmp_path)
    full = t.read()
    both = _streamed(t, filter=[("region", "=", "eu"), ("id", "<", 100)])
    assert _same(both.sort_by("id"), full.filter((pc.field("region") == "eu") & (pc.field("id") < 100)).sort_by("id"))
    either = _streamed(t, filter=[[("id", "<", 10)], [("id", ">", 490)]])
    assert _same(either.sort_by("id"), full.filter((pc.field("id") < 10) | (pc.field("id") > 490)).sort_by("id"))


@pytest.mark.parametrize(("spec", "message"), [
    ("colour = 'red'", "column 'colour', which the table does not have"),
    ("id = 'seven'", "cannot be compared with column 'id'"),
    ("id == ", "expected a value"),
    ("id = 1 and", "expected a column name"),
    ("id between 1 and 2", "expected an operator"),
    ("id = null", "use 'is null'"),
    ("", "it is empty"),
    ([("id", "~", 1)], "unknown operator"),
    ([("id", "in", 5)], "needs a list of values"),
    (42, "a filter is a string"),
])
def test_a_bad_filter_is_refused_with_what_is_wrong(tmp_path: Path, spec: Any, message: str) -> None:
    t = _table(tmp_path, commits=1)
    with pytest.raises(InvalidInputError, match=message):
        t.scan(filter=spec)


def test_unknown_columns_are_refused_by_name(tmp_path: Path) -> None:
    t = _table(tmp_path, commits=1)
    with pytest.raises(InvalidInputError, match=r"unknown column.*colour"):
        list(t.to_batches(columns=["id", "colour"]))


# -- pruning ---------------------------------------------------------------------------------
def test_a_partition_filter_reads_only_that_partitions_files(tmp_path: Path) -> None:
    t = _table(tmp_path)
    snap = t.snapshot()
    scan = t.scan(filter="region = 'eu'")
    eu_files = {f.path for f in snap.files.values() if f.partition == {"region": "eu"}}
    assert {f.path for u in scan.plan.units for f in u.files} == eu_files
    assert 0 < scan.plan.files_read == len(eu_files) < scan.plan.files_live
    assert _same(_streamed(t, filter="region = 'eu'"), t.read().filter(pc.field("region") == "eu"))


def test_key_equalities_read_only_the_buckets_the_keys_hash_to(tmp_path: Path) -> None:
    t = _table(tmp_path, buckets=8, partitioned=False)
    keys = [11, 12, 250]
    buckets = set(bucket_of(pa.table({"id": pa.array(keys, pa.int64())}), ["id"], 8).tolist())
    scan = t.scan(filter=[("id", "in", keys)])
    assert {u.bucket for u in scan.plan.units} == buckets and len(buckets) < 8
    expected = t.read().filter(pc.field("id").isin(keys))
    assert _same(_streamed(t, filter=[("id", "in", keys)]).sort_by("id"), expected.sort_by("id"))


def test_key_ranges_skip_files_whose_key_bounds_exclude_them(tmp_path: Path) -> None:
    t = _ranged_table(tmp_path, chunks=6, rows=1000)
    scan = t.scan(filter="id >= 1500 and id < 2500")
    chunk_files = [f for f in t.snapshot().files.values() if f.rows == 1000]
    read = {f.path for u in scan.plan.units for f in u.files}
    assert len([f for f in chunk_files if f.path in read]) == 2  # chunks [1000, 2000) and [2000, 3000)
    assert scan.plan.files_read == 4 and scan.plan.files_live == 8  # plus the two spread-out files
    expected = t.read().filter((pc.field("id") >= 1500) & (pc.field("id") < 2500))
    assert _same(_streamed(t, filter="id >= 1500 and id < 2500"), expected)


def test_a_pruned_file_never_resurrects_a_deleted_or_older_row(tmp_path: Path) -> None:
    t = Table.create(str(tmp_path / "t"), SCHEMA, primary_key="id", buckets=1)
    t.upsert(pa.table({"id": [1, 5, 9], "region": ["eu"] * 3, "name": ["a", "b", "c"], "amount": [1.0, 2.0, 3.0]}))
    t.delete(pa.table({"id": [5], "region": ["eu"]}))  # a file holding only key 5: pruned by id >= 6
    t.upsert(pa.table({"id": [9], "region": ["eu"], "name": ["c2"], "amount": [4.0]}))
    assert _streamed(t, filter="id >= 6").to_pylist() == [{"id": 9, "region": "eu", "name": "c2", "amount": 4.0}]
    assert _streamed(t, filter="amount >= 2").to_pylist() == [{"id": 9, "region": "eu", "name": "c2",
                                                                "amount": 4.0}]


# -- key ranges ------------------------------------------------------------------------------
def test_a_large_bucket_read_in_key_ranges_gives_the_rows_of_a_whole_read(tmp_path: Path) -> None:
    t = _ranged_table(tmp_path, chunks=5, rows=800)
    whole = t.read()
    chunk_bytes = max(f.bytes for f in t.snapshot().files.values())
    scan = t.scan(split_bytes=chunk_bytes)
    assert len(scan.plan.units) == 5 and all(u.bucket == 0 for u in scan.plan.units)
    assert _same(_streamed(t, split_bytes=chunk_bytes), whole)
    assert _same(_streamed(t, split_bytes=chunk_bytes, filter="name = 'changed'"),
                 whole.filter(pc.field("name") == "changed"))


# -- memory ------------------------------------------------------------------------------------
def _peak(uri: str, mode: str, *args: str) -> dict[str, int]:
    out = subprocess.run([sys.executable, str(HERE / "scan_worker.py"), uri, mode, *args], capture_output=True,
                         text=True, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.slow
def test_to_batches_reads_a_table_larger_than_its_memory_cap(tmp_path: Path) -> None:
    t = _ranged_table(tmp_path, chunks=16, rows=25_000)
    table_bytes = t.read().nbytes
    cap = table_bytes // 2
    chunk_bytes = max(f.bytes for f in t.snapshot().files.values())
    whole = _peak(t.uri, "read")
    ranged = _peak(t.uri, "stream", str(chunk_bytes))
    assert ranged["rows"] == whole["rows"] and ranged["checksum"] == whole["checksum"]
    assert whole["peak"] > cap  # reading it whole does not fit the cap...
    assert ranged["peak"] < cap  # ...streaming it in key ranges does


@pytest.mark.slow
def test_to_batches_holds_one_bucket_at_a_time(tmp_path: Path) -> None:
    t = Table.create(str(tmp_path / "b"), SCHEMA, primary_key="id", buckets=16)
    rng = np.random.default_rng(1)
    for c in range(4):
        ids = np.arange(c * 100_000, (c + 1) * 100_000)
        t.upsert(pa.table({"id": ids, "region": ["eu"] * len(ids), "name": [f"name-{i:09d}" for i in ids],
                           "amount": rng.random(len(ids))}))
    cap = t.read().nbytes // 2
    whole, streamed = _peak(t.uri, "read"), _peak(t.uri, "stream")
    assert streamed["rows"] == whole["rows"] == 400_000 and streamed["checksum"] == whole["checksum"]
    assert whole["peak"] > cap > streamed["peak"]
