"""Writers: validate a batch, split it by partition and bucket, settle repeats, write level-0 DeltaFiles."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from maintd.errors import InvalidInputError, MaintdError, PrimaryKeyError, StorageError
from maintd.storage import Storage
from maintd.table.files.bucketing import bucket_of
from maintd.table.files.datafiles import file_schema, write_data_files
from maintd.table.files.dictionaries import dictionary_types, encode_batch
from maintd.table.files.lazy import lazy_module
from maintd.table.files.merge import first_of_each_key
from maintd.table.files.partitions import partition_text, partition_values
from maintd.table.files.schema import OP_COLUMN, OP_DELETE, OP_UPSERT, conform
from maintd.table.log.actions import AddFile, Metadata

if TYPE_CHECKING:
    import pyarrow.compute as pc
else:
    pc = lazy_module("pyarrow.compute")  # imported by the first call: see maintd.table.files.lazy

TableLike = Any
"""A ``pyarrow.Table``, a ``pandas.DataFrame``, a list of row dicts, or (for deletes) a list of keys."""

_EPOCH = dt.date(1970, 1, 1)
_KEY_DAYS = ((dt.date(1, 1, 1) - _EPOCH).days, (dt.date(9999, 12, 31) - _EPOCH).days)
"""The days since the epoch a key of type date may hold: the years 1 to 9999 (docs/format.md, "Key values in the
log"): its form in ``key_min``/``key_max`` is defined there only."""
_KEY_MICROS = (_KEY_DAYS[0] * 86_400_000_000, (_KEY_DAYS[1] + 1) * 86_400_000_000 - 1)
"""The microseconds since the epoch a key of type timestamp or timestamp_tz (its UTC instant) may hold."""


def to_arrow_table(data: TableLike, *, what: str, key_names: Sequence[str] = ()) -> pa.Table:
    """Coerce user data to a pyarrow Table, with a clear error for anything else."""
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data])
    if type(data).__name__ == "DataFrame" and hasattr(data, "to_dict"):
        return pa.Table.from_pandas(data, preserve_index=False)
    if isinstance(data, list):
        if not data:
            return pa.table({})
        if all(isinstance(r, Mapping) for r in data):
            return pa.Table.from_pylist(list(data))
        if len(key_names) == 1:
            return pa.table({key_names[0]: data})
    raise InvalidInputError(
        f"{what}: expected a pyarrow.Table, a pandas.DataFrame or a list of row dicts, got {type(data).__name__}"
    )


def check_keys(data: pa.Table, metadata: Metadata, *, table: str) -> None:
    """Primary key and partition columns must be present and non-null."""
    needed = list(dict.fromkeys([*metadata.primary_key, *metadata.partition_by]))
    missing = [c for c in needed if c not in data.column_names]
    if missing:
        raise PrimaryKeyError(
            f"table {table}: the data lacks key column(s) {', '.join(missing)} "
            f"(primary key {', '.join(metadata.primary_key)}"
            + (f", partition columns {', '.join(metadata.partition_by)}" if metadata.partition_by else "")
            + ")"
        )
    for c in needed:
        nulls = data.column(c).null_count
        if nulls:
            raise PrimaryKeyError(
                f"table {table}: key column {c!r} has {nulls} null value(s); every row needs a full key"
            )


def check_key_years(data: pa.Table, primary_key: Sequence[str], *, table: str) -> None:
    """Key columns of type date, timestamp or timestamp_tz (after :func:`conform`) hold only the years 1 to 9999.

    Raises:
        InvalidInputError: a key value lies outside them, naming the column, the first such value and the range.
    """
    for c in primary_key:
        col = data.column(c)
        if pa.types.is_date32(col.type):
            numbers, (lo, hi) = col.cast(pa.int32()), _KEY_DAYS
            first, last = "0001-01-01", "9999-12-31"
        elif pa.types.is_timestamp(col.type) and col.type.unit == "us":
            numbers, (lo, hi) = col.cast(pa.int64()), _KEY_MICROS
            zone = " UTC" if col.type.tz else ""
            first, last = f"0001-01-01 00:00:00{zone}", f"9999-12-31 23:59:59.999999{zone}"
        else:
            continue
        outside = pc.or_(pc.less(numbers, lo), pc.greater(numbers, hi))
        count = pc.sum(outside).as_py() or 0
        if count:
            shown = pc.cast(col.slice(pc.index(outside, True).as_py(), 1), pa.string())[0].as_py()
            more = f" and {count - 1} more value(s)" if count > 1 else ""
            raise InvalidInputError(
                f"table {table}: key column {c!r} holds {shown!r}{more}, outside the years 1 to 9999 ({first} to "
                f"{last}), the only years the log records a key in (docs/format.md, \"Key values in the log\"); "
                "nothing was written"
            )


def prepare_changes(data: TableLike, ops: np.ndarray | None, metadata: Metadata, *, table: str,
                    deletes_only: bool = False) -> pa.Table:
    """Validate and conform a batch to the table schema, with the ``_maintd_op`` column set.

    Raises:
        InvalidInputError: not a table, no columns, or a key outside the years 1 to 9999
            (:func:`check_key_years`).
        PrimaryKeyError: a key or partition column is missing or holds nulls.
        SchemaMismatchError: the data does not fit the table's schema.
    """
    t = to_arrow_table(data, what=f"table {table}", key_names=metadata.primary_key)
    if t.num_columns == 0:
        raise InvalidInputError(f"table {table}: the batch is empty; nothing to write")
    check_keys(t, metadata, table=table)
    required = set(metadata.primary_key) | set(metadata.partition_by)
    if deletes_only:
        t = t.select([c for c in t.column_names if c in required])
    fields = metadata.fields
    if deletes_only:
        fields = tuple(f if f.name in required else f.model_copy(update={"nullable": True}) for f in fields)
    t = conform(t, fields, table=table, require=required if deletes_only else None)
    check_key_years(t, metadata.primary_key, table=table)
    op = ops if ops is not None else np.full(t.num_rows, OP_DELETE if deletes_only else OP_UPSERT, np.int8)
    return t.append_column(pa.field(OP_COLUMN, pa.int8(), nullable=False), pa.array(op, pa.int8()))


def split_and_write(storage: Storage, metadata: Metadata, batch: pa.Table) -> list[AddFile]:
    """Write one level-0 DeltaFile per (partition, bucket) present in ``batch``; repeats: last wins.

    One sort of the whole batch by (partition, bucket, key, position descending) groups the files' rows,
    orders each file by key and puts the last occurrence of a repeated key first; the files are then
    zero-copy slices of the sorted batch, written together (:func:`write_data_files`).
    """
    if batch.num_rows == 0:
        return []
    pk = list(metadata.primary_key)
    buckets = bucket_of(batch, metadata.primary_key, metadata.buckets)
    parts = partition_values(batch, metadata.partition_by)
    group_cols = [f"__p{i}" for i in range(len(parts))] + ["__bucket"]
    helpers = {f"__p{i}": a for i, a in enumerate(parts)} | {
        "__bucket": pa.array(buckets), "__pos": pa.array(np.arange(batch.num_rows, dtype=np.int64))}
    tmp = batch
    for name, arr in helpers.items():
        tmp = tmp.append_column(name, arr)
    order = [(c, "ascending") for c in [*group_cols, *pk]] + [("__pos", "descending")]
    s = tmp.take(pc.sort_indices(tmp, sort_keys=order))
    s = s.filter(pa.array(first_of_each_key(s, [*group_cols, *pk])))
    starts = np.flatnonzero(first_of_each_key(s, group_cols))
    ends = [*starts[1:].tolist(), s.num_rows]
    layout = file_schema(metadata, "delta", 0)
    # text columns of few values become dictionaries once for the batch: its files share them (write_parquet)
    data = encode_batch(s.select(layout.names).cast(layout),
                        dictionary_types(layout, [*metadata.partition_by, *metadata.primary_key]))
    contents = []
    for a, b in zip(starts.tolist(), ends, strict=True):
        partition = {c: s.column(f"__p{i}")[a].as_py() for i, c in enumerate(metadata.partition_by)}
        contents.append((data.slice(a, b - a), partition, int(s.column("__bucket")[a].as_py())))
    try:
        return write_data_files(storage, metadata, contents, kind="delta", level=0)
    except OSError as exc:  # pyarrow's errors may quote a signed URL: a maintd error is redacted when made
        if isinstance(exc, MaintdError):
            raise
        raise StorageError(f"table {storage.uri}: writing its data files failed: {' '.join(str(exc).split())}; "
                           "nothing was committed") from None


def check_partition_filter(batch: pa.Table, partition: Mapping[str, Any], metadata: Metadata, *, table: str
                           ) -> dict[str, str]:
    """Validate an overwrite's partition spec and that every row of ``batch`` belongs to it.

    ``partition`` maps every partition column to a value of it or to the partition's text
    (:func:`~maintd.table.files.partitions.partition_text`); returns the spec as partition text, column -> text.

    Raises:
        InvalidInputError: the spec does not name exactly the partition columns, a value cannot be a value of
            its column (naming the column, the value, its type and the expected forms), or a row of ``batch``
            lies in another partition.
    """
    unknown = sorted(set(partition) - set(metadata.partition_by))
    if unknown or set(partition) != set(metadata.partition_by):
        raise InvalidInputError(
            f"table {table}: overwrite partition {dict(partition)} must name exactly the partition columns "
            f"({', '.join(metadata.partition_by) or 'none: the table is unpartitioned'})"
        )
    types = {f.name: f.type for f in metadata.fields}
    spec = {c: partition_text(c, types[c], partition[c], table=table) for c in metadata.partition_by}
    for c, arr in zip(metadata.partition_by, partition_values(batch, metadata.partition_by), strict=True):
        bad = pc.sum(pc.not_equal(arr, spec[c])).as_py() or 0
        if bad:
            raise InvalidInputError(
                f"table {table}: {bad} row(s) have {c} != {spec[c]!r} but the overwrite replaces only "
                f"partition {spec}; filter the data or overwrite the whole table"
            )
    return spec
