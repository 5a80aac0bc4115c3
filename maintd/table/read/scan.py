"""Streaming merge-on-read: a scan is planned as units, and read one unit at a time.

``Table.read()`` materialises the merged table; an engine reading a large table needs the rows as a
stream whose memory does not grow with the table. A scan is therefore planned (:func:`plan_scan`,
pure: a snapshot and a filter in, a :class:`ScanPlan` out) as *units*: one per (partition, bucket),
or one per key range of a bucket whose files exceed ``split_bytes``
(:func:`maintd.table.files.keys.split_lead_ranges`).
A unit is the smallest input the "greatest version wins" merge is exact on, so each is read, merged,
filtered and emitted on its own (:func:`read_unit`), and memory is bounded by one unit's merge.

The same plan serves every reader: :class:`TableScan` streams it in this process (``Table.to_batches``
and the DuckDB, Polars and pandas adapters of :mod:`maintd.table.read.interop`), and the Spark data source
(:mod:`maintd.engines.spark`) ships one unit per Spark partition to its executors.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from maintd.errors import InvalidInputError
from maintd.storage import Storage
from maintd.table.files.datafiles import file_schema, read_data_file, with_hidden_columns
from maintd.table.files.evolution import added_columns, fill_missing
from maintd.table.files.filters import RowFilter
from maintd.table.files.keys import KeyRange, column_value, file_in_range, lead_type, split_lead_ranges
from maintd.table.files.merge import latest_rows
from maintd.table.files.pruning import buckets_for, file_may_match, partition_may_match
from maintd.table.files.schema import HIDDEN_COLUMNS, to_arrow
from maintd.table.log.actions import AddFile, Metadata, PriorRows
from maintd.table.log.snapshot import Snapshot, by_group, format_partition, partition_key
from maintd.table.read.feed import net_changes

DEFAULT_SPLIT_BYTES = 256 << 20
"""A bucket whose files hold more bytes than this is read in key ranges of about this size."""
DEFAULT_BATCH_ROWS = 65_536
_READ_THREADS = 4


@dataclass(frozen=True)
class ScanUnit:
    """One independently merged piece of a scan: a (partition, bucket), or a key range of one (bounded by
    values of the leading key column: :func:`~maintd.table.files.keys.split_lead_ranges`)."""

    partition: Mapping[str, str | None]
    bucket: int
    files: tuple[AddFile, ...]
    key_range: KeyRange = field(default_factory=KeyRange)

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.files)

    def describe(self, metadata: Metadata) -> str:
        where = format_partition(partition_key(self.partition, metadata.partition_by))
        r = self.key_range
        rng = f" keys [{r.lo[0] if r.lo else None}, {r.hi[0] if r.hi else None})" if r.bounded else ""
        return f"{where} bucket {self.bucket}{rng}: {len(self.files)} file(s)"


@dataclass(frozen=True)
class ScanPlan:
    """What a scan of one version reads: its units in output order, and how much was pruned."""

    version: int
    metadata: Metadata
    columns: tuple[str, ...]
    row_filter: RowFilter | None
    units: tuple[ScanUnit, ...]
    files_live: int
    """Live files of the version; ``files_read`` of them remain after pruning."""

    @property
    def files_read(self) -> int:
        return len({f.path for u in self.units for f in u.files})

    @property
    def schema(self) -> pa.Schema:
        full = to_arrow(self.metadata.fields)
        return pa.schema([full.field(c) for c in self.columns])

    def select(self, columns: Sequence[str] | None) -> ScanPlan:
        """The same units with other output columns (the filter's columns are read regardless)."""
        return replace(self, columns=check_columns(self.metadata, columns, where="scan"))


def check_columns(metadata: Metadata, columns: Sequence[str] | None, *, where: str) -> tuple[str, ...]:
    if columns is None:
        return metadata.column_names
    if isinstance(columns, str):
        columns = [columns]
    unknown = [c for c in columns if c not in metadata.column_names]
    if unknown:
        raise InvalidInputError(
            f"{where}: unknown column(s) {', '.join(unknown)}; the table has {', '.join(metadata.column_names)}"
        )
    return tuple(dict.fromkeys(columns))


def plan_scan(snapshot: Snapshot, columns: Sequence[str] | None = None, row_filter: RowFilter | None = None,
              *, split_bytes: int | None = None, where: str = "scan") -> ScanPlan:
    """Plan a scan of ``snapshot``: prune groups, buckets and files by the filter, split large buckets."""
    md = snapshot.metadata
    cols = check_columns(md, columns, where=where)
    target = DEFAULT_SPLIT_BYTES if split_bytes is None else split_bytes
    buckets = buckets_for(row_filter, md)
    lead, typ = md.primary_key[0], lead_type(md)
    units: list[ScanUnit] = []
    groups = sorted(snapshot.by_bucket().items(), key=lambda kv: (str(kv[0][0]), kv[0][1]))
    for (part, bucket), files in groups:
        if (buckets is not None and bucket not in buckets) or not partition_may_match(dict(part), row_filter, md):
            continue
        kept = tuple(f for f in files if file_may_match(f, row_filter, lead, typ))
        if not kept:
            continue
        for r in split_lead_ranges(kept, target):
            inside = tuple(f for f in kept if file_in_range(f, r) != "none")
            if inside:
                units.append(ScanUnit(dict(part), bucket, inside, r))
    return ScanPlan(snapshot.version, md, cols, row_filter, tuple(units), len(snapshot.files))


def _key_columns(metadata: Metadata) -> list[str]:
    return list(dict.fromkeys([*metadata.partition_by, *metadata.primary_key]))


def read_unit(storage: Storage, metadata: Metadata, unit: ScanUnit, columns: Sequence[str],
              row_filter: RowFilter | None = None) -> pa.Table:
    """The visible rows of one unit: greatest version per key, deletes dropped, filtered, projected."""
    keys = _key_columns(metadata)
    need = list(dict.fromkeys([*keys, *columns, *(row_filter.columns if row_filter else ())]))
    files = unit.files
    if len(files) > 1:
        with ThreadPoolExecutor(min(_READ_THREADS, len(files))) as pool:
            parts = list(pool.map(lambda f: read_in_range(storage, metadata, f, need, unit.key_range), files))
    else:
        parts = [read_in_range(storage, metadata, f, need, unit.key_range) for f in files]
    lone = files[0] if len(files) == 1 else None
    if lone is not None and (lone.kind == "base" or (lone.level == 0 and lone.delete_rows == 0)):
        t = parts[0]  # a BaseFile, or a writer's file without deletes: every key is there once already
    elif parts:
        t = latest_rows(pa.concat_tables(parts, promote_options="default"), keys)
    else:
        t = to_arrow(metadata.fields).empty_table()
    t = t.drop_columns([c for c in HIDDEN_COLUMNS if c in t.column_names])
    if row_filter is not None:
        t = row_filter.apply(t)
    return t.select(list(columns))


def read_in_range(storage: Storage, metadata: Metadata, f: AddFile, columns: Sequence[str],
                  key_range: KeyRange) -> pa.Table:
    """A file's rows (with the hidden columns) whose leading key is in ``key_range`` (bounded by values of
    the leading key column, as a scan unit's range is).

    A file wholly inside the range is read as is; one that straddles it is read with a filter on the
    leading key, so Parquet skips the row groups outside (files are sorted by key).
    """
    if file_in_range(f, key_range) == "all":
        return read_data_file(storage, metadata, f, columns)
    lead, typ = metadata.primary_key[0], lead_type(metadata)
    lo, hi = key_range.lo, key_range.hi
    bounds = [(lead, ">=", column_value(lo[0], typ))] if lo else []
    bounds += [(lead, "<", column_value(hi[0], typ))] if hi else []
    expected = file_schema(metadata, f.kind, f.level)
    wanted = list(dict.fromkeys([*metadata.primary_key, *columns])) + [c for c in HIDDEN_COLUMNS if c in expected.names]
    read_cols = wanted
    optional = added_columns(metadata)
    if optional & set(wanted):  # the file may have been written before some of them were added: read as nulls
        found = pq.read_schema(storage.full_path(f.path), filesystem=storage.filesystem)
        read_cols = [c for c in wanted if c not in optional or found.get_field_index(c) >= 0]
    t = pq.read_table(storage.full_path(f.path), columns=read_cols, filters=bounds or None,
                      filesystem=storage.filesystem, partitioning=None)
    return with_hidden_columns(fill_missing(t, expected, wanted), f)


def unit_batches(storage: Storage, plan: ScanPlan, unit: ScanUnit, batch_rows: int = DEFAULT_BATCH_ROWS
                 ) -> Iterator[pa.RecordBatch]:
    t = read_unit(storage, plan.metadata, unit, plan.columns, plan.row_filter)
    yield from t.cast(plan.schema).to_batches(max_chunksize=batch_rows)


class TableScan:
    """A planned scan of one table version, streamable any number of times.

    It speaks the Arrow PyCapsule stream protocol (``__arrow_c_stream__``), so DuckDB, Polars,
    pyarrow and any other Arrow consumer read it directly; each consumption streams the units anew.
    """

    def __init__(self, storage: Storage, plan: ScanPlan, *, batch_rows: int = DEFAULT_BATCH_ROWS) -> None:
        if batch_rows < 1:
            raise InvalidInputError(f"batch_rows must be at least 1, got {batch_rows}")
        self.storage = storage
        self.plan = plan
        self.batch_rows = batch_rows

    @property
    def schema(self) -> pa.Schema:
        return self.plan.schema

    @property
    def version(self) -> int:
        return self.plan.version

    def select(self, columns: Sequence[str] | None) -> TableScan:
        return TableScan(self.storage, self.plan.select(columns), batch_rows=self.batch_rows)

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """The merged rows as record batches, unit after unit (one unit's merge in memory at a time)."""
        for unit in self.plan.units:
            yield from unit_batches(self.storage, self.plan, unit, self.batch_rows)

    def to_reader(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self.schema, self.to_batches())

    def to_table(self) -> pa.Table:
        return pa.Table.from_batches(list(self.to_batches()), schema=self.schema)

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        return self.to_reader().__arrow_c_stream__(requested_schema)

    def __arrow_c_schema__(self) -> Any:
        return self.schema.__arrow_c_schema__()

    def __repr__(self) -> str:
        p = self.plan
        return (f"TableScan(version={p.version}, columns={list(p.columns)}, filter={str(p.row_filter or '') or None}, "
                f"units={len(p.units)}, files={p.files_read}/{p.files_live})")


@dataclass(frozen=True)
class ChangeUnit:
    """The files of one (partition, bucket) before and after a range of versions, for its net changes: its
    live files at both versions, the files the data-changing commits between them added or removed
    (``changed``; None: not known, the unit is diffed whole) and the table's prior-rows files of the group."""

    partition: Mapping[str, str | None]
    bucket: int
    before: tuple[AddFile, ...]
    after: tuple[AddFile, ...]
    changed: tuple[AddFile, ...] | None = None
    priors: tuple[PriorRows, ...] = ()


def plan_changes(before: Snapshot, after: Snapshot, touched: set[tuple[Any, int]],
                 changed: Sequence[AddFile] | None = None, priors: Iterable[PriorRows] = ()) -> list[ChangeUnit]:
    """One unit per (partition, bucket) that a data-changing commit between the two versions touched, with its
    share of ``changed`` (:meth:`Table.changed_files`) and of ``priors`` (the latest state's prior-rows files)."""
    was, now = before.by_bucket(), after.by_bucket()
    mine = by_group(changed or (), after.metadata.partition_by)
    held = by_group(priors, after.metadata.partition_by)
    return [ChangeUnit(dict(part), bucket, tuple(was.get((part, bucket), ())), tuple(now.get((part, bucket), ())),
                       None if changed is None else tuple(mine.get((part, bucket), ())),
                       tuple(held.get((part, bucket), ())))
            for part, bucket in sorted(touched, key=lambda g: (str(g[0]), g[1]))]


def read_change_unit(storage: Storage, before: Snapshot, after: Snapshot, unit: ChangeUnit) -> pa.Table:
    """The net changes of one unit, as ``Table.changes`` computes them (``_change``, ``_change_version``).

    ``before`` and ``after`` need only their version, protocol and metadata: the unit brings the files.
    """
    group = {(partition_key(unit.partition, after.metadata.partition_by), unit.bucket)}
    was = replace(before, files={f.path: f for f in unit.before}, tombstones={})
    now = replace(after, files={f.path: f for f in unit.after}, tombstones={})
    return net_changes(storage, was, now, group, unit.changed, unit.priors)
