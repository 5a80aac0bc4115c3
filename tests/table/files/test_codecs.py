"""Codecs where they pay (docs/design.md, "Data file encoding"): a column whose sample its codec cannot shrink is
stored uncompressed, in the files maintenance writes and in a writer's level-0 files alike."""

from __future__ import annotations

import secrets
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from maintd import Table
from maintd.table.files.codecs import SAMPLE_BYTES, without_futile_compression

from ..table_helpers import groups, rewrite_bucket


def _codecs(table: Table, path: str) -> dict[str, str]:
    md = pq.ParquetFile(table.storage.full_path(path)).metadata
    return {md.row_group(g).column(c).path_in_schema: md.row_group(g).column(c).compression
            for g in range(md.num_row_groups) for c in range(md.num_columns)}


def _batch(rng: np.random.Generator, ids: np.ndarray) -> pa.Table:
    n = len(ids)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "token": [secrets.token_hex(12) for _ in range(n)],  # random hex: nothing for LZ4 to match
        "noise": pa.array(rng.random(n)),  # random doubles: nothing to shrink
        "label": [f"label-{i % 300:04d}-{'y' * (i % 11)}" for i in rng.integers(0, 300, n)],  # repetitive text
        "qty": pa.array(rng.integers(0, 10, n)),  # small integers: mostly zero bytes
    })


SCHEMA = "id:int64!,token:string,noise:float64,label:string,qty:int64"


def test_options_name_a_level_only_for_the_columns_still_compressed() -> None:
    rng = np.random.default_rng(3)
    n = SAMPLE_BYTES // 8
    first = pa.table({"noise": pa.array(rng.random(n)), "zeros": pa.array(np.zeros(n)),
                      "words": pa.array(["same words again"] * n),
                      "status": pa.array(["a", "b"] * (n // 2)).dictionary_encode()})
    out = without_futile_compression({"compression": "zstd", "compression_level": 1, "write_statistics": True}, first,
                                     ["status"])
    assert out["compression"] == {"noise": "none", "zeros": "zstd", "words": "zstd", "status": "zstd"}
    assert out["compression_level"] == {"zeros": 1, "words": 1, "status": 1}
    assert out["write_statistics"] is True
    lz4 = {"compression": {"noise": "lz4", "zeros": "none", "words": "lz4", "status": "lz4"}}
    assert without_futile_compression(lz4, first)["compression"] == {"noise": "none", "zeros": "none",
                                                                      "words": "lz4", "status": "lz4"}
    pq.write_table(first, pa.BufferOutputStream(), **out)  # the writer takes them


def test_a_sample_too_small_to_judge_changes_nothing() -> None:
    rng = np.random.default_rng(3)
    few = pa.table({"noise": pa.array(rng.random(SAMPLE_BYTES // 64 - 1))})  # under the smallest sample judged
    options = {"compression": "lz4"}
    assert without_futile_compression(options, few) is options
    sliced = pa.table({"noise": pa.array(rng.random(4 * SAMPLE_BYTES))}).slice(3 * SAMPLE_BYTES)
    assert without_futile_compression(options, sliced)["compression"] == {"noise": "none"}, \
        "the sample is the slice's own values"


def test_a_writers_level0_files_store_uncompressed_what_lz4_cannot_shrink(tmp_path: Path) -> None:
    """Judged once per batch, on its largest file: every file of the batch gets the same codecs, the small ones
    too (their own sample would be too small to judge)."""
    table = Table.create(str(tmp_path / "t"), SCHEMA, primary_key="id", buckets=4)
    rng = np.random.default_rng(11)
    batch = _batch(rng, rng.permutation(3000))
    table.upsert(batch)
    files = list(table.snapshot().files.values())
    assert len(files) == 4 and all(f.level == 0 for f in files)
    for f in files:
        assert _codecs(table, f.path) == {"id": "UNCOMPRESSED", "token": "UNCOMPRESSED", "noise": "UNCOMPRESSED",
                                          "label": "LZ4", "qty": "LZ4", "_maintd_op": "UNCOMPRESSED"}, f.path
    assert table.read().sort_by("id").to_pylist() == batch.sort_by("id").to_pylist()


def test_a_batch_too_small_to_judge_keeps_lz4_everywhere(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "t"), SCHEMA, primary_key="id", buckets=1)
    rng = np.random.default_rng(12)
    batch = _batch(rng, np.arange(100))  # 2,400 bytes of tokens, 800 of doubles: under the smallest sample judged
    table.upsert(batch)
    (f,) = table.snapshot().files.values()
    values = ["token", "noise", "label", "qty"]
    assert {c: v for c, v in _codecs(table, f.path).items() if c in values} == dict.fromkeys(values, "LZ4")
    assert table.read().sort_by("id").to_pylist() == batch.sort_by("id").to_pylist()


def test_maintenance_reads_uncompressed_level0_columns_as_it_reads_compressed_ones(tmp_path: Path) -> None:
    """Level-0 files of one table may differ in codecs per column (batches judged apart, files written before the
    judgement existed); a merge of them reads every one."""
    table = Table.create(str(tmp_path / "t"), SCHEMA, primary_key="id", buckets=1)
    rng = np.random.default_rng(13)
    small = _batch(rng, np.arange(0, 3000, 30))  # too small to judge: LZ4
    large = _batch(rng, np.arange(3000))  # tokens and doubles uncompressed
    table.upsert(small)
    table.upsert(large)
    codecs = [_codecs(table, f.path)["token"] for f in table.snapshot().files.values()]
    assert sorted(codecs) == ["LZ4", "UNCOMPRESSED"]
    for kind in ("cluster", "compact"):
        snap = table.snapshot()
        txn = rewrite_bucket(table, snap, groups(snap)[0], kind)
        assert txn is not None
        txn.commit()
        assert table.read().sort_by("id").to_pylist() == large.sort_by("id").to_pylist()
