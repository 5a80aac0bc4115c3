"""Spark batch writes: upserts and deletes by key in one commit, overwrites, and refusals before any write."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from maintd import InvalidInputError, Table
from maintd.engines.spark.write import FilesWritten, WriteJob
from maintd.table.files.filters import parse_filter

from .helpers import ARROW, SCHEMA, Model, by_key, changes

pytestmark = pytest.mark.spark


def _table(root: Path, buckets: int = 4) -> tuple[Table, Model]:
    table = Table.create(str(root / "orders"), SCHEMA, primary_key="id", partition_by="region", buckets=buckets)
    model = Model()
    b = changes(np.random.default_rng(1), 300, 400, delete_share=0.0)
    table.write_changes(b, "op")
    model.apply(b)
    return table, model


def _data_files(table: Table) -> set[str]:
    return {f.path for f in table.storage.walk() if f.path.endswith(".parquet") and not f.path.startswith("_log")}


ROWS = "id long, region string, name string, amount double, day date"


def _rows(spark: Any, t: pa.Table, schema: str = ROWS) -> Any:
    return spark.createDataFrame([tuple(r.values()) for r in t.to_pylist()], schema)


def _df(spark: Any, t: pa.Table, partitions: int) -> Any:
    """A DataFrame of ``t`` in ``partitions`` partitions, each key's rows in one partition, in order."""
    df = _rows(spark, t, f"{ROWS}, op byte, seq long")
    return df.repartition(partitions, "id").sortWithinPartitions("seq").drop("seq")


def test_a_spark_write_upserts_and_deletes_by_key_in_one_commit(spark: Any, tmp_path: Path) -> None:
    table, model = _table(tmp_path)
    before = table.version
    batch = changes(np.random.default_rng(2), 400, 500)  # repeats and deletes, some of keys never written
    model.apply(batch)
    data = batch.append_column("seq", pa.array(np.arange(batch.num_rows)))
    _df(spark, data, 3).write.format("maintd").mode("append").option("opColumn", "op").save(table.uri)
    assert table.version == before + 1  # one commit for the whole write
    commit = table.history(1)[0]
    assert commit.operation == "WRITE" and commit.parameters["engine"] == "spark"
    assert commit.files_added > 3 and commit.metrics["rows"] > 0  # one level-0 file per task and bucket
    assert by_key(table.read()).equals(model.table())


def test_within_a_spark_partition_the_last_row_of_a_key_wins(spark: Any, tmp_path: Path) -> None:
    table, model = _table(tmp_path)
    rows = pa.table({"id": [1, 1, 2, 2, 1], "region": ["eu", "eu", "us", "us", "eu"],
                     "name": ["a", "b", "c", "d", "e"], "amount": [1.0, 2.0, 3.0, 4.0, 5.0],
                     "day": pa.array([None] * 5, pa.date32()), "op": pa.array([0, 0, 0, 1, 0], pa.int8())})
    one_partition = _rows(spark, rows, f"{ROWS}, op byte").coalesce(1)
    one_partition.write.format("maintd").mode("append").option("opColumn", "op").save(table.uri)
    model.apply(rows)
    assert by_key(table.read()).equals(model.table())
    got = {r["id"]: r["name"] for r in table.read().to_pylist() if r["id"] in (1, 2)}
    assert got == {1: "e"}


@pytest.mark.slow
def test_overwrite_replaces_the_table_or_only_the_partitions_of_replace_where(spark: Any, tmp_path: Path) -> None:
    table, model = _table(tmp_path)
    eu = pa.table({"id": pa.array([9001, 9002], pa.int64()), "region": ["eu", "eu"], "name": ["x", "y"],
                   "amount": [1.0, 2.0], "day": pa.array([None, None], pa.date32())})
    _rows(spark, eu).write.format("maintd").mode("overwrite").option("replaceWhere", "region = 'eu'").save(table.uri)
    kept = model.table().filter(pc.field("region") != "eu")
    assert by_key(table.read()).equals(by_key(pa.concat_tables([kept, eu.cast(ARROW)])))
    assert table.history(1)[0].operation == "OVERWRITE"
    with pytest.raises(Exception, match=r"1 row\(s\) lie outside replaceWhere"):
        bad = pa.concat_tables([eu, eu.set_column(1, "region", pa.array(["eu", "us"]))]).slice(2)
        _rows(spark, bad).write.format("maintd").mode("overwrite").option("replaceWhere", "region = 'eu'").save(
            table.uri)
    _rows(spark, eu).write.format("maintd").mode("overwrite").save(table.uri)
    assert by_key(table.read()).equals(eu.cast(ARROW))


def test_replace_where_reads_back_partitions_of_dates_beyond_the_years_arrow_parses(spark: Any,
                                                                                   tmp_path: Path) -> None:
    far, early, now = 3_000_000, -800_000, 19_723  # 10183-09-21, -0221-09-04, 2024-01-01 (docs/format.md)
    table = Table.create(str(tmp_path / "t"), "id:int64!,ds:date!,v:string", primary_key="id", partition_by="ds",
                         buckets=2)
    table.upsert(pa.table({"id": [1, 2, 3], "ds": pa.array([far, early, now], pa.int32()).cast(pa.date32()),
                           "v": ["a", "b", "c"]}))
    assert {f.partition["ds"] for f in table.files()} == {"10183-09-21", "-0221-09-04", "2024-01-01"}

    def rows() -> list[tuple[int, int, str]]:
        t = table.read()
        return sorted(zip(t.column("id").to_pylist(), t.column("ds").cast(pa.int32()).to_pylist(),
                          t.column("v").to_pylist(), strict=True))

    far_rows = spark.sql(f"select 4L as id, date_add(date '1970-01-01', {far}) as ds, 'new' as v")
    far_rows.write.format("maintd").mode("overwrite").option("replaceWhere", "ds > date '9999-12-31'").save(
        table.uri)
    assert rows() == [(2, early, "b"), (3, now, "c"), (4, far, "new")]
    now_rows = spark.sql("select 5L as id, date '2024-01-01' as ds, 'today' as v")
    now_rows.write.format("maintd").mode("overwrite").option("replaceWhere", "ds = date '2024-01-01'").save(
        table.uri)
    assert rows() == [(2, early, "b"), (4, far, "new"), (5, now, "today")]
    assert table.history(1)[0].operation == "OVERWRITE"


def test_replace_where_refuses_a_partition_text_that_is_no_value_of_its_column(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "t"), "id:int64!,ds:date!", primary_key="id", partition_by="ds")
    where = parse_filter("ds >= date '2024-01-01'", table.metadata, where="replaceWhere")
    job = WriteJob(table.uri, table.metadata, table.version, overwrite=True, replace_where=where)
    live = {"a": SimpleNamespace(partition={"ds": "2024-01-02"}), "b": SimpleNamespace(partition={"ds": None}),
            "c": SimpleNamespace(partition={"ds": "10183-09-21"}), "d": SimpleNamespace(partition={"ds": "2023-12-31"})}
    assert job._replaced(SimpleNamespace(files=live)) == [(("ds", "2024-01-02"),), (("ds", "10183-09-21"),)]
    live["e"] = SimpleNamespace(partition={"ds": "soon"})
    with pytest.raises(InvalidInputError, match=r"partition text 'soon' of column 'ds' is not a value of its type "
                                                r"\(date\)"):
        job._replaced(SimpleNamespace(files=live))


REFUSED = [
    ("id long, region string, name string, amount double, day date, colour int", "colour is not a column of the table"),
    ("id long, region string, name string, amount string, day date", "amount is string but the table has double"),
    ("region string, name string, amount double, day date", r"lacks key column\(s\) id"),
    ("ID long, region string, name string, amount double, day date", "column names are case-sensitive"),
    ("id long, region string, name string, amount double", r"day \(date\) is missing"),
    ("id long, region string, name string, amount double, day timestamp", "day is timestamp but the table has date"),
]


@pytest.mark.slow
def test_a_dataframe_that_does_not_fit_is_refused_before_any_task_runs(spark: Any, tmp_path: Path) -> None:
    table, _ = _table(tmp_path)
    before, files = table.version, _data_files(table)
    for schema, error in REFUSED:
        df = spark.createDataFrame([], schema)
        with pytest.raises(Exception, match=error):
            df.write.format("maintd").mode("append").save(table.uri)
    assert table.version == before and _data_files(table) == files
    widened = spark.createDataFrame([(7, "eu", "n", 1.5, None)], "id int, region string, name string, amount float, "
                                                                 "day date")
    widened.write.format("maintd").mode("append").save(table.uri)  # int into bigint, float into double: exact
    assert table.read().filter(pc.field("id") == 7).to_pylist()[0]["amount"] == 1.5


@pytest.mark.slow
def test_null_keys_and_bad_operations_fail_the_write_and_leave_no_file(spark: Any, tmp_path: Path) -> None:
    table, _ = _table(tmp_path)
    before, files = table.version, _data_files(table)
    rows = "id long, region string, name string, amount double, day date, op int"
    null_key = spark.createDataFrame([(1, "eu", "a", 1.0, None, 0), (None, "eu", "b", 2.0, None, 0)], rows)
    with pytest.raises(Exception, match="key column 'id' has 1 null value"):
        null_key.coalesce(1).write.format("maintd").mode("append").option("opColumn", "op").save(table.uri)
    bad_op = spark.createDataFrame([(1, "eu", "a", 1.0, None, 7)], rows)
    with pytest.raises(Exception, match=r"opColumn 'op' holds \[7\]"):
        bad_op.write.format("maintd").mode("append").option("opColumn", "op").save(table.uri)
    with pytest.raises(Exception, match="has no column 'kind'"):
        bad_op.write.format("maintd").mode("append").option("opColumn", "kind").save(table.uri)
    with pytest.raises(Exception, match="replaceWhere applies to mode"):
        bad_op.drop("op").write.format("maintd").mode("append").option("replaceWhere", "region = 'eu'").save(
            table.uri)
    with pytest.raises(Exception, match="replaceWhere may name partition columns only"):
        bad_op.drop("op").write.format("maintd").mode("overwrite").option("replaceWhere", "id = 1").save(table.uri)
    assert table.version == before and _data_files(table) == files


def test_a_key_in_two_spark_partitions_is_refused_and_its_files_deleted(spark: Any, tmp_path: Path) -> None:
    table, _ = _table(tmp_path)
    before, files = table.version, _data_files(table)
    rows = [(i, "eu", f"n{i}", float(i), None) for i in range(0, 40)] + [(5, "eu", "again", 0.0, None)]
    df = spark.createDataFrame(rows, "id long, region string, name string, amount double, day date")
    with pytest.raises(Exception, match=r"holds key \{'id': 5\}.*in more than one Spark partition"):
        df.repartition(2).write.format("maintd").mode("append").save(table.uri)
    assert table.version == before and _data_files(table) == files
    by_range = df.dropDuplicates(["id"]).repartitionByRange(3, "id")  # tasks hold disjoint key ranges
    by_range.write.format("maintd").mode("append").save(table.uri)
    assert table.version == before + 1
    mine = {r["id"] for r in table.read().to_pylist() if r["region"] == "eu" and r["name"] in (f"n{r['id']}", "again")}
    assert mine == set(range(40))


def test_an_aborted_write_deletes_what_its_finished_tasks_wrote(tmp_path: Path) -> None:
    table, _ = _table(tmp_path)
    files = _data_files(table)
    job = WriteJob(table.uri, table.metadata, table.version)
    data = changes(np.random.default_rng(3), 50, 100, delete_share=0.0).drop_columns(["op"])
    done = job.write_task(data.to_batches())
    assert isinstance(done, FilesWritten) and done.adds and _data_files(table) > files
    job.abort([done, None])
    assert _data_files(table) == files


def test_a_first_write_given_a_key_creates_the_table_and_save_modes_behave_as_spark_documents(
        spark: Any, tmp_path: Path) -> None:
    import maintd.spark
    from maintd import TableExistsError, TableNotFoundError

    uri = str(tmp_path / "orders")
    df = spark.createDataFrame([(1, "eu", "a", 1.5, None, 0), (2, "us", "b", 2.5, None, 0)], f"{ROWS}, op byte")
    with pytest.raises(Exception, match="primaryKey"):  # no table, no key: nothing to create it from
        df.write.format("maintd").mode("append").save(uri)
    assert not (tmp_path / "orders").exists()
    with pytest.raises(TableNotFoundError, match="no primary_key"):
        maintd.spark.save(df, uri)
    assert maintd.spark.save(df, uri, primary_key=["region", "id"], partition_by="region", buckets=2,
                             options={"opColumn": "op", "property.acid.data.retain.hours": "48"})
    table = Table.open(uri)
    md = table.metadata
    assert (md.primary_key, md.partition_by, md.buckets) == (("region", "id"), ("region",), 2)
    assert md.properties["acid.data.retain.hours"] == "48" and "op" not in md.column_names
    assert [(f.name, f.nullable) for f in md.fields][:2] == [("id", False), ("region", False)]
    assert sorted(table.read()["id"].to_pylist()) == [1, 2] and table.version == 1
    with pytest.raises(TableExistsError, match="mode 'append'"):
        maintd.spark.save(df, uri, primary_key="id")  # ErrorIfExists, Spark's default: refused, nothing written
    assert not maintd.spark.save(df, uri, "ignore", primary_key="id") and table.version == 1
    more = spark.createDataFrame([(3, "eu", "c", 3.5, None, 0)], f"{ROWS}, op byte")
    assert maintd.spark.save(more, uri, "append", options={"opColumn": "op"}) and table.version == 2
    fresh = str(tmp_path / "fresh")
    assert maintd.spark.save(df.drop("op"), fresh, "ignore", primary_key="id")  # ignore creates when absent
    assert Table.open(fresh).read().num_rows == 2
    df.drop("op").write.format("maintd").mode("append").option("primaryKey", "id").save(str(tmp_path / "plain"))
    assert Table.open(str(tmp_path / "plain")).read().num_rows == 2  # the DataFrameWriter creates it too


@pytest.mark.slow
def test_a_table_path_is_named_in_spark_sql_by_a_temp_view(spark: Any, tmp_path: Path) -> None:
    import maintd.spark

    table, model = _table(tmp_path)
    first = table.version
    table.upsert(pa.table({"id": pa.array([100_000], pa.int64()), "region": ["eu"], "name": ["new"],
                           "amount": [1.0], "day": pa.array([None], pa.date32())}))
    maintd.spark.create_temp_view(spark, "orders_now", table.uri)
    maintd.spark.create_temp_view(spark, "orders_then", table.uri, versionAsOf=first)
    now = spark.sql("SELECT count(*) AS n FROM orders_now").collect()[0]["n"]
    then = spark.sql("SELECT count(*) AS n FROM orders_then").collect()[0]["n"]
    assert (now, then) == (len(model.rows) + 1, len(model.rows))
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW orders_sql USING maintd OPTIONS (path '{table.uri}')")
    assert spark.sql("SELECT count(*) AS n FROM orders_sql WHERE id = 100000").collect()[0]["n"] == 1
    spark.sql(f"CREATE OR REPLACE TEMPORARY VIEW orders_sql_then USING maintd OPTIONS (path '{table.uri}', "
              f"versionAsOf '{first}')")
    assert spark.sql("SELECT count(*) AS n FROM orders_sql_then WHERE id = 100000").collect()[0]["n"] == 0
