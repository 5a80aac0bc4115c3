"""Codecs where they pay (docs/design.md, "Data file encoding"): a column whose sample its codec cannot shrink is
stored uncompressed, in the files maintenance writes and in a writer's level-0 files alike."""

from __future__ import annotations

import secrets
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from maintd import Table
from maintd.table.files.codecs import SAMPLE_BYTES, without_futile_compression

from ..table_helpers import groups, rewrite_bucket


def _codecs(table: Table, path: str) -> dict[str, str]:
    md = pq.ParquetFile(table.storage.full_path(path)).metadata
    return {md.row_group(g).column(c).path_in_schema: md.row_group(g).column(c).compression
            for g in range(md.num_row_groups) for c in range(md.num_columns)}


def _batch(rng: np.random.Generator, ids: np.ndarray, partitioned: bool = False) -> pa.Table:
    n = len(ids)
    t = pa.table({
        "id": pa.array(ids, pa.int64()),
        "token": [secrets.token_hex(12) for _ in range(n)],  # random hex: nothing for LZ4 to match
        "noise": pa.array(rng.random(n)),  # random doubles: nothing to shrink
        "label": [f"label-{i % 300:04d}-{'y' * (i % 11)}" for i in rng.integers(0, 300, n)],  # repetitive text
        "qty": pa.array(rng.integers(0, 10, n)),  # small integers: mostly zero bytes
    })
    # a key's partition follows from the key, so an upsert of a key replaces its row in every shape
    return t.append_column("region", pa.array(np.where(ids % 2 == 0, "east", "west"))) if partitioned else t


SCHEMA = "id:int64!,token:string,noise:float64,label:string,qty:int64"

SHAPES = {"flat": ({}, "id"),
          "partitioned": ({"partition_by": ["region"]}, "id"),
          "partition in the key": ({"partition_by": ["region"]}, ["region", "id"])}
"""Table shapes the writer's and the merge's codec paths run under: no partition column, one outside the key
(stored as a constant, :func:`maintd.execution.inputs.constant_columns`), one inside it."""


def _create(path: Path, shape: str, buckets: int) -> tuple[Table, bool]:
    """A table of ``shape`` (:data:`SHAPES`), and whether its rows carry the partition column."""
    extra, key = SHAPES[shape]
    partitioned = bool(extra)
    schema = SCHEMA + (",region:string!" if partitioned else "")
    return Table.create(str(path), schema, primary_key=key, buckets=buckets, **extra), partitioned


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


@pytest.mark.parametrize("shape", SHAPES)
def test_a_writers_level0_files_store_uncompressed_what_lz4_cannot_shrink(tmp_path: Path, shape: str) -> None:
    """Judged once per batch, on its largest file: every file of the batch gets the same codecs, the small ones
    too (their own sample would be too small to judge), in every partition."""
    table, partitioned = _create(tmp_path / "t", shape, buckets=4)
    rng = np.random.default_rng(11)
    batch = _batch(rng, rng.permutation(3000 * (2 if partitioned else 1)), partitioned)  # 750 rows a file
    table.upsert(batch)
    files = list(table.snapshot().files.values())
    assert len(files) == 4 * (2 if partitioned else 1) and all(f.level == 0 for f in files)
    for f in files:
        assert {c: v for c, v in _codecs(table, f.path).items() if c != "region"} == {
            "id": "UNCOMPRESSED", "token": "UNCOMPRESSED", "noise": "UNCOMPRESSED", "label": "LZ4", "qty": "LZ4",
            "_maintd_op": "UNCOMPRESSED"}, f.path
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


@pytest.mark.parametrize("shape", SHAPES)
def test_maintenance_reads_uncompressed_level0_columns_as_it_reads_compressed_ones(tmp_path: Path, shape: str
                                                                                  ) -> None:
    """Level-0 files of one table may differ in codecs per column (batches judged apart, files written before the
    judgement existed); a merge of them reads every one, in every partition."""
    table, partitioned = _create(tmp_path / "t", shape, buckets=1)
    rng = np.random.default_rng(13)
    small = _batch(rng, np.arange(0, 6000, 61), partitioned)  # 99 rows, both partitions: too small to judge, LZ4
    large = _batch(rng, np.arange(6000), partitioned)  # tokens and doubles uncompressed
    table.upsert(small)
    table.upsert(large)
    codecs = sorted(_codecs(table, f.path)["token"] for f in table.snapshot().files.values())
    assert codecs == sorted(["LZ4", "UNCOMPRESSED"] * (2 if partitioned else 1))
    for kind in ("cluster", "compact"):
        for group in groups(table.snapshot()):
            txn = rewrite_bucket(table, table.snapshot(), group, kind)
            assert txn is not None
            txn.commit()
        files = table.snapshot().files.values()
        assert len(files) == (2 if partitioned else 1) and all(f.kind == ("delta" if kind == "cluster" else "base")
                                                              for f in files)
        assert table.read().sort_by("id").to_pylist() == large.sort_by("id").to_pylist()
