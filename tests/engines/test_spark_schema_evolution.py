"""Spark and schema evolution: ``mergeSchema`` adds a DataFrame's extra columns in the write's commit, a write
without it is refused, a DataFrame without an added column writes nulls, and the data source reads every version
with its own schema, files written before the change with nulls, and the change feed across it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from maintd import Table


def _table(root: Path) -> Table:
    t = Table.create(str(root / "t"), "id:int64!,region:string!,name:string", primary_key=["region", "id"],
                     partition_by="region", buckets=2)
    t.upsert(pa.table({"id": [1, 2], "region": ["eu", "us"], "name": ["a", "b"]}))
    return t


def _sorted(rows: list[Any]) -> list[dict[str, Any]]:
    return sorted((r.asDict() for r in rows), key=lambda r: (r["region"], r["id"]))


@pytest.mark.slow
def test_merge_schema_writes_and_reads_across_the_change(spark: Any, tmp_path: Path) -> None:
    t = _table(tmp_path)
    df = spark.createDataFrame([(3, "eu", "c", 1.5)], "id long, region string, name string, score double")
    with pytest.raises(Exception, match="score is not a column of the table"):
        df.write.format("maintd").mode("append").save(t.uri)
    with pytest.raises(Exception, match="mergeSchema='maybe' must be true or false"):
        df.write.format("maintd").mode("append").option("mergeSchema", "maybe").save(t.uri)
    assert t.version == 1
    df.write.format("maintd").mode("append").option("mergeSchema", "true").save(t.uri)
    t = Table.open(t.uri)
    assert t.version == 2 and t.schema().names == ["id", "region", "name", "score"]
    assert t.snapshot().protocol.min_writer_version == 6
    # a DataFrame without the added column writes nulls there
    spark.createDataFrame([(4, "us", "d")], "id long, region string, name string").write.format("maintd") \
        .mode("append").save(t.uri)
    def read() -> Any:  # a reader keeps its options: a fresh one each time
        return spark.read.format("maintd")

    assert _sorted(read().load(t.uri).collect()) == [
        {"id": 1, "region": "eu", "name": "a", "score": None}, {"id": 3, "region": "eu", "name": "c", "score": 1.5},
        {"id": 2, "region": "us", "name": "b", "score": None}, {"id": 4, "region": "us", "name": "d", "score": None}]
    old = read().option("versionAsOf", 1).load(t.uri)
    assert old.columns == ["id", "region", "name"] and old.count() == 2
    assert read().option("filter", "region = 'eu'").option("columns", "id,score").load(t.uri).count() == 2
    feed = read().option("readChangeFeed", "true").option("startingVersion", 1).load(t.uri)
    assert "score" in feed.columns
    assert {(r["id"], r["_change"]) for r in feed.collect()} == {(1, "insert"), (2, "insert"), (3, "insert"),
                                                                  (4, "insert")}
