"""Spark batch reads of a maintd table: merge-on-read per unit, and the change feed per bucket.

Spark plans a Python data source in a Python worker on the driver: the reader is built there
(``DataSource.reader``), pickled *before* ``partitions()`` runs, and shipped with every task. So a
reader holds only what its tasks need (the table URI, the version, the metadata, the columns and
the filter), never a snapshot. ``partitions()`` loads the snapshot, plans the scan
(:func:`maintd.table.read.scan.plan_scan`) and returns one Spark partition per unit (a (partition,
bucket), or a key range of a large bucket) carrying that unit's ``add`` actions. An executor
opens nothing but those files: no log replay, no listing.

Filters reach the scan in two ways. The ``filter`` option (``"region = 'eu' and id > 10"``) works
on every Spark version; it prunes and filters rows, and Spark knows nothing of it. From Spark 4.1,
Spark also pushes the query's own filters (``pushFilters``): those on partition and primary-key
columns prune groups, buckets and files, and every pushed filter is still returned to Spark,
which evaluates it again, so pruning can never change an answer.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from maintd.engines.spark.carry import carried_storage
from maintd.storage import executor_storage
from maintd.table import Snapshot, Table
from maintd.table.files.filters import Predicate, RowFilter, typed
from maintd.table.files.schema import TYPES, to_arrow
from maintd.table.log.actions import Metadata, Protocol
from maintd.table.read.feed import CHANGE_COLUMN, CHANGE_VERSION_COLUMN
from maintd.table.read.scan import ChangeUnit, ScanPlan, ScanUnit, plan_changes, plan_scan, read_change_unit, read_unit

BATCH_ROWS = 65_536
_PUSHABLE = {"EqualTo": "=", "EqualNullSafe": "=", "GreaterThan": ">", "GreaterThanOrEqual": ">=",
             "LessThan": "<", "LessThanOrEqual": "<=", "In": "in", "IsNull": "is null", "IsNotNull": "is not null"}
_PRUNABLE_TYPES = frozenset({"bool", "int8", "int16", "int32", "int64", "string", "date"})
"""Column types whose pushed values compare in Python as in Spark (timestamps depend on the session zone)."""


def pushed_predicate(f: Any, metadata: Metadata) -> Predicate | None:
    """A Spark pushed filter (``pyspark.sql.datasource.EqualTo`` ...) as a typed predicate on a partition
    or primary-key column, or None when it cannot help pruning."""
    name = type(f).__name__
    negated = name == "Not"
    if negated:
        f, name = f.child, type(f.child).__name__
    op = _PUSHABLE.get(name)
    attr = tuple(getattr(f, "attribute", ()))
    if op is None or len(attr) != 1:
        return None
    column = attr[0]
    kinds = {c.name: c.type for c in metadata.fields}
    if column not in (*metadata.partition_by, *metadata.primary_key) or kinds.get(column) not in _PRUNABLE_TYPES:
        return None
    if negated:
        op = {"=": "!=", "in": "not in", "is null": "is not null", "is not null": "is null"}.get(op, "")
        if not op:
            return None
    value = getattr(f, "value", None)
    if op in ("=", "!=") and value is None:
        return None
    try:
        return typed(Predicate(column, op, tuple(value or ()) if op in ("in", "not in") else value),
                     {c: TYPES[t] for c, t in kinds.items()}, where="pushed filter")
    except Exception:  # a value the column cannot take: leave it to Spark
        return None


def combine(row_filter: RowFilter | None, extra: Sequence[Predicate]) -> RowFilter | None:
    """``row_filter AND extra`` (each conjunction gets the extra predicates)."""
    if not extra:
        return row_filter
    if row_filter is None:
        return RowFilter((tuple(extra),))
    return RowFilter(tuple((*conj, *extra) for conj in row_filter.conjunctions))


class SnapshotReader(DataSourceReader):
    """Reads one version of a table, one Spark partition per scan unit."""

    def __init__(self, uri: str, version: int, metadata: Metadata, columns: Sequence[str],
                 row_filter: RowFilter | None, split_bytes: int | None,
                 nullable: Sequence[bool] | None = None) -> None:
        self.uri, self.version, self.metadata = uri, version, metadata
        self.carried = carried_storage(uri)  # the storage options executors open the table with (secrets hidden)
        self.columns = tuple(columns)
        self.row_filter = row_filter
        self.split_bytes = split_bytes
        self.arrow_schema = _as_declared(pa.schema([to_arrow(metadata.fields).field(c) for c in self.columns]),
                                         nullable)

    def pushFilters(self, filters: list[Any]) -> Any:
        pushed = [p for p in (pushed_predicate(f, self.metadata) for f in filters) if p is not None]
        self.row_filter = combine(self.row_filter, pushed)
        return list(filters)  # Spark evaluates every filter again: pruning only ever narrows the input

    def plan(self) -> ScanPlan:
        snap = Table.open(self.uri).snapshot(self.version)
        return plan_scan(snap, self.columns, self.row_filter, split_bytes=self.split_bytes,
                         where=f"table {self.uri}")

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(unit) for unit in self.plan().units]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        unit: ScanUnit | None = _unit_of(partition)
        if unit is None:
            return
        t = read_unit(executor_storage(self.uri, self.carried), self.metadata, unit, self.columns, self.row_filter)
        yield from t.cast(self.arrow_schema).to_batches(max_chunksize=BATCH_ROWS)


class ChangeFeedReader(DataSourceReader):
    """Reads the net changes in versions (start, end], one Spark partition per touched bucket."""

    def __init__(self, uri: str, start: int, end: int, protocol: Protocol, metadata: Metadata,
                 columns: Sequence[str], nullable: Sequence[bool] | None = None) -> None:
        self.uri, self.start, self.end = uri, start, end
        self.carried = carried_storage(uri)
        self.before = Snapshot(version=start, timestamp=0, protocol=protocol, metadata=metadata, files={})
        self.after = Snapshot(version=end, timestamp=0, protocol=protocol, metadata=metadata, files={})
        self.columns = tuple(columns)
        self.arrow_schema = _as_declared(change_schema(metadata, self.columns), nullable)

    def partitions(self) -> list[InputPartition]:
        table = Table.open(self.uri)
        r = table.change_inputs(self.start, self.end)
        units = plan_changes(r.before, r.after, r.groups, r.changed, table.snapshot().priors.values())
        return [InputPartition(u) for u in units]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        unit: ChangeUnit | None = _unit_of(partition)
        if unit is None:
            return
        t = read_change_unit(executor_storage(self.uri, self.carried), self.before, self.after, unit)
        yield from t.select(list(self.columns)).cast(self.arrow_schema).to_batches(max_chunksize=BATCH_ROWS)


def _unit_of(partition: InputPartition | None) -> Any:
    """The unit a Spark partition carries, or None for an empty scan.

    A reader whose ``partitions()`` returns no partition is still read once: PySpark 4.3 hands it
    ``InputPartition(None)`` (earlier releases passed ``None``). Either reads as no rows.
    """
    return None if partition is None else getattr(partition, "value", None)


def _as_declared(schema: pa.Schema, nullable: Sequence[bool] | None) -> pa.Schema:
    """The batches' schema with the nullability Spark declared (it checks batches against it exactly)."""
    if nullable is None:
        return schema
    return pa.schema([f.with_nullable(n) for f, n in zip(schema, nullable, strict=True)])


def change_schema(metadata: Metadata, columns: Sequence[str]) -> pa.Schema:
    """The Arrow schema of change rows: table columns (nullable: a delete shows the last row), then
    ``_change`` and ``_change_version``."""
    fields = {f.name: f.with_nullable(True) for f in to_arrow(metadata.fields)}
    fields[CHANGE_COLUMN] = pa.field(CHANGE_COLUMN, pa.string())
    fields[CHANGE_VERSION_COLUMN] = pa.field(CHANGE_VERSION_COLUMN, pa.int64())
    return pa.schema([fields[c] for c in columns])
