"""Spark batch and streaming writes: executors write level-0 files, the driver commits them once.

A write is a :class:`WriteJob`, settled on the driver before any task starts: the table's metadata
and version, the DataFrame's schema checked against it (:func:`~maintd.engines.spark.types.check_write_schema`),
the operation column, and for an overwrite the partitions it replaces. Each Spark task then
validates its whole input (keys present and not null, values castable, rows inside ``replaceWhere``)
*before* it writes, splits it by (partition, bucket) and writes one level-0 file per group with the
table's own writer (:func:`maintd.table.files.writer.split_and_write`), and returns only the ``add``
actions. The driver commits them in one transaction.

Keys across tasks. Within a task the last row of a key wins, as in ``Table.upsert``. Rows of one commit share
a version, so a key in two tasks has no "last" row: the commit refuses such a write, checking the files' key
bounds first and reading key columns only where the bounds overlap.

Streaming. Each micro-batch is one commit carrying the application transaction ``(app_id, batch id)``:
``app_id`` is ``spark-query-<query id>``, read from the checkpoint's ``metadata`` file, or the ``appId``
option. A batch Spark runs again after its commit landed is recognised by ``Snapshot.app_txns`` and its new
files are deleted: each batch lands exactly once.

Files are deleted only when their commit certainly did not land (a conflict, exhausted retries, a refused
write, an abort); after any other error they are kept for orphan reclamation.

docs/architecture.md ("Readers and writers") gives the reasons.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from loguru import logger
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamWriter, WriterCommitMessage

from maintd.engines.spark.carry import carried_storage
from maintd.errors import (
    CommitConflictError,
    CommitRetriesExhaustedError,
    InvalidInputError,
    MetadataChangedError,
    PrimaryKeyError,
)
from maintd.storage import CarriedStorage, Storage, executor_storage, storage_for_uri
from maintd.table import AddFile, Metadata, Snapshot, Table
from maintd.table.files.datafiles import read_data_file
from maintd.table.files.evolution import add_columns
from maintd.table.files.filters import RowFilter
from maintd.table.files.partitions import partition_value
from maintd.table.files.schema import OP_DELETE, OP_UPSERT
from maintd.table.files.writer import prepare_changes, split_and_write
from maintd.table.log import features
from maintd.table.log.actions import Field_
from maintd.table.log.snapshot import PartitionKey, partition_key

STREAM_APP_PREFIX = "spark-query-"
_ROW = "_maintd_row"  # the index of a live partition in the rows replaceWhere is applied to (no column's name)


@dataclass
class FilesWritten(WriterCommitMessage):
    """What one Spark task wrote: ``add`` actions as JSON, and the table (id, schema) it wrote them for."""

    task: int
    table_id: str
    fields: tuple[tuple[str, str, bool], ...]
    adds: tuple[str, ...] = ()
    rows: int = 0

    def files(self) -> list[AddFile]:
        return [AddFile.model_validate_json(a) for a in self.adds]


@dataclass(frozen=True)
class WriteJob:
    """One Spark write to a table, settled on the driver; tasks call :meth:`write_task`, the driver
    :meth:`commit` or :meth:`abort`."""

    uri: str
    metadata: Metadata
    read_version: int
    op_column: str | None = None
    overwrite: bool = False
    replace_where: RowFilter | None = None
    operation: str = "WRITE"
    parameters: dict[str, Any] = field(default_factory=dict)
    carried: CarriedStorage | None = None
    """The storage options executors open the table with (taken from the driver; secrets hidden in repr)."""
    added: tuple[Field_, ...] = ()
    """Columns the write adds to the table in its commit (``mergeSchema``); :attr:`metadata` holds them already."""

    def __post_init__(self) -> None:
        if self.carried is None:
            object.__setattr__(self, "carried", carried_storage(self.uri))

    # -- executors ------------------------------------------------------------------------------
    def write_task(self, batches: Iterable[pa.RecordBatch]) -> FilesWritten:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        task = ctx.partitionId() if ctx is not None else 0
        data = [b for b in batches if b.num_rows]
        if not data:
            return FilesWritten(task, self.metadata.table_id, _fields(self.metadata))
        t = pa.Table.from_batches(data)
        ops = None
        if self.op_column is not None:
            ops = self._ops(t.column(self.op_column))
            t = t.drop_columns([self.op_column])
        batch = prepare_changes(t, ops, self.metadata, table=self.uri)
        if self.replace_where is not None:
            outside = batch.num_rows - self.replace_where.apply(batch).num_rows
            if outside:
                raise InvalidInputError(
                    f"table {self.uri}: {outside} row(s) lie outside replaceWhere ({self.replace_where}); an "
                    "overwrite writes only rows of the partitions it replaces: filter the DataFrame first"
                )
        adds = split_and_write(executor_storage(self.uri, self.carried), self.metadata, batch)
        return FilesWritten(task, self.metadata.table_id, _fields(self.metadata),
                            tuple(a.model_dump_json() for a in adds), batch.num_rows)

    def _ops(self, col: pa.ChunkedArray) -> np.ndarray:
        if col.null_count:
            raise InvalidInputError(f"table {self.uri}: opColumn {self.op_column!r} has {col.null_count} null(s); "
                                    "each row needs 0 (upsert) or 1 (delete)")
        ops = np.asarray(pc.cast(col, pa.int64()).to_numpy(zero_copy_only=False))
        if not np.isin(ops, [OP_UPSERT, OP_DELETE]).all():
            bad = sorted(set(ops[~np.isin(ops, [OP_UPSERT, OP_DELETE])].tolist()))[:5]
            raise InvalidInputError(f"table {self.uri}: opColumn {self.op_column!r} holds {bad}; it must hold 0 "
                                    "(upsert) or 1 (delete)")
        return ops.astype(np.int8)

    # -- driver ---------------------------------------------------------------------------------
    def commit(self, messages: Sequence[WriterCommitMessage | None], *, app: tuple[str, int] | None = None,
               latest: bool = False) -> int | None:
        """Commit every task's files in one transaction; returns the version (None: nothing to commit,
        or ``app``'s batch was committed already)."""
        written = [m for m in messages if isinstance(m, FilesWritten)]
        adds = [a for m in written for a in m.files()]
        table = Table.open(self.uri)
        try:
            snap = table.snapshot() if latest else table.snapshot(self.read_version)
            self._check_same_table(snap, written)
            if app is not None and snap.app_txns.get(app[0], -1) >= app[1]:
                logger.info("table {}: {} batch {} was committed already; its new files are dropped",
                            self.uri, app[0], app[1])
                _delete(table.storage, adds)
                return None
            if not adds and not self.overwrite:
                return None
            check_unique_keys(table.storage, self.metadata, written, uri=self.uri)
            return self._commit(table, snap, adds, app, sum(m.rows for m in written))
        except (CommitConflictError, CommitRetriesExhaustedError, InvalidInputError):
            _delete(table.storage, adds)  # these guarantee the commit did not land
            raise

    def _commit(self, table: Table, snap: Snapshot, adds: list[AddFile], app: tuple[str, int] | None,
                rows: int) -> int:
        txn = table.new_transaction(self.operation, read_snapshot=snap)
        target = self._target(snap)
        if target != snap.metadata:  # mergeSchema: the columns are added in the write's own commit
            txn.set_metadata(target)
            txn.require_feature(features.ADDED_COLUMNS)
        if app is not None:
            txn.set_app_transaction(*app)
        if self.overwrite:
            txn.replace(self._replaced(snap))
        for a in adds:
            txn.add(a)
        params = dict(self.parameters) | ({"app_id": app[0], "batch_id": app[1]} if app else {})
        return txn.commit(metrics={"rows": rows, "files": len(adds), "bytes": sum(a.bytes for a in adds)},
                          parameters=params)

    def _replaced(self, snap: Snapshot) -> list[PartitionKey] | None:
        """The partitions an overwrite replaces: all (None), or the live ones ``replaceWhere`` accepts, each
        read back from its text (:func:`~maintd.table.files.partitions.partition_value`).

        Raises:
            InvalidInputError: a live partition's text is not a value of its column's type.
        """
        if self.replace_where is None:
            return None
        pb = self.metadata.partition_by
        live = {partition_key(f.partition, pb): f.partition for f in snap.files.values()}
        if not live:
            return []
        types = {f.name: f.type for f in self.metadata.fields}
        keys = list(live)
        rows = pa.table({c: pa.concat_arrays([partition_value(c, types[c], live[k].get(c), table=self.uri)
                                              for k in keys]) for c in pb}
                        | {_ROW: pa.array(range(len(keys)), pa.int64())})
        return [keys[i] for i in self.replace_where.apply(rows).column(_ROW).to_pylist()]

    def _target(self, snap: Snapshot) -> Metadata:
        """The table's metadata after the commit: ``snap``'s, with the :attr:`added` columns it lacks (an earlier
        micro-batch of a streaming write added them already)."""
        new = [f for f in self.added if f.name not in snap.metadata.column_names]
        return add_columns(snap.metadata, new, table=self.uri) if new else snap.metadata

    def _check_same_table(self, snap: Snapshot, written: Sequence[FilesWritten]) -> None:
        """The files were written for the table and schema the commit is about to land them in."""
        md = self._target(snap)
        wrote_for = {(m.table_id, m.fields) for m in written} | {(self.metadata.table_id, _fields(self.metadata))}
        if wrote_for != {(md.table_id, _fields(md))}:
            raise MetadataChangedError(
                f"table {self.uri} was replaced or its schema changed while the Spark write ran; "
                "nothing was committed: run the write again"
            )

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        """Delete what the tasks that finished wrote (a failed write commits nothing)."""
        adds = [a for m in messages if isinstance(m, FilesWritten) for a in m.files()]
        _delete(storage_for_uri(self.uri), adds)


def _fields(metadata: Metadata) -> tuple[tuple[str, str, bool], ...]:
    return tuple((f.name, f.type, f.nullable) for f in metadata.fields)


def _delete(storage: Storage, adds: Sequence[AddFile]) -> None:
    for a in adds:
        try:
            storage.delete(a.path)
        except OSError as exc:  # left for orphan reclamation
            logger.warning("table {}: could not delete {}: {}", storage.uri, a.path, exc)


def check_unique_keys(storage: Storage, metadata: Metadata, written: Sequence[FilesWritten], *, uri: str) -> None:
    """Refuse a write in which two Spark tasks hold the same key (see the module docstring).

    Raises:
        PrimaryKeyError: naming one such key and how to write the DataFrame instead.
    """
    groups: dict[tuple[PartitionKey, int], list[AddFile]] = {}
    for m in written:
        for a in m.files():
            groups.setdefault((partition_key(a.partition, metadata.partition_by), a.bucket), []).append(a)
    doubtful = [files for files in groups.values() if len(files) > 1 and not _disjoint(files)]
    if not doubtful:
        return
    keys = list(metadata.primary_key)
    with ThreadPoolExecutor(4) as pool:
        for files in doubtful:
            t = pa.concat_tables(pool.map(lambda f: read_data_file(storage, metadata, f, keys).select(keys), files))
            counts = t.group_by(keys, use_threads=False).aggregate([([], "count_all")])
            dup = counts.filter(pc.greater(counts.column("count_all"), 1))
            if dup.num_rows:
                key = {k: dup.column(k)[0].as_py() for k in keys}
                raise PrimaryKeyError(
                    f"table {uri}: the DataFrame holds key {key} (and {dup.num_rows - 1} more) in more than one "
                    "Spark partition, so which row is the last cannot be told; nothing was committed. Drop "
                    f"duplicates on ({', '.join(keys)}) keeping the row you want, or repartition by the key "
                    f"(df.repartition({', '.join(repr(k) for k in keys)})) so that within its partition the last "
                    "row of a key wins"
                )


def _disjoint(files: Sequence[AddFile]) -> bool:
    """True when the files' key ranges do not overlap (then no key is in two of them)."""
    spans = [(f.key_min, f.key_max) for f in files if f.rows]
    if any(lo is None or hi is None for lo, hi in spans):
        return False
    try:
        spans.sort(key=lambda s: s[0])  # type: ignore[arg-type,return-value]
        return all(a[1] < b[0] for a, b in itertools.pairwise(spans))  # type: ignore[operator]
    except TypeError:
        return False


# -- the Spark writer classes -------------------------------------------------------------------
class BatchWriter(DataSourceArrowWriter):
    """``df.write.format("maintd")``: Arrow batches in on the executors, one commit on the driver."""

    def __init__(self, job: WriteJob) -> None:
        self.job = job

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return self.job.write_task(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:  # type: ignore[override]
        version = self.job.commit(messages)
        logger.info("table {}: Spark write committed version {}", self.job.uri, version)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:  # type: ignore[override]
        self.job.abort(messages)


class StreamWriter(DataSourceStreamWriter, DataSourceArrowWriter):  # type: ignore[misc]
    """``df.writeStream.format("maintd")``: one exactly-once commit per micro-batch.

    Spark hands a writer Arrow batches when it is a ``DataSourceArrowWriter``, stream or not.
    """

    def __init__(self, job: WriteJob, *, app_id: str | None, checkpoint: str | None) -> None:
        self.job = job
        self.app_id = app_id
        self.checkpoint = checkpoint

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return self.job.write_task(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]
        app = (self.app_id or query_app_id(self.checkpoint, uri=self.job.uri), batchId)
        version = self.job.commit(messages, app=app, latest=True)
        if version is not None:
            logger.info("table {}: micro-batch {} of {} committed version {}", self.job.uri, batchId, app[0], version)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]
        self.job.abort(messages)


def query_app_id(checkpoint: str | None, *, uri: str) -> str:
    """``spark-query-<id>`` from the streaming query's checkpoint (``<checkpoint>/metadata`` holds its id)."""
    import pyarrow.fs as pafs

    if not checkpoint:
        raise InvalidInputError(f"table {uri}: a streaming write needs .option('checkpointLocation', ...) "
                                "or .option('appId', ...) to commit each micro-batch exactly once")
    loc = checkpoint
    for prefix in ("s3a://", "s3n://"):
        if loc.startswith(prefix):
            loc = "s3://" + loc[len(prefix):]
    if "://" not in loc and not loc.startswith("file:"):
        fs: pafs.FileSystem = pafs.LocalFileSystem()
        path = os.path.abspath(loc)
    else:
        fs, path = pafs.FileSystem.from_uri(loc.replace("file:/", "file:///", 1) if loc.startswith("file:/")
                                            and not loc.startswith("file:///") else loc)
    meta = f"{path.rstrip('/')}/metadata"
    try:
        with fs.open_input_stream(meta) as f:
            query_id = json.loads(f.read())["id"]
    except (OSError, ValueError, KeyError) as exc:
        raise InvalidInputError(
            f"table {uri}: cannot read the streaming query's id from {meta} ({exc}); give .option('appId', ...) "
            "(a name unique to this query, kept across restarts)"
        ) from None
    return f"{STREAM_APP_PREFIX}{query_id}"
