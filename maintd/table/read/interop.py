"""DuckDB, Polars and pandas over a :class:`~maintd.table.read.scan.TableScan`.

Each adapter hands the engine the scan's Arrow stream, so rows arrive bucket by bucket and the
engine decides how much of them to hold: a DuckDB aggregate keeps only its state. DuckDB and Polars
are optional extras (``pip install 'maintd[duckdb]'``, ``'maintd[polars]'``); they are imported
only when asked for, and a missing one is an ``ImportError`` that names the extra to install.

These adapters live beside the scan rather than in :mod:`maintd.engines` because ``Table.to_duckdb``,
``to_polars`` and ``to_pandas`` are part of the table API, and they need nothing above the table layer.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pyarrow as pa

from maintd.table.read.scan import TableScan


def require(module: str, extra: str) -> ModuleType:
    """Import an optional dependency, or fail with the pip extra that brings it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"{module} is not installed; it is an optional dependency of maintd: "
            f"pip install 'maintd[{extra}]' (or pip install {module})"
        ) from exc


def to_duckdb(scan: TableScan, connection: Any = None) -> Any:
    """A DuckDB relation over the scan's stream (re-runnable: each execution streams the scan anew).

    Args:
        scan: the planned scan.
        connection: a ``duckdb.DuckDBPyConnection``; None uses DuckDB's default connection.
    """
    duckdb = require("duckdb", "duckdb")
    return (connection if connection is not None else duckdb).from_arrow(scan)


def to_polars(scan: TableScan, *, lazy: bool = True) -> Any:
    """A Polars LazyFrame over the scan (an eager DataFrame with ``lazy=False``).

    The LazyFrame is a Polars IO source: Polars asks it for the columns a query needs, so only those
    are read (the filter's and key columns aside), and applies its own predicates to every batch.
    """
    pl = require("polars", "polars")
    if not lazy:
        return pl.from_arrow(scan.to_table())
    try:
        from polars.io.plugins import register_io_source
    except ImportError:  # an old Polars without IO plugins: a LazyFrame over the materialised rows
        return pl.from_arrow(scan.to_table()).lazy()

    def source(with_columns: list[str] | None, predicate: Any, n_rows: int | None,
               batch_size: int | None) -> Iterator[Any]:
        sub = scan.select(with_columns) if with_columns is not None else scan
        if batch_size:
            sub = TableScan(sub.storage, sub.plan, batch_rows=batch_size)
        left = n_rows
        for batch in sub.to_batches():
            df = pl.from_arrow(batch)
            if predicate is not None:
                df = df.filter(predicate)
            if left is not None:
                df = df.head(left)
                left -= df.height
            yield df
            if left is not None and left <= 0:
                return

    schema = pl.from_arrow(scan.schema.empty_table()).schema
    return register_io_source(source, schema=schema)


def to_pandas(scan: TableScan) -> Any:
    """A pandas DataFrame of the scan (materialised: pandas has no lazy frames)."""
    t: pa.Table = scan.to_table()
    return t.to_pandas()
