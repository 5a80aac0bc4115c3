"""Spark reads a maintd table: merge-on-read, time travel, the change feed, pruning and column selection."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from maintd import Table
from maintd.engines.spark import MaintdDataSource
from maintd.engines.spark.read import SnapshotReader, pushed_predicate
from maintd.table.read.scan import ScanUnit

from .helpers import by_key, kinds

pytestmark = pytest.mark.spark


def _arrow(df: Any, like: pa.Schema) -> pa.Table:
    return by_key(df.toArrow().cast(like))


def _units(uri: str, **options: Any) -> list[ScanUnit]:
    """The scan units the source plans for these options (what Spark's tasks will read)."""
    source = MaintdDataSource({"path": uri, **{k: str(v) for k, v in options.items()}})
    reader = source.reader(source.schema())
    return [p.value for p in reader.partitions()]


@pytest.mark.slow
def test_spark_reads_the_latest_version_as_table_read(spark: Any, layered: tuple[Table, Any, dict[str, int]]) -> None:
    table, model, _marks = layered
    assert kinds(table) == {"base", "L0", "L1", "L2"}
    df = spark.read.format("maintd").load(table.uri)
    assert df.schema.simpleString() == "struct<id:bigint,region:string,name:string,amount:double,day:date>"
    assert [f.nullable for f in df.schema.fields] == [False, False, True, True, True]
    expected = by_key(table.read())
    assert _arrow(df, expected.schema).equals(expected)
    assert expected.equals(model.table())
    groups = len(table.snapshot().by_bucket())
    assert df.rdd.getNumPartitions() == groups == 6  # one Spark partition per (partition, bucket)


def test_spark_time_travels_by_version_and_by_timestamp(spark: Any, layered: tuple[Table, Any, dict[str, int]]
                                                        ) -> None:
    table, _, marks = layered
    v = marks["two_l1"]  # files rewritten since: the version still reads as it did
    expected = by_key(table.read(version=v))
    got = spark.read.format("maintd").option("versionAsOf", v).load(table.uri)
    assert _arrow(got, expected.schema).equals(expected)
    committed = next(c for c in table.history() if c.version == marks["before_base"])
    when = dt.datetime.fromtimestamp(committed.timestamp / 1000, tz=dt.UTC).isoformat()
    expected = by_key(table.read(version=marks["before_base"]))
    got = spark.read.format("maintd").option("timestampAsOf", when).load(table.uri)
    assert _arrow(got, expected.schema).equals(expected)


def test_spark_reads_the_change_feed_as_table_changes(spark: Any, layered: tuple[Table, Any, dict[str, int]]) -> None:
    table, _, marks = layered
    start, end = marks["before_base"] + 1, marks["latest"]  # maintenance commits in between change nothing
    expected = table.changes(start - 1, end)
    df = (spark.read.format("maintd").option("readChangeFeed", "true").option("startingVersion", start)
          .option("endingVersion", end).load(table.uri))
    assert df.columns == ["id", "region", "name", "amount", "day", "_change", "_change_version"]
    got = df.toArrow().cast(expected.schema).sort_by([("region", "ascending"), ("id", "ascending")])
    assert got.equals(expected.sort_by([("region", "ascending"), ("id", "ascending")]))
    assert set(got["_change"].to_pylist()) == {"insert", "update", "delete"}
    one = (spark.read.format("maintd").option("readChangeFeed", "true").option("startingVersion", end)
           .load(table.uri))  # endingVersion defaults to the latest
    assert by_key(one.toArrow().cast(expected.schema)).equals(by_key(table.changes(end - 1)))


def test_a_partition_filter_reads_only_that_partitions_files(spark: Any,
                                                             layered: tuple[Table, Any, dict[str, int]]) -> None:
    table, _, _ = layered
    snap = table.snapshot()
    units = _units(table.uri, filter="region = 'eu'")
    read = {f.path for u in units for f in u.files}
    assert read == {f.path for f in snap.files.values() if f.partition["region"] == "eu"}
    assert len(read) == len(snap.files) // 3
    df = spark.read.format("maintd").option("filter", "region = 'eu'").load(table.uri)
    assert df.rdd.getNumPartitions() == len(units) == 2
    expected = by_key(table.read().filter(pc.field("region") == "eu"))
    assert _arrow(df, expected.schema).equals(expected)


def test_key_filters_prune_buckets_by_hash_and_files_by_key_bounds(
        spark: Any, layered: tuple[Table, Any, dict[str, int]]) -> None:
    table, _, _ = layered
    snap = table.snapshot()
    units = _units(table.uri, filter="id in (3, 4)")  # two keys: one bucket each, in their own partitions
    assert len({f.path for u in units for f in u.files}) < len(snap.files) // 2
    df = spark.read.format("maintd").option("filter", "id in (3, 4)").load(table.uri)
    assert sorted(df.toArrow()["id"].to_pylist()) == sorted(
        table.read().filter(pc.field("id").isin([3, 4]))["id"].to_pylist())
    low = _units(table.uri, filter="id < 20")
    level0 = [f for f in snap.files.values() if f.kind == "delta" and f.level == 0]
    skipped = [f for f in level0 if f.key_min and f.key_min[0] >= 20]
    assert skipped and not {f.path for f in skipped} & {f.path for u in low for f in u.files}


def test_spark_reads_only_the_columns_asked_for_by_option_or_schema(
        spark: Any, layered: tuple[Table, Any, dict[str, int]]) -> None:
    table, _, _ = layered
    expected = by_key(table.read(columns=["id", "amount"]))
    by_option = spark.read.format("maintd").option("columns", "id,amount").load(table.uri)
    assert by_option.columns == ["id", "amount"]
    assert _arrow(by_option, expected.schema).equals(expected)
    by_schema = spark.read.format("maintd").schema("amount double, id bigint").load(table.uri)
    assert _arrow(by_schema.select("id", "amount"), expected.schema).equals(expected)
    with pytest.raises(Exception, match="colour is not a column of the table"):
        spark.read.format("maintd").schema("id bigint, colour string").load(table.uri).collect()
    with pytest.raises(Exception, match="amount is double in the table, not string"):
        spark.read.format("maintd").schema("id bigint, amount string").load(table.uri).collect()


def test_a_large_bucket_is_read_as_several_spark_partitions_by_key_range(spark: Any, tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "ranged"), "id:int64!,v:string", primary_key="id", buckets=1)
    for c in range(4):  # files holding disjoint key ranges, as per-range base files do
        table.upsert(pa.table({"id": pa.array(range(c * 500, (c + 1) * 500), pa.int64()),
                               "v": [f"v{c}-{i * 7919 % 10007:05d}" for i in range(500)]}))  # bytes in the data
    table.upsert(pa.table({"id": pa.array([7, 777, 1777], pa.int64()), "v": ["x", "y", "z"]}))
    split = max(f.bytes for f in table.snapshot().files.values())
    df = spark.read.format("maintd").option("splitBytes", split).load(table.uri)
    assert df.rdd.getNumPartitions() == 4
    expected = by_key(table.read())
    assert _arrow(df, expected.schema).equals(expected)


def test_read_options_that_make_no_sense_are_refused_with_a_reason(spark: Any,
                                                                  layered: tuple[Table, Any, dict[str, int]],
                                                                  tmp_path: Path) -> None:
    table, _, _ = layered
    read = spark.read.format("maintd")
    with pytest.raises(Exception, match="versionAsOf='x' is not an integer"):
        read.option("versionAsOf", "x").load(table.uri).collect()
    with pytest.raises(Exception, match=f"has no version {table.version + 5}"):
        read.option("versionAsOf", table.version + 5).load(table.uri).collect()
    with pytest.raises(Exception, match="readChangeFeed needs startingVersion"):
        spark.read.format("maintd").option("readChangeFeed", "true").load(table.uri).collect()
    with pytest.raises(Exception, match="no table at"):
        spark.read.format("maintd").load(str(tmp_path / "nothing")).collect()
    with pytest.raises(Exception, match="cannot parse the filter"):
        spark.read.format("maintd").option("filter", "id >").load(table.uri).collect()


def test_change_feed_times_pick_versions_as_delta_does(layered: tuple[Table, Any, dict[str, int]]) -> None:
    table, _, marks = layered
    times = {c.version: c.timestamp for c in table.history()}
    v = marks["two_l1"]

    def change_range(**options: Any) -> tuple[int, int]:
        given = {k: str(x) for k, x in options.items()}
        source = MaintdDataSource({"path": table.uri, "readChangeFeed": "true", **given})
        return source._change_range(table)

    assert change_range(startingVersion=v, endingVersion=v + 2) == (v - 1, v + 2)  # both inclusive
    assert change_range(startingTimestamp=times[v]) == (v - 1, table.version)  # the first version at or after
    assert change_range(startingTimestamp=times[v - 1] + 1, endingTimestamp=times[v + 2]) == (v - 1, v + 2)
    with pytest.raises(Exception, match="starts at version"):
        change_range(startingVersion=v + 2, endingVersion=v)


class EqualTo:
    def __init__(self, attribute: tuple[str, ...], value: Any) -> None:
        self.attribute, self.value = attribute, value


class In(EqualTo):
    pass


class GreaterThan(EqualTo):
    pass


class Not:
    def __init__(self, child: Any) -> None:
        self.child = child


def test_pushed_spark_filters_on_key_and_partition_columns_prune_and_are_still_returned(
        layered: tuple[Table, Any, dict[str, int]]) -> None:
    table, _, _ = layered
    md = table.snapshot().metadata
    assert str(pushed_predicate(EqualTo(("region",), "eu"), md)) == "region = 'eu'"
    assert str(pushed_predicate(In(("id",), (1, 2)), md)) == "id in (1, 2)"
    assert str(pushed_predicate(Not(In(("region",), ("us",))), md)) == "region not in ('us')"
    assert pushed_predicate(GreaterThan(("amount",), 0.5), md) is None  # a value column: Spark filters it
    assert pushed_predicate(EqualTo(("id",), "not a number"), md) is None
    reader = SnapshotReader(table.uri, table.version, md, md.column_names, None, None)
    filters = [EqualTo(("region",), "eu"), GreaterThan(("amount",), 0.5)]
    assert reader.pushFilters(filters) == filters  # Spark evaluates them all again
    assert {u.partition["region"] for u in reader.plan().units} == {"eu"}


def test_spark_pushes_a_query_filter_into_the_scan(spark: Any, layered: tuple[Table, Any, dict[str, int]]) -> None:
    table, _, _ = layered
    df = spark.read.format("maintd").load(table.uri).where("region = 'us' and amount > 0.5")
    assert df.rdd.getNumPartitions() == 2
    expected = table.read().filter((pc.field("region") == "us") & (pc.field("amount") > 0.5))
    assert _arrow(df, expected.schema).equals(by_key(expected))


def test_spark_reads_the_change_feed_from_the_prior_rows_compactions_stored(spark: Any, tmp_path: Path) -> None:
    """Each Spark task of the feed gets its bucket's changed files and prior-rows files, and reads as
    ``Table.changes`` (and the full diff) does."""
    import numpy as np

    from maintd.execution import PlanDoc, PlanTaskDoc, commit_rewrites, run_plan

    table = Table.create(str(tmp_path / "t"), "id:int64!,region:string!,v:double", primary_key="id",
                         partition_by="region", buckets=2, properties={"changes.prior.rows": "true"})
    rng = np.random.default_rng(4)

    def write(n: int, keys: int) -> None:
        k = rng.integers(0, keys, n)
        table.write_changes(pa.table({"id": pa.array(k, pa.int64()), "region": np.where(k % 2, "eu", "us"),
                                      "v": rng.random(n), "op": pa.array((rng.random(n) < 0.2).astype(np.int8))}),
                            "op")

    def compact() -> None:
        snap = table.snapshot()
        tasks = tuple(PlanTaskDoc(task_id=f"c-{dict(p)}-{b}", kind="compact", partition=dict(p), bucket=b,
                                  inputs=tuple(f.path for f in fs)) for (p, b), fs in snap.by_bucket().items())
        plan = PlanDoc(table_uri=table.uri, read_version=snap.version, tasks=tasks)
        assert commit_rewrites(table, plan, run_plan(plan, table).results).committed

    write(400, 400)
    compact()
    start = table.version
    for _ in range(3):
        write(40, 500)
    end = table.version
    compact()
    source = MaintdDataSource({"path": table.uri, "readChangeFeed": "true", "startingVersion": str(start + 1),
                               "endingVersion": str(end)})
    units = [p.value for p in source.reader(source.schema()).partitions()]
    assert len(units) == 4 and all(u.changed and len(u.priors) == 1 for u in units)
    df = (spark.read.format("maintd").option("readChangeFeed", "true").option("startingVersion", start + 1)
          .option("endingVersion", end).load(table.uri))
    expected = table.changes(start, end)
    assert expected.num_rows and by_key(df.toArrow().cast(expected.schema)).equals(by_key(expected))
    assert by_key(expected).equals(by_key(table.full_changes(start, end)))


def test_empty_scans_of_every_kind_return_no_rows(spark: Any, tmp_path: Path) -> None:
    """A scan with nothing to read plans no partition; Spark then hands the reader one partition
    holding None, which reads as no rows (a fresh table, version 0, a filter matching no partition, a
    change feed over maintenance commits only)."""
    from .helpers import rewrite

    table = Table.create(str(tmp_path / "t"), "id:int64!,region:string!,v:double", primary_key="id",
                         partition_by="region", buckets=2)
    read = spark.read.format("maintd")
    fresh = read.load(table.uri)
    assert fresh.columns == ["id", "region", "v"] and fresh.collect() == []
    table.upsert(pa.table({"id": pa.array([1, 2, 3], pa.int64()), "region": ["eu", "eu", "us"], "v": [1.0, 2.0, 3.0]}))
    assert spark.read.format("maintd").option("versionAsOf", 0).load(table.uri).collect() == []
    assert spark.read.format("maintd").option("filter", "region = 'ap'").load(table.uri).collect() == []
    assert spark.read.format("maintd").load(table.uri).where("region = 'ap'").collect() == []
    assert spark.read.format("maintd").load(table.uri).count() == 3
    maintained = rewrite(table, "compact", lambda f: True)
    feed = (spark.read.format("maintd").option("readChangeFeed", "true").option("startingVersion", maintained)
            .option("endingVersion", maintained).load(table.uri))
    assert feed.columns == ["id", "region", "v", "_change", "_change_version"] and feed.collect() == []
    fresh_feed = spark.read.format("maintd").option("readChangeFeed", "true").option("startingVersion", 0)
    assert fresh_feed.option("endingVersion", 0).load(table.uri).collect() == []
