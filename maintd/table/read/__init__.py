"""Reads of a table: merge-on-read, streaming scans, the change feed and other engines' adapters.

Owns: the visible rows of a snapshot, scans planned as units, the change feed between two versions
(:mod:`maintd.table.read.feed`: one module per strategy) and the DuckDB, Polars and pandas adapters.

May import: :mod:`maintd.table.files`, :mod:`maintd.table.log`, :mod:`maintd.storage` and libraries; never
the Table API above it (:mod:`maintd.table.table`, :mod:`maintd.table.transaction`, :mod:`maintd.table.pins`).
"""
