"""In-process readers: to_batches, DuckDB, Polars and pandas read what Table.read() reads."""

from __future__ import annotations

import builtins
from collections.abc import Iterator
from typing import Any

import duckdb  # the test extra installs both: a missing one is a broken environment, not a skip
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from maintd import Table

from .helpers import by_key, kinds


@pytest.fixture
def con() -> Iterator[Any]:
    c = duckdb.connect()
    yield c
    c.close()


def test_the_table_has_a_base_file_and_deltas_of_every_level(layered: tuple[Table, Any, dict[str, int]]) -> None:
    table, model, _ = layered
    assert kinds(table) == {"base", "L0", "L1", "L2"}
    assert by_key(table.read()).equals(model.table())


def test_to_batches_streams_what_read_returns_for_every_version(layered: tuple[Table, Any, dict[str, int]]) -> None:
    table, _, marks = layered
    for v in sorted(set(marks.values())):
        expected = table.read(version=v)
        got = pa.Table.from_batches(list(table.to_batches(version=v)), schema=expected.schema)
        assert got.equals(expected), v  # the same rows in the same order: bucket after bucket, by key


def test_to_batches_with_columns_and_a_filter_equals_a_filtered_read(layered: tuple[Table, Any, dict[str, int]]
                                                                      ) -> None:
    table, _, _ = layered
    full = table.read()
    expr = (pc.field("region") == "eu") & (pc.field("amount") > 0.5)
    expected = full.filter(expr).select(["id", "amount"])
    got = pa.Table.from_batches(list(table.to_batches(columns=["id", "amount"],
                                                      filter="region = 'eu' and amount > 0.5", batch_rows=7)))
    assert got.equals(expected)
    assert max(b.num_rows for b in table.to_batches(batch_rows=7)) == 7


def test_duckdb_reads_what_read_returns(layered: tuple[Table, Any, dict[str, int]], con: Any) -> None:
    table, _, marks = layered
    for v in (marks["two_l1"], marks["latest"]):
        rel = table.to_duckdb(con, version=v)
        expected = by_key(table.read(version=v))
        assert by_key(rel.to_arrow_table().cast(expected.schema)).equals(expected)


def test_a_duckdb_relation_can_run_queries_again_and_aggregates_without_materialising(
        layered: tuple[Table, Any, dict[str, int]], con: Any) -> None:
    table, _, _ = layered
    full = table.read()
    rel = table.to_duckdb(con)
    counts = dict(rel.aggregate("region, count(*)", "region").fetchall())
    assert counts == {r: full.filter(pc.field("region") == r).num_rows for r in ("ap", "eu", "us")}
    assert rel.aggregate("count(*)").fetchall() == [(full.num_rows,)]  # a second execution streams again
    con.register("orders", rel)
    assert con.sql("select max(id) from orders where region = 'us'").fetchall() == [
        (pc.max(full.filter(pc.field("region") == "us")["id"]).as_py(),)]


def test_polars_reads_what_read_returns_lazily_and_eagerly(layered: tuple[Table, Any, dict[str, int]]) -> None:
    table, _, marks = layered
    lazy = table.to_polars(version=marks["before_l0"])
    assert isinstance(lazy, pl.LazyFrame)
    expected = by_key(table.read(version=marks["before_l0"]))
    assert by_key(lazy.collect().to_arrow()).cast(expected.schema).equals(expected)
    eager = table.to_polars(lazy=False)
    assert isinstance(eager, pl.DataFrame)
    assert by_key(eager.to_arrow()).cast(expected.schema).equals(by_key(table.read()))


def test_a_polars_query_reads_only_the_columns_it_needs(layered: tuple[Table, Any, dict[str, int]],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    table, _, _ = layered
    from maintd.table.read import scan as scan_module

    seen: list[tuple[str, ...]] = []
    real = scan_module.read_unit

    def spy(storage: Any, metadata: Any, unit: Any, columns: Any, row_filter: Any = None) -> pa.Table:
        seen.append(tuple(columns))
        return real(storage, metadata, unit, columns, row_filter)

    monkeypatch.setattr(scan_module, "read_unit", spy)
    out = table.to_polars().filter(pl.col("amount") > 0.9).select("id").collect()
    full = table.read()
    assert sorted(out["id"].to_list()) == sorted(full.filter(pc.field("amount") > 0.9)["id"].to_pylist())
    assert seen and all(set(cols) == {"id", "amount"} for cols in seen)


def test_pandas_reads_what_read_returns(layered: tuple[Table, Any, dict[str, int]]) -> None:
    table, _, _ = layered
    df = table.to_pandas(columns=["id", "name"], filter=[("region", "in", ["ap", "us"])])
    expected = table.read(columns=["id", "name", "region"])
    expected = expected.filter(pc.is_in(expected["region"], pa.array(["ap", "us"]))).select(["id", "name"])
    assert sorted(df.itertuples(index=False, name=None)) == sorted(zip(*expected.to_pydict().values(), strict=True))


@pytest.mark.parametrize(("method", "extra"), [("to_duckdb", "duckdb"), ("to_polars", "polars")])
def test_a_missing_optional_engine_names_the_extra_to_install(layered: tuple[Table, Any, dict[str, int]],
                                                              monkeypatch: pytest.MonkeyPatch, method: str,
                                                              extra: str) -> None:
    table, _, _ = layered
    real_import = builtins.__import__

    def no_engine(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == extra or name.startswith(extra + "."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_engine)
    import importlib

    monkeypatch.setattr(importlib, "import_module", lambda name: no_engine(name))
    with pytest.raises(ImportError, match=rf"pip install 'maintd\[{extra}\]'"):
        getattr(table, method)()
