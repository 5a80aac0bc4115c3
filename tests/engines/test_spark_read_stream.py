"""``spark.readStream.format("maintd")`` serves the change feed: from a starting version, bounded per micro-batch,
resuming from its checkpoint after a restart, maintenance commits adding nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxFiles

from maintd import Table
from maintd.engines.spark import MaintdDataSource

from .helpers import rewrite

pytestmark = pytest.mark.spark

KEY = [("region", "ascending"), ("id", "ascending"), ("_change_version", "ascending")]


def _table(root: Path) -> Table:
    return Table.create(str(root / "t"), "id:int64!,region:string!,v:double", primary_key=["region", "id"],
                        partition_by="region", buckets=2)


def _write(table: Table, rng: np.random.Generator, n: int = 40) -> int:
    ids = rng.integers(0, 60, n)
    batch = pa.table({"id": pa.array(ids, pa.int64()), "region": np.where(ids % 2, "eu", "us"), "v": rng.random(n),
                      "op": pa.array((rng.random(n) < 0.2).astype(np.int8))})
    return table.write_changes(batch, "op")


def _feed(table: Table, first: int, last: int) -> pa.Table:
    """Each version's own net changes, as a stream of one version per micro-batch serves them."""
    return pa.concat_tables([table.changes(v - 1, v) for v in range(first, last + 1)]).sort_by(KEY)


def _reader(uri: str, **options: Any) -> Any:
    source = MaintdDataSource({"path": uri, "readChangeFeed": "true", **{k: str(v) for k, v in options.items()}})
    return source.streamReader(source.schema())


def test_micro_batches_take_whole_versions_up_to_the_file_or_byte_bound(tmp_path: Path) -> None:
    table = _table(tmp_path)
    rng = np.random.default_rng(1)
    for _ in range(4):
        _write(table, rng)
    rewrite(table, "compact", lambda f: True)  # a maintenance commit: no files writers added
    _write(table, rng)
    added = {v: [a for a in table.files(v) if a.min_version == v] for v in range(1, 7)}
    reader = _reader(table.uri, startingVersion=2, maxFilesPerTrigger=len(added[2]) + 1)
    start = reader.initialOffset()
    assert start == {"version": 1} and isinstance(reader.getDefaultReadLimit(), ReadMaxFiles)
    assert reader.latestOffset(start, reader.getDefaultReadLimit()) == {"version": 2}  # the next would pass it
    assert reader.latestOffset(start, ReadMaxFiles(1)) == {"version": 2}  # always at least one version
    assert reader.latestOffset({"version": 4}, ReadMaxFiles(1)) == {"version": 6}  # 5 (maintenance) adds none
    assert reader.latestOffset(start, ReadAllAvailable()) == {"version": 6}  # a trigger that takes everything
    two = sum(f.bytes for f in added[2]) + sum(f.bytes for f in added[3])
    by_bytes = _reader(table.uri, startingVersion=2, maxBytesPerTrigger=two)
    assert by_bytes.getDefaultReadLimit() == ReadMaxBytes(two)
    assert by_bytes.latestOffset(start, by_bytes.getDefaultReadLimit()) == {"version": 3}
    assert by_bytes.latestOffset(start, ReadMaxBytes(two - 1)) == {"version": 2}  # Spark's limit is respected
    assert reader.latestOffset({"version": 6}, ReadAllAvailable()) == {"version": 6}  # nothing new
    assert reader.partitions({"version": 4}, {"version": 5}) == []  # maintenance only: no bucket to read
    with pytest.raises(Exception, match="readChangeFeed"):
        source = MaintdDataSource({"path": table.uri})
        source.streamReader(source.schema())
    with pytest.raises(Exception, match="maxFilesPerTrigger=0 must be at least 1"):
        _reader(table.uri, maxFilesPerTrigger=0)
    assert _reader(table.uri).initialOffset() == {"version": 6}  # no start given: what comes after the query starts


@pytest.mark.slow
def test_a_stream_of_the_change_feed_resumes_from_its_checkpoint_after_a_restart(spark: Any, tmp_path: Path) -> None:
    table = _table(tmp_path)
    rng = np.random.default_rng(2)
    for _ in range(3):
        _write(table, rng)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    out.mkdir()
    batches: list[tuple[int, int, int, int]] = []

    def sink(df: Any, batch_id: int) -> None:
        rows = df.toArrow()
        pq.write_table(rows, out / f"batch-{batch_id:04d}.parquet")
        versions = [v for v in rows["_change_version"].to_pylist() if v is not None]  # a delete's is null
        batches.append((batch_id, min(versions, default=-1), max(versions, default=-1), rows.num_rows))

    def run() -> None:
        query = (spark.readStream.format("maintd").option("readChangeFeed", "true").option("startingVersion", 2)
                 .option("maxFilesPerTrigger", 1).load(table.uri)
                 .writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        query.awaitTermination(300)
        assert query.exception() is None, query.exception()

    run()
    assert [(b[1], b[2]) for b in batches] == [(2, 2), (3, 3)]  # one version per micro-batch, from version 2
    rewrite(table, "compact", lambda f: True)  # maintenance between the two runs: nothing to serve
    for _ in range(2):
        _write(table, rng)
    run()  # a restart: resumes after the last batch the checkpoint committed
    assert [(b[1], b[2]) for b in batches[2:]] == [(5, 5), (6, 6)]  # version 4 (maintenance) rides with 5
    assert [b[0] for b in batches] == [0, 1, 2, 3]
    got = pa.concat_tables([pq.read_table(p) for p in sorted(out.iterdir())])
    expected = pa.concat_tables([_feed(table, 2, 3), _feed(table, 5, 6)]).sort_by(KEY)
    assert got.cast(expected.schema).sort_by(KEY).equals(expected)
