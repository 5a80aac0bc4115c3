"""The public ``Table``: create, open, write, read, time travel and history of a primary-key table."""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
from loguru import logger

from maintd.errors import (
    CommitError,
    CommitStateUnknownError,
    InvalidInputError,
    InvalidPropertyError,
    TableExistsError,
    TableNotFoundError,
)
from maintd.storage import Storage, storage_for_uri
from maintd.storage.discovery import enclosing_table, find_tables
from maintd.table.files import evolution
from maintd.table.files.filters import parse_filter
from maintd.table.files.schema import KEY_TYPES, OP_DELETE, OP_UPSERT, fields_from_arrow, parse_schema_spec
from maintd.table.files.writer import (
    TableLike,
    check_partition_filter,
    prepare_changes,
    split_and_write,
    to_arrow_table,
)
from maintd.table.log import features as table_features
from maintd.table.log import properties as props
from maintd.table.log import timeline
from maintd.table.log.actions import (
    Action,
    AddFile,
    CommitInfo,
    Field_,
    Metadata,
    Pin,
    RemoveFile,
)
from maintd.table.log.conflicts import ADD_COLUMNS
from maintd.table.log.landing import STORAGE_ERRORS
from maintd.table.log.retry import DEFAULT_RETRY, Budget, RetryPolicy
from maintd.table.log.snapshot import PartitionKey, Snapshot, SnapshotBuilder, partition_key
from maintd.table.log.tablelog import TableLog
from maintd.table.log.timeline import now_ms
from maintd.table.read import interop
from maintd.table.read.feed import changed_files, changes_between, net_changes
from maintd.table.read.reader import read_snapshot
from maintd.table.read.scan import DEFAULT_BATCH_ROWS, TableScan, plan_scan
from maintd.table.transaction import FRESH_BASE_SECONDS, StaleRead, Transaction


@dataclass(frozen=True)
class CommitRecord:
    """One entry of ``Table.history()``."""

    version: int
    timestamp: int
    operation: str
    read_version: int | None
    isolation_level: str
    txn_id: str
    data_change: bool
    files_added: int
    files_removed: int
    parameters: Mapping[str, Any]
    metrics: Mapping[str, Any]

    @property
    def time(self) -> datetime:
        """The commit time, timezone-aware in UTC."""
        return datetime.fromtimestamp(self.timestamp / 1000, UTC)


@dataclass(frozen=True)
class ChangeInputs:
    """What a change feed of (``before.version``, ``after.version``] starts from (:meth:`Table.change_inputs`)."""

    before: Snapshot
    after: Snapshot
    groups: set[tuple[PartitionKey, int]]
    """The (partition, bucket) groups whose rows the data-changing commits between touched."""
    changed: list[AddFile] | None
    """Every file they added or removed (:func:`~maintd.table.read.feed.changed_files`); None if one removed was
    never added (a damaged log: the feed then diffs two full reads)."""


@dataclass(frozen=True)
class DataFileInfo:
    """One live data file of a version (:meth:`Table.files`)."""

    path: str
    """Relative to the table's URI."""
    uri: str
    partition: Mapping[str, str | None]
    bucket: int
    kind: str
    """``base`` (a BaseFile: the bucket's rows as of a compaction) or ``delta`` (a DeltaFile of changes)."""
    level: int | None
    """0 for files writers wrote, 1 or 2 after clustering; None for a BaseFile."""
    rows: int
    bytes: int
    delete_rows: int
    min_version: int
    max_version: int


class Table:
    """A primary-key table at a URI. Thread-safe for concurrent readers and writers in one process.

    ``Table(uri)`` opens the table at ``uri`` as :meth:`open` does (:class:`TableNotFoundError` when there
    is none); :meth:`create` makes a new one. A :class:`~maintd.storage.Storage` in place of the URI opens
    it through that storage without the check (tests wrap storages to inject faults).
    """

    def __init__(self, storage: Storage | str | os.PathLike[str], *, retry: RetryPolicy | None = None) -> None:
        check = isinstance(storage, (str, os.PathLike))
        if isinstance(storage, (str, os.PathLike)):
            storage = storage_for_uri(os.fspath(storage))
        elif not hasattr(storage, "uri"):
            raise InvalidInputError(f"Table() takes a table URI (a str or a path), not {type(storage).__name__}; "
                                    "Table.create makes a new table")
        self.storage = storage
        self.log = TableLog(storage)
        self.retry_policy = retry or DEFAULT_RETRY
        self._lock = threading.Lock()
        self._latest: Snapshot | None = None
        self._listed: tuple[int, float] = (-1, float("-inf"))
        """The version last found as the latest (by a lookup, or by this process's own publish of it), and the
        monotonic time at which that lookup (or publish) started."""
        self._looked_up: tuple[int, float] = (-1, float("-inf"))
        """The version last found as the latest by a lookup of the log, and the monotonic time it started."""
        if check and not self.log.is_table():
            raise TableNotFoundError(f"no table at {self.uri} (no {self.uri}/_log/); create it first")

    # -- lifecycle -------------------------------------------------------------------------
    @classmethod
    def create(cls, uri: str, schema: pa.Schema | str | Sequence[Field_], primary_key: Sequence[str] | str,
               partition_by: Sequence[str] | str = (), buckets: int | None = None,
               properties: Mapping[str, object] | None = None, *, name: str | None = None,
               features: Iterable[str] | None = None) -> Table:
        """Create a table: version 0 holds the protocol and the metadata.

        ``features``: None (the default) creates the table at legacy protocol 2, readable by every maintd since
        self-verifying commit files (or 4 or 5 when ``changes.prior.rows`` needs it). An iterable of feature names
        (empty too) creates it on named table features: those, what they depend on and what its properties need
        (docs/format.md, "Table features").

        Raises:
            TableExistsError: a table is already at ``uri``.
            InvalidInputError: bad schema, key, partitioning, bucket count or property, or an unknown feature.
        """
        storage = storage_for_uri(uri)
        asked = None if features is None else table_features.known(
            [features] if isinstance(features, str) else features, table=storage.uri)
        pk = (primary_key,) if isinstance(primary_key, str) else tuple(primary_key)
        parts = (partition_by,) if isinstance(partition_by, str) else tuple(partition_by)
        fields = cls._fields(schema)
        cls._check_layout(storage.uri, fields, pk, parts)
        clean = props.validate_properties(dict(properties or {}), table=storage.uri)
        if buckets is not None:
            given = props.validate_properties({props.BUCKET_NUM: buckets}, table=storage.uri)[props.BUCKET_NUM]
            if clean.setdefault(props.BUCKET_NUM, given) != given:
                raise InvalidPropertyError(
                    f"table {storage.uri}: buckets={buckets} contradicts {props.BUCKET_NUM}="
                    f"{clean[props.BUCKET_NUM]}; give the bucket count once"
                )
        clean.setdefault(props.BUCKET_NUM, props.DEFAULTS[props.BUCKET_NUM])
        nbuckets = int(clean[props.BUCKET_NUM])
        md = Metadata(table_id=str(uuid.uuid4()), name=name, fields=fields, primary_key=pk, partition_by=parts,
                      buckets=nbuckets, properties=clean, created_time=now_ms())
        table = cls(storage)
        if table.log.is_table():
            raise TableExistsError(f"a table already exists at {storage.uri}; open it with Table.open")
        _refuse_nesting(storage)
        info = CommitInfo(operation="CREATE TABLE", timestamp=md.created_time, txn_id=uuid.uuid4().hex,
                          operation_parameters={"primary_key": list(pk), "partition_by": list(parts)})
        protocol = table_features.for_new_table(asked, _features_for(clean))
        # version 0 of a legacy table is of format 2 whatever its protocol (as ever); of a table on named features,
        # of format 7, so that maintd without named features refuses it by that number, not as a damaged log
        fmt = table_features.commit_format(protocol) if protocol.table_features else 2
        if not table._create(info, [info, protocol, md], fmt):
            raise TableExistsError(f"a table was created concurrently at {storage.uri}")
        return table

    def _create(self, info: CommitInfo, actions: list[Action], fmt: int) -> bool:
        """Publish version 0; True if this call created the table. A publish that raised may have applied, so
        version 0 is read back (and published again only while it is not there), with the commit backoff."""
        budget = Budget(self.retry_policy, random.Random())
        raised: Exception | None = None
        while True:
            try:
                if raised is None or self.log.read_commit_txn(0) is None:
                    created = self.log.try_commit(0, actions, fmt=fmt)
                    if created or raised is None:
                        return created
                return self.log.read_commit_txn(0) == info.txn_id
            except STORAGE_ERRORS as exc:
                raised = exc
            if budget.spent():
                raise CommitStateUnknownError(
                    f"table {self.uri}: whether the table was created cannot be known: the storage kept failing "
                    f"({raised}); open it to see", version=0, txn_id=info.txn_id)
            budget.pause()

    @staticmethod
    def _fields(schema: pa.Schema | str | Sequence[Field_]) -> tuple[Field_, ...]:
        if isinstance(schema, str):
            return parse_schema_spec(schema)
        if isinstance(schema, pa.Schema):
            return fields_from_arrow(schema)
        from maintd.table.files.schema import check_fields

        return check_fields(schema)

    @staticmethod
    def _check_layout(uri: str, fields: tuple[Field_, ...], pk: tuple[str, ...], parts: tuple[str, ...]) -> None:
        types = {f.name: f.type for f in fields}
        if not pk:
            raise InvalidInputError(f"table {uri}: a primary key is required")
        for role, cols in (("primary key", pk), ("partition", parts)):
            missing = [c for c in cols if c not in types]
            if missing:
                raise InvalidInputError(f"table {uri}: {role} column(s) {', '.join(missing)} are not in the schema")
            bad = [c for c in cols if types[c] not in KEY_TYPES]
            if bad:
                raise InvalidInputError(
                    f"table {uri}: {role} column(s) {', '.join(bad)} have a type that cannot be a key "
                    f"({', '.join(types[c] for c in bad)}); use one of {', '.join(sorted(KEY_TYPES))}"
                )
        if len(set(pk)) != len(pk) or len(set(parts)) != len(parts):
            raise InvalidInputError(f"table {uri}: a column is named twice in the primary key or partitioning")
        nullable = [f.name for f in fields if f.name in pk and f.nullable]
        if nullable:
            shown = ", ".join(nullable)
            raise InvalidInputError(
                f"table {uri}: primary key column(s) {shown} are nullable, but a key value can never be null; "
                f"declare them NOT NULL: a trailing ! in a schema string ({nullable[0]}:"
                f"{types[nullable[0]]}!), or pa.field({nullable[0]!r}, ..., nullable=False) in an Arrow schema")
        outside = [c for c in parts if c not in pk]
        if outside:
            logger.warning(key_identity_warning(uri, pk, outside))

    @classmethod
    def open(cls, uri: str, *, retry: RetryPolicy | None = None) -> Table:
        """Open an existing table; raises :class:`TableNotFoundError` if there is none."""
        return cls(uri, retry=retry)

    @property
    def uri(self) -> str:
        return self.storage.uri

    def __repr__(self) -> str:
        snap = self._latest  # what this object knows already: a repr reads nothing from storage
        name = type(self).__name__
        if snap is None:
            return f"{name}({self.uri!r})"
        md = snap.metadata
        parts = f", partition_by={list(md.partition_by)}" if md.partition_by else ""
        return (f"{name}({self.uri!r}, version={snap.version}, primary_key={list(md.primary_key)}{parts}, "
                f"buckets={md.buckets}, files={len(snap.files)})")

    def schema(self, version: int | None = None) -> pa.Schema:
        """The table's columns as an Arrow schema (key and partition columns not null) at ``version``
        (latest if None)."""
        from maintd.table.files.schema import to_arrow

        return to_arrow(self.snapshot(self.resolve_version(version)).metadata.fields)

    def files(self, version: int | None = None) -> list[DataFileInfo]:
        """The live data files of ``version`` (latest if None), by partition, bucket, then level (base first)."""
        snap = self.snapshot(self.resolve_version(version))
        pb = snap.metadata.partition_by
        infos = [DataFileInfo(path=f.path, uri=f"{self.uri.rstrip('/')}/{f.path}", partition=dict(f.partition),
                              bucket=f.bucket, kind=f.kind, level=f.level, rows=f.rows, bytes=f.bytes,
                              delete_rows=f.delete_rows, min_version=f.min_version, max_version=f.max_version)
                 for f in snap.files.values()]
        return sorted(infos, key=lambda i: (str(partition_key(i.partition, pb)), i.bucket,
                                            -1 if i.level is None else i.level, i.min_version, i.path))

    # -- snapshots -------------------------------------------------------------------------
    def snapshot(self, version: int | None = None) -> Snapshot:
        """The state at ``version`` (latest if None): live files with their statistics."""
        base = self._latest
        if version is not None and base is not None and base.version == version:
            return base
        started = time.monotonic()
        snap = self.log.load_snapshot(version, base=base if base and (version is None or base.version <= version)
                                      else None)
        with self._lock:
            if self._latest is None or snap.version > self._latest.version:
                self._latest = snap
            if version is None and started > self._listed[1]:
                self._listed = (snap.version, started)
            if version is None and started > self._looked_up[1]:
                self._looked_up = (snap.version, started)
        return snap

    def reload(self) -> Snapshot:
        """The latest state loaded afresh from the log, never replayed from the state in memory, which it
        replaces (also by one of the same version: the table may have been dropped and created again)."""
        started = time.monotonic()
        snap = self.log.load_snapshot()
        with self._lock:
            self._latest = snap
            if started > self._listed[1]:
                self._listed = (snap.version, started)
            if started > self._looked_up[1]:
                self._looked_up = (snap.version, started)
        return snap

    def found_latest_within(self, version: int, seconds: float) -> bool:
        """Whether a lookup (or this process's own publish) that started less than ``seconds`` ago found
        ``version`` as the latest version."""
        with self._lock:
            found, started = self._listed
        return found == version and time.monotonic() - started < seconds

    def looked_up_within(self, version: int, seconds: float) -> bool:
        """Whether a lookup of the log that started less than ``seconds`` ago found ``version`` as the latest
        version. A publish of this process does not count: the table may have been dropped and created again,
        or rolled back, since (docs/format.md, "A writer's next write")."""
        with self._lock:
            found, started = self._looked_up
        return found == version and time.monotonic() - started < seconds

    @property
    def version(self) -> int:
        return self.log.latest_version(hint=self._latest.version if self._latest else None)

    @property
    def metadata(self) -> Metadata:
        return self.snapshot().metadata

    def new_transaction(self, operation: str, *, read_snapshot: Snapshot | None = None,
                        isolation_level: Any = None) -> Transaction:
        return Transaction(self, operation, read_snapshot=read_snapshot, isolation_level=isolation_level)

    def committed(self, version: int, base: Snapshot, actions: Sequence[Action], *,
                  published_after: float | None = None) -> None:
        """Cache the new snapshot and write a checkpoint every ``log.checkpoint.interval`` commits.

        ``published_after`` is a monotonic time before the publish of ``version`` began: the publish created
        it, so it was the latest version at a moment after that time. The commit has landed: nothing here may
        turn it into an error.
        """
        if base.version != version - 1:
            return
        if published_after is not None:
            with self._lock:
                if published_after > self._listed[1]:
                    self._listed = (version, published_after)
        builder = SnapshotBuilder.from_snapshot(base)
        builder.apply(version, actions)
        snap = builder.build()
        if version % snap.checkpoint_interval == 0:
            try:
                snap = self.log.write_checkpoint(snap)
            except Exception as exc:  # a missing checkpoint costs read time, never correctness
                logger.warning("table {}: checkpoint at version {} failed: {}", self.uri, version, exc)
        with self._lock:
            if self._latest is None or snap.version >= self._latest.version:
                self._latest = snap

    # -- writes ----------------------------------------------------------------------------
    def upsert(self, data: TableLike, *, app_id: str | None = None, app_version: int | None = None,
               merge_schema: bool = False) -> int:
        """Insert or replace rows by primary key; returns the committed version.

        ``merge_schema``: columns of ``data`` the table lacks are added to it (nullable) in the same commit, as
        :meth:`add_columns` adds them; without it they are refused (``SchemaMismatchError``). Columns added to
        the table after it was created may be missing from ``data``: they are written as nulls.
        """
        return self._write("UPSERT", data, None, app_id, app_version, merge_schema=merge_schema)

    def delete(self, keys: TableLike, *, app_id: str | None = None, app_version: int | None = None) -> int:
        """Delete rows by primary key (and partition columns); returns the committed version."""
        return self._write("DELETE", keys, None, app_id, app_version, deletes_only=True)

    def write_changes(self, data: TableLike, op_column: str, *, app_id: str | None = None,
                      app_version: int | None = None, merge_schema: bool = False) -> int:
        """Upserts and deletes in one commit: ``op_column`` is 0 for upsert, 1 for delete (dropped);
        ``merge_schema`` as for :meth:`upsert`."""
        t = data if isinstance(data, pa.Table) else pa.Table.from_pandas(data, preserve_index=False)
        if op_column not in t.column_names:
            raise InvalidInputError(f"table {self.uri}: the data has no column {op_column!r}")
        ops = np.asarray(t.column(op_column).to_numpy(zero_copy_only=False), dtype=np.int8)
        if not np.isin(ops, [OP_UPSERT, OP_DELETE]).all():
            raise InvalidInputError(f"table {self.uri}: column {op_column!r} must hold 0 (upsert) or 1 (delete)")
        return self._write("WRITE", t.drop_columns([op_column]), ops, app_id, app_version, merge_schema=merge_schema)

    def _write(self, operation: str, data: TableLike, ops: np.ndarray | None, app_id: str | None,
               app_version: int | None, *, deletes_only: bool = False, merge_schema: bool = False) -> int:
        cached = self._latest
        if merge_schema:
            data = to_arrow_table(data, what=f"table {self.uri}", key_names=())
        if (app_id is None and cached is not None and not (merge_schema and self._merged(cached, data))
                and self.found_latest_within(cached.version, FRESH_BASE_SECONDS)):
            # A writer that committed (or looked the table up) a moment ago prepares on that state without
            # another lookup: if it is still the latest, the commit lands on it exactly as on a state just
            # looked up; if not, the first attempt loses and the retry finds the latest. Only when the table's
            # metadata changed meanwhile (or the batch does not fit the cached schema) is the write prepared
            # again on the latest state.
            try:
                batch = prepare_changes(data, ops, cached.metadata, table=self.uri, deletes_only=deletes_only)
            except InvalidInputError:
                batch = None
            if batch is not None:
                txn = Transaction(self, operation, read_snapshot=cached, unconfirmed_read=True)
                adds = split_and_write(self.storage, cached.metadata, batch)
                try:
                    return self._commit_written(txn, adds, {"rows": batch.num_rows, "files": len(adds)})
                except StaleRead:
                    pass  # nothing landed and its files are deleted: prepare again on the latest state
        snap = self.snapshot()
        txn = self.new_transaction(operation, read_snapshot=snap)
        md = (self._merged(snap, data, txn) if merge_schema else None) or snap.metadata
        batch = prepare_changes(data, ops, md, table=self.uri, deletes_only=deletes_only)
        if app_id is not None:
            if app_version is None:
                raise InvalidInputError(f"table {self.uri}: app_id {app_id!r} needs an app_version")
            done = snap.app_txns.get(app_id)
            if done is not None and done >= app_version:
                logger.info("table {}: {} version {} was committed already; skipped", self.uri, app_id, app_version)
                return snap.version
            txn.set_app_transaction(app_id, app_version)
        adds = split_and_write(self.storage, md, batch)
        return self._commit_written(txn, adds, {"rows": batch.num_rows, "files": len(adds)})

    def _merged(self, snap: Snapshot, data: pa.Table, txn: Transaction | None = None) -> Metadata | None:
        """The metadata of ``snap`` with the columns of ``data`` it lacks added (``merge_schema``), recorded in
        ``txn`` (with the protocol raise the first addition needs); None when ``data`` adds nothing."""
        new = evolution.columns_to_merge(snap.metadata, data.schema, table=self.uri)
        if not new:
            return None if txn is None else snap.metadata
        md = evolution.add_columns(snap.metadata, new, table=self.uri)
        if txn is not None:
            txn.set_metadata(md)
            txn.require_feature(table_features.ADDED_COLUMNS)
        return md

    def add_columns(self, columns: str | pa.Schema | pa.Field | Sequence[Field_ | pa.Field]) -> int:
        """Add nullable value columns to the table's schema; returns the committed version.

        ``columns``: ``'name:type,...'`` (as ``table create``'s schema, without ``!``), Arrow fields or a schema,
        or :class:`Field_` s. Rows written before read the new columns as nulls, at every version from this
        commit on (older versions keep their schema); writers may leave them out (nulls). The first addition
        enables feature ``addedColumns`` in the same commit (a legacy table goes to protocol 6), so that older
        maintd refuses the table instead of misreading its files (docs/format.md, "Schema evolution").

        Raises:
            SchemaEvolutionError: a column that exists, a NOT NULL, key or partition column, an unknown type.
        """
        snap = self.snapshot()
        new = evolution.fields_of(columns, table=self.uri)
        md = evolution.add_columns(snap.metadata, new, table=self.uri)
        txn = self.new_transaction(ADD_COLUMNS, read_snapshot=snap)
        txn.set_metadata(md)
        txn.require_feature(table_features.ADDED_COLUMNS)
        return txn.commit(parameters={"columns": [f"{f.name}:{f.type}" for f in new]})

    def _commit_written(self, txn: Transaction, adds: list[AddFile], metrics: dict[str, Any]) -> int:
        for a in adds:
            txn.add(a)
        try:
            return txn.commit(metrics=metrics | {"bytes": sum(a.bytes for a in adds)})
        except CommitStateUnknownError:
            raise  # it may have landed: its files stay (orphan cleanup takes them if it did not)
        except (CommitError, StaleRead):
            # Every other CommitError is certain that no attempt landed (and so is StaleRead): the files are
            # garbage. After any other error the files stay too; orphan cleanup takes them after its grace.
            for a in adds:
                with contextlib.suppress(*STORAGE_ERRORS):
                    self.storage.delete(a.path)
            raise

    def overwrite(self, data: TableLike, partition: Mapping[str, Any] | None = None, *,
                  merge_schema: bool = False) -> int:
        """Replace the whole table (or one partition) with ``data``; returns the committed version
        (``merge_schema`` as for :meth:`upsert`).

        ``partition`` names every partition column, each with a value of the column (``True``, ``42``,
        ``datetime.date(2024, 1, 1)``, ...) or the partition's text (``"true"``, ``"2024-01-01"``): the partition a
        row holding those values is written to (docs/format.md, "Partition values as text").

        Raises:
            InvalidInputError: ``partition`` does not name exactly the partition columns, a value cannot be a
                value of its column (naming the column, the value and the forms it takes), or a row of ``data``
                lies in another partition; nothing was written.
        """
        snap = self.snapshot()
        txn = self.new_transaction("OVERWRITE", read_snapshot=snap)
        md = snap.metadata
        if merge_schema:
            data = to_arrow_table(data, what=f"table {self.uri}", key_names=())
            md = self._merged(snap, data, txn) or md
        batch = prepare_changes(data, None, md, table=self.uri)
        parts: list[PartitionKey] | None = None
        spec: dict[str, str] | None = None
        if partition is not None:
            spec = check_partition_filter(batch, partition, snap.metadata, table=self.uri)
            parts = [partition_key(spec, snap.metadata.partition_by)]
        txn.replace(parts)
        adds = split_and_write(self.storage, md, batch)
        return self._commit_written(txn, adds, {"rows": batch.num_rows, "partition": spec})

    def upgrade_protocol(self, features: Iterable[str] = ()) -> int:
        """Move the table to named table features (protocol 7, docs/format.md "Table features"): every feature its
        protocol supports (a legacy table: the bundle its version implied, so nothing is lost; a table of protocol
        1 gets self-verifying commit files) plus ``features`` and what they depend on. Readers and writers of a
        maintd without table features refuse the table afterwards.

        Returns the committed version, or the current one when the table is on named features already and
        supports every feature asked (idempotent).

        Raises:
            InvalidInputError: an unknown feature name (the error names the known ones).
        """
        asked = table_features.known([features] if isinstance(features, str) else features, table=self.uri)
        snap = self.snapshot()
        target = table_features.upgrade(snap.protocol, asked)
        if target is None:
            return snap.version
        txn = self.new_transaction("UPGRADE PROTOCOL", read_snapshot=snap)
        txn.set_protocol(target)
        return txn.commit(parameters={"reader_version": target.min_reader_version,
                                      "writer_version": target.min_writer_version,
                                      "features": list(target.writer_features or ())})

    def set_properties(self, properties: Mapping[str, object]) -> int:
        """Set table properties (validated); ``write.bucket.num`` cannot change after create."""
        snap = self.snapshot()
        clean = props.validate_properties(properties, table=self.uri)
        for k in props.IMMUTABLE & clean.keys():
            if clean[k] != snap.metadata.properties.get(k):
                raise InvalidPropertyError(f"table {self.uri}: property {k} is fixed after create")
        md = snap.metadata.model_copy(update={"properties": {**snap.metadata.properties, **clean}})
        txn = self.new_transaction("SET PROPERTIES", read_snapshot=snap)
        txn.set_metadata(md)
        for feature in _features_for(md.properties):  # prior-rows files: actions older code must refuse
            txn.require_feature(feature)
        return txn.commit(parameters={"properties": clean})

    # -- pins ------------------------------------------------------------------------------
    def pin(self, version: int, ttl: timedelta, reason: str = "") -> Pin:
        """Keep ``version`` readable for ``ttl``: reclamation neither expires it nor deletes a file it reads
        while the pin lives (until :meth:`unpin`, or until ``ttl`` passes by reclamation's clock).

        The first pin enables feature ``pins`` (a legacy table goes to protocol 3; older maintd then refuses the
        table). Returns the pin (its ``id`` is what :meth:`unpin` takes).

        Raises:
            InvalidInputError: ``ttl`` is not a positive timedelta (of at most a year).
            VersionNotFoundError: ``version`` was never written, or has expired (naming the oldest retained one).
            PinConflictError: a reclamation expiring ``version`` landed concurrently; nothing was pinned.
        """
        from maintd.table.pins import pin_version

        return pin_version(self, version, ttl, reason)

    def unpin(self, pin_id: str) -> int:
        """Remove a pin (expired ones too); returns the committed version.

        Raises:
            InvalidInputError: the table has no pin ``pin_id``.
        """
        from maintd.table.pins import unpin

        return unpin(self, pin_id)

    def pins(self, *, include_expired: bool = False, now: datetime | None = None) -> list[Pin]:
        """The table's pins that hold at ``now`` (default: the clock), oldest version first; with
        ``include_expired`` also those whose TTL passed but that no commit removed yet."""
        snap = self.snapshot()
        if include_expired:
            return sorted(snap.pins.values(), key=lambda p: (p.version, p.id))
        return snap.live_pins(timeline.to_epoch_ms(now) if now is not None else now_ms())

    # -- reads -----------------------------------------------------------------------------
    def resolve_version(self, version: int | None = None, as_of: datetime | int | float | str | None = None,
                        *, now: int | None = None) -> int:
        """The version to read, checked against retained history (``VersionNotFoundError`` otherwise)."""
        latest_snap = self.snapshot()
        latest = latest_snap.version
        if version is not None and as_of is not None:
            raise InvalidInputError("give either version or as_of, not both")
        if as_of is not None:
            version = timeline.version_as_of(self.log, latest, timeline.to_epoch_ms(as_of), self.uri)
        if version is None:
            return latest
        at = now if now is not None else int(time.time() * 1000)
        live = latest_snap.live_pins(at)
        timeline.check_retained(self.log, version, latest, latest_snap.retain_hours, at, self.uri,
                                pinned=live[0].version if live else None)
        return version

    def read(self, version: int | None = None, as_of: datetime | int | float | str | None = None,
             columns: Sequence[str] | None = None) -> pa.Table:
        """Merge-on-read of the table at ``version`` or at time ``as_of`` (latest if neither)."""
        v = self.resolve_version(version, as_of)
        return read_snapshot(self.storage, self.snapshot(v), columns)

    def changes(self, start_version: int, end_version: int | None = None) -> pa.Table:
        """The writers' net changes in (start, end]: one row per changed key with ``_change``.

        Maintenance commits (``data_change=false``) change no rows and contribute nothing.
        """
        start, end = self._change_range(start_version, end_version)
        r = self.change_inputs(start, end)
        # changed None (a removed file of unknown origin: a damaged log?): the feed diffs the groups whole. Prior-rows
        # files of compactions after ``end`` answer too: the latest state knows them all
        return net_changes(self.storage, r.before, r.after, r.groups, r.changed, self.snapshot().priors.values())

    def change_inputs(self, start: int, end: int) -> ChangeInputs:
        """What a change feed of (start, end] (both retained) starts from: the two states, the groups the
        data-changing commits between touched and the files they added or removed.

        The commits of the range are read once: the end state is the start state with them applied (no
        checkpoint read for it), and their data-changing adds and removes are collected on the way.
        """
        before = self.snapshot(start)
        added: list[AddFile] = []
        removed: list[RemoveFile] = []

        def seen(_version: int, actions: list[Action]) -> None:
            added.extend(a for a in actions if isinstance(a, AddFile) and a.data_change)
            removed.extend(a for a in actions if isinstance(a, RemoveFile) and a.data_change)

        after = self.log.replay_from(before, end, seen)
        if after is None:  # a commit went meanwhile (reclaimed): the end state from a checkpoint, commits again
            after, added, removed = self.snapshot(end), [], []
            for v in range(start + 1, end + 1):
                seen(v, self.log.read_commit(v) or [])
        pb = self.metadata.partition_by  # fixed at create
        groups = {(partition_key(a.partition, pb), a.bucket or 0) for a in added}
        groups |= {(partition_key(r.partition, pb), r.bucket or 0) for r in removed}
        try:
            changed: list[AddFile] | None = changed_files(before, added, [r.path for r in removed])
        except KeyError:
            changed = None
        return ChangeInputs(before, after, groups, changed)

    def full_changes(self, start_version: int, end_version: int | None = None) -> pa.Table:
        """:meth:`changes` computed by diffing two full reads of the touched buckets (the reference the
        incremental change feed is checked and measured against)."""
        start, end = self._change_range(start_version, end_version)
        r = self.change_inputs(start, end)
        return changes_between(self.storage, r.before, r.after, r.groups)

    def _change_range(self, start_version: int, end_version: int | None) -> tuple[int, int]:
        """(start, end) of a change feed, both checked against retained history.

        The start is checked; an end at or after it (and at most the latest) is then retained too, since
        retained history is every version from the oldest retained one on.
        """
        start = self.resolve_version(start_version)
        latest = self.snapshot().version
        end = latest if end_version is None else end_version
        if not start <= end <= latest:
            end = self.resolve_version(end_version)
        if start > end:
            raise InvalidInputError(f"changes: start version {start} is after end version {end}")
        return start, end

    # -- streaming readers -----------------------------------------------------------------
    def scan(self, version: int | None = None, columns: Sequence[str] | None = None, filter: Any = None, *,
             as_of: datetime | int | float | str | None = None, split_bytes: int | None = None,
             batch_rows: int = DEFAULT_BATCH_ROWS) -> TableScan:
        """A planned, re-readable scan of one version (see :mod:`maintd.table.read.scan`).

        ``filter`` is a string (``"region = 'eu' and id > 10"``) or pyarrow-style tuples
        (:mod:`maintd.table.files.filters`); it prunes buckets and files, then filters the merged rows.
        A bucket whose files exceed ``split_bytes`` is read in key ranges of about that size.
        """
        snap = self.snapshot(self.resolve_version(version, as_of))
        rf = parse_filter(filter, snap.metadata, where=f"table {self.uri}")
        plan = plan_scan(snap, columns, rf, split_bytes=split_bytes, where=f"table {self.uri}")
        return TableScan(self.storage, plan, batch_rows=batch_rows)

    def to_batches(self, version: int | None = None, columns: Sequence[str] | None = None, filter: Any = None, *,
                   as_of: datetime | int | float | str | None = None, split_bytes: int | None = None,
                   batch_rows: int = DEFAULT_BATCH_ROWS) -> Iterator[pa.RecordBatch]:
        """The merged rows as a stream of record batches, bucket by bucket: memory holds one bucket's
        merge (or one key range's, for a bucket larger than ``split_bytes``), not the table."""
        return self.scan(version, columns, filter, as_of=as_of, split_bytes=split_bytes,
                         batch_rows=batch_rows).to_batches()

    def to_duckdb(self, connection: Any = None, version: int | None = None, columns: Sequence[str] | None = None,
                  filter: Any = None, *, as_of: datetime | int | float | str | None = None) -> Any:
        """A DuckDB relation over the stream (``pip install 'maintd[duckdb]'``)."""
        return interop.to_duckdb(self.scan(version, columns, filter, as_of=as_of), connection)

    def to_polars(self, version: int | None = None, columns: Sequence[str] | None = None, filter: Any = None, *,
                  as_of: datetime | int | float | str | None = None, lazy: bool = True) -> Any:
        """A Polars LazyFrame over the stream (``lazy=False``: a DataFrame); ``pip install 'maintd[polars]'``."""
        return interop.to_polars(self.scan(version, columns, filter, as_of=as_of), lazy=lazy)

    def to_pandas(self, version: int | None = None, columns: Sequence[str] | None = None, filter: Any = None, *,
                  as_of: datetime | int | float | str | None = None) -> Any:
        """A pandas DataFrame of the merged rows."""
        return interop.to_pandas(self.scan(version, columns, filter, as_of=as_of))

    def to_pyarrow_dataset(self, version: int | None = None, columns: Sequence[str] | None = None,
                           filter: Any = None, *, as_of: datetime | int | float | str | None = None) -> Any:
        """A ``pyarrow.dataset.Dataset`` of the merged rows of one version, to scan, filter and project as
        often as wanted.

        The table's files cannot be handed to pyarrow as they are: a key's latest row may be in a DeltaFile
        that replaces or deletes it in a BaseFile, so the dataset holds the merged rows in memory. For a
        table larger than memory, narrow it with ``columns`` and ``filter`` (pruned at the source), or
        stream it with :meth:`to_batches`, :meth:`to_duckdb` or :meth:`to_polars`.
        """
        import pyarrow.dataset as ds

        return ds.dataset(self.scan(version, columns, filter, as_of=as_of).to_table())

    def history(self, limit: int | None = None) -> list[CommitRecord]:
        """Commits newest first, as far back as the log is retained."""
        latest = self.version
        oldest = timeline.oldest_available(self.log, latest)
        out: list[CommitRecord] = []
        for v in range(latest, oldest - 1, -1):
            if limit is not None and len(out) >= limit:
                break
            actions = self.log.read_commit(v)
            if actions is None:
                break
            out.append(_record(v, actions))
        return out


def key_identity_warning(uri: str, pk: Sequence[str], outside: Sequence[str]) -> str:
    """What ``Table.create`` (and ``maintd table create``) warn of when the key leaves out partition columns."""
    return (f"table {uri}: a row is identified by its partition values and its primary key; the key "
            f"({', '.join(pk)}) does not include partition column(s) {', '.join(outside)}, so an upsert that moves "
            f"a key to another {outside[0]} adds a second row instead of moving it (delete it from the old "
            f"partition in the same write). Add {', '.join(outside)} to the key if a key must be unique in the "
            "whole table")


def _refuse_nesting(storage: Storage) -> None:
    """A table inside another table (or around one) would have its files taken for the other's orphans, or
    take the other's files for its own: refused, naming both."""
    uri = storage.uri
    outer = enclosing_table(storage)
    if outer is not None:
        raise InvalidInputError(f"table {uri}: the location is inside the table at {outer}, whose files it would mix "
                                "with; create the table outside it")
    inner = [t for t in find_tables(uri, max_depth=_NESTED_DEPTH) if t.rstrip("/") != uri.rstrip("/")]
    if inner:
        raise InvalidInputError(f"table {uri}: the location holds the table at {inner[0]}, whose files it would mix "
                                "with; create the table elsewhere (or move that table out)")


_NESTED_DEPTH = 6
"""Directory levels below a new table's location searched for a table inside it (partition directories are one
level per partition column, buckets one more)."""


def _features_for(properties: Mapping[str, str]) -> list[str]:
    """The features ``properties`` need: ``priorRows`` for prior rows that compactions store, also
    ``lookedUpPriorRows`` for looked-up ones (``changes.prior.rows``)."""
    if props.lookup_prior_rows(properties):
        return [table_features.LOOKED_UP_PRIOR_ROWS]
    return [table_features.PRIOR_ROWS] if props.prior_rows(properties) else []


def _record(version: int, actions: Sequence[Action]) -> CommitRecord:
    info = next((a for a in actions if isinstance(a, CommitInfo)), None)
    adds = [a for a in actions if isinstance(a, AddFile)]
    removes = [a for a in actions if isinstance(a, RemoveFile)]
    return CommitRecord(
        version=version, timestamp=info.timestamp if info else 0, operation=info.operation if info else "UNKNOWN",
        read_version=info.read_version if info else None,
        isolation_level=info.isolation_level if info else "WriteSerializable", txn_id=info.txn_id if info else "",
        data_change=any(a.data_change for a in adds) or any(r.data_change for r in removes)
        or any(isinstance(a, Metadata) for a in actions),
        files_added=len(adds), files_removed=len(removes),
        parameters=info.operation_parameters if info else {}, metrics=info.metrics if info else {},
    )
