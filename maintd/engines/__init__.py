"""How other engines reach a maintd table. Above the table layer, beside execution: engines import
the table format and storage, never the planner, the service or the CLI.

* :mod:`maintd.engines.spark`: the ``maintd`` Spark data source (read, write, stream).

The in-process readers (DuckDB, Polars, pandas) are part of the table API itself
(``Table.to_duckdb`` ...) and live in :mod:`maintd.table.read.interop`.
"""
