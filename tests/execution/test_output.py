"""The files a unit writes: which columns are compressed, and which text columns are encoded per row group."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from maintd import Table
from maintd.execution import ExecutionOptions, commit_rewrites, execute
from maintd.execution import output as output_module
from maintd.execution.output import without_rejected_text

from .helpers import plan_all

SCHEMA = "id:int64!,token:string,hash:int64,label:string,status:string"


def _batch(rng: np.random.Generator, n: int, keyspace: int) -> pa.Table:
    statuses = ["open", "closed", "pending"]
    return pa.table({
        "id": pa.array(rng.integers(0, keyspace, n), pa.int64()),
        "token": [secrets.token_hex(12) for _ in range(n)],  # random hex: nothing for LZ4 to match, half for zstd
        "hash": pa.array(rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64)),  # random bits: nothing to shrink
        "label": [f"label-{i % 300:04d}-{'y' * (i % 11)}" for i in rng.integers(0, 300, n)],  # repetitive text
        "status": [statuses[i] for i in rng.integers(0, 3, n)],  # few values: a dictionary
        "op": pa.array((rng.random(n) < 0.1).astype(np.int8)),
    })


def _table(root: Path, commits: int = 6, rows: int = 1500) -> Table:
    table = Table.create(str(root / "t"), SCHEMA, primary_key="id", buckets=2)
    rng = np.random.default_rng(7)
    for _ in range(commits):
        table.write_changes(_batch(rng, rows, 4 * rows), "op")
    return table


def _codecs(table: Table, path: str) -> dict[str, str]:
    group = pq.ParquetFile(table.storage.full_path(path)).metadata.row_group(0)
    return {group.column(i).path_in_schema: group.column(i).compression for i in range(group.num_columns)}


@pytest.mark.parametrize("kind", ["cluster", "compact"])
def test_a_column_its_codec_cannot_shrink_is_stored_uncompressed_and_reads_the_same(tmp_path: Path, kind: str) -> None:
    table = _table(tmp_path)
    expected = table.read().sort_by("id")
    plan = plan_all(table, kind)
    results = execute(plan, table, None, ExecutionOptions(in_process_workers="threads"))
    assert all(r.ok for r in results)
    assert commit_rewrites(table, plan, results).committed
    outputs = [a for r in results for a in r.adds]
    assert outputs
    for a in outputs:
        codecs = _codecs(table, a.path)
        assert codecs["hash"] == "UNCOMPRESSED"
        assert codecs["label"] == ("LZ4" if kind == "cluster" else "ZSTD")
        assert codecs["status"] == ("LZ4" if kind == "cluster" else "ZSTD"), "a dictionary column keeps its codec"
        # LZ4 finds no repeats in random hex; zstd's entropy coding still halves it
        assert codecs["token"] == ("UNCOMPRESSED" if kind == "cluster" else "ZSTD")
    assert table.read().sort_by("id").equals(expected)


def test_after_the_first_row_group_only_the_text_columns_it_chose_are_encoded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Which text columns are dictionaries is decided by a file's first row group: encoding the others again in
    every later row group would be thrown away."""
    table = _table(tmp_path, commits=4, rows=600)
    expected = table.read().sort_by("id")
    calls: list[int] = []
    real = output_module.encode_text

    def counting(values: Any) -> Any:
        calls.append(len(values))
        return real(values)

    monkeypatch.setattr(output_module, "encode_text", counting)
    monkeypatch.setattr("maintd.execution.rewrite._row_group_rows", lambda spec: 200)
    plan = plan_all(table, "cluster")
    results = execute(plan, table, None, ExecutionOptions(in_process_workers="threads"))
    assert all(r.ok for r in results)
    assert commit_rewrites(table, plan, results).committed
    groups = 0
    for a in (a for r in results for a in r.adds):
        meta = pq.ParquetFile(table.storage.full_path(a.path)).metadata
        assert meta.num_row_groups > 1
        groups += meta.num_row_groups
    files = len(results)
    # the first row group of each file: the three text columns; each later one: status only
    assert len(calls) == 3 * files + (groups - files)
    assert table.read().sort_by("id").equals(expected)


def _dictionary_pages(table: Table, path: str) -> dict[str, bool]:
    meta = pq.ParquetFile(table.storage.full_path(path)).metadata
    return {meta.row_group(0).column(i).path_in_schema: any(
        meta.row_group(g).column(i).has_dictionary_page for g in range(meta.num_row_groups))
        for i in range(meta.num_columns)}


def test_a_compaction_never_hashes_a_text_column_the_sample_turned_away_into_a_dictionary(tmp_path: Path) -> None:
    """BaseFiles let the writer dictionary-encode any column, but not the text columns that :func:`encode_text`
    found mostly distinct: the writer would hash their values until the dictionary outgrew its page, then fall back
    to plain pages anyway. Columns of few values, integers and floats keep their dictionaries."""
    table = _table(tmp_path, commits=4, rows=3000)
    expected = table.read().sort_by("id")
    plan = plan_all(table, "compact")
    results = execute(plan, table, None, ExecutionOptions(in_process_workers="threads"))
    assert all(r.ok for r in results)
    assert commit_rewrites(table, plan, results).committed
    for a in (a for r in results for a in r.adds):
        pages = _dictionary_pages(table, a.path)
        assert not pages["token"], "random hex, mostly distinct: never a dictionary"
        assert pages["label"] and pages["status"], "300 values and 3: chosen as dictionaries"
        assert pages["id"] and pages["hash"], "every column but the rejected text ones may still be a dictionary"
    assert table.read().sort_by("id").equals(expected)


def test_a_nested_schema_leaves_dictionaries_to_the_writer() -> None:
    """The option names leaf columns, so with a nested column it stays True (every column) rather than dropping the
    dictionaries of the nested column's leaves."""
    flat = pa.schema([("id", pa.int64()), ("token", pa.string()), ("status", pa.dictionary(pa.int32(), pa.string()))])
    assert without_rejected_text(flat, ["token"]) == ["id", "status"]
    assert without_rejected_text(flat, []) is True
    nested = flat.append(pa.field("tags", pa.list_(pa.string())))
    assert without_rejected_text(nested, ["token"]) is True
