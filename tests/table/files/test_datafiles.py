"""How data files are encoded (docs/format.md, "Data files"): a writer's level-0 files in LZ4 with
dictionaries for text columns of few values only (listed in the footer), integer keys packed
(DELTA_BINARY_PACKED), with statistics for the key and hidden columns only; the files maintenance writes in
zstd; a table mixing them reads as one."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from maintd import Table
from maintd.table.files.dictionaries import dictionary_columns

from ..table_helpers import groups, rewrite_bucket


def _encodings(table: Table, path: str) -> dict[str, tuple[str, bool, bool]]:
    """Per column of a data file: its codec, whether its first row group holds a dictionary page, and whether
    it has statistics."""
    md = pq.ParquetFile(table.storage.full_path(path)).metadata
    rg = md.row_group(0)
    return {rg.column(i).path_in_schema: (rg.column(i).compression, rg.column(i).has_dictionary_page,
                                          rg.column(i).is_stats_set)
            for i in range(rg.num_columns)}


def test_level0_files_are_lz4_with_dictionaries_for_text_of_few_values_and_statistics_of_their_keys(
        tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "t"), "r:string,id:int64!,name:string,qty:int64,price:float64,tag:string",
                         primary_key="id", partition_by="r", buckets=1)
    table.upsert(pa.table({"r": ["eu"] * 200, "id": list(range(200)), "name": ["a", "b"] * 100, "qty": [7] * 200,
                           "price": [1.5] * 200, "tag": [f"t{i}" for i in range(200)]}))
    (f,) = table.snapshot().files.values()
    assert f.level == 0
    assert _encodings(table, f.path) == {
        "r": ("LZ4", False, True), "id": ("UNCOMPRESSED", False, True), "name": ("LZ4", True, False),
        "qty": ("LZ4", False, False), "price": ("LZ4", False, False), "tag": ("LZ4", False, False),
        "_maintd_op": ("UNCOMPRESSED", False, True)}, "a dictionary for the text of few values only"
    pf = pq.ParquetFile(table.storage.full_path(f.path))
    assert dictionary_columns(pf.metadata) == {"name"}, "listed in the footer"
    assert pf.schema_arrow.field("name").type == pa.string(), "the footer's Arrow schema is the table's"
    md = pf.metadata.row_group(0)
    packed = {md.column(i).path_in_schema for i in range(md.num_columns)
              if "DELTA_BINARY_PACKED" in md.column(i).encodings}
    assert packed == {"id", "_maintd_op"}, "integer key and hidden columns are packed, not compressed"
    assert (f.key_min, f.key_max) == ((0,), (199,))
    assert table.read().schema.metadata is None, "footer entries are not passed on to readers"


def test_files_written_by_maintenance_are_zstd_and_a_table_mixing_both_reads_as_one(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "t"), "id:int64!,name:string", primary_key="id", buckets=1)
    table.upsert(pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"]}))
    snap = table.snapshot()
    txn = rewrite_bucket(table, snap, groups(snap)[0], "compact")
    assert txn is not None
    txn.commit()
    table.upsert(pa.table({"id": [2, 4], "name": ["B", "d"]}))
    files = sorted(table.snapshot().files.values(), key=lambda f: f.kind)
    assert [(f.kind, f.level) for f in files] == [("base", None), ("delta", 0)]
    assert {codec for codec, *_ in _encodings(table, files[0].path).values()} == {"ZSTD"}
    assert {codec for codec, *_ in _encodings(table, files[1].path).values()} == {"LZ4", "UNCOMPRESSED"}
    assert table.read().sort_by("id").to_pylist() == [
        {"id": 1, "name": "a"}, {"id": 2, "name": "B"}, {"id": 3, "name": "c"}, {"id": 4, "name": "d"}]
