"""The ``maintd`` Spark data source: options, schema, and which reader or writer a query gets.

Read options (as Delta users know them)::

    versionAsOf, timestampAsOf              time travel (a version, or an ISO time / epoch ms)
    readChangeFeed=true                     net changes, with _change and _change_version columns:
    startingVersion, endingVersion            versions startingVersion..endingVersion inclusive, i.e.
    startingTimestamp, endingTimestamp        Table.changes(startingVersion - 1, endingVersion)
    columns="a,b"                           read only these columns (as does a user-given schema)
    filter="region = 'eu' and id > 10"      pruned and filtered at the source (any Spark version)
    splitBytes=268435456                    buckets larger than this are read in key ranges

Stream options (``spark.readStream``, the change feed: maintd.engines.spark.stream)::

    readChangeFeed=true                     required: the stream serves the change feed
    startingVersion, startingTimestamp      where it starts (inclusive); default: after the latest version
    maxFilesPerTrigger, maxBytesPerTrigger  bound a micro-batch by the files (bytes) writers added

Write options::

    opColumn=op                             0 = upsert, 1 = delete; the column is not stored
    primaryKey="region,id"                  create the table on this write when there is none (as Delta
    partitionBy="region", buckets=16          does), from the DataFrame's schema; property.<key>=value
                                              sets a table property. Spark's own save modes ErrorIfExists
                                              and Ignore are refused by Spark for every Python data
                                              source: maintd.spark.save(df, uri, mode=...) gives them
    replaceWhere="region = 'eu'"            with mode("overwrite"): replace only these partitions
    appId=...                               streaming: the exactly-once id (default: the query id
                                            from the checkpoint)
"""

from __future__ import annotations

from datetime import datetime

from pyspark.sql import types as T
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)

from maintd.engines.spark.read import ChangeFeedReader, SnapshotReader
from maintd.engines.spark.stream import Bounds, ChangeFeedStreamReader
from maintd.engines.spark.types import (
    check_read_schema,
    check_write_schema,
    columns_to_merge,
    fields_from_spark,
    parse_int_option,
    table_schema,
)
from maintd.engines.spark.write import BatchWriter, StreamWriter, WriteJob
from maintd.errors import (
    InvalidInputError,
    SchemaMismatchError,
    TableExistsError,
    TableNotFoundError,
    VersionNotFoundError,
)
from maintd.table import Metadata, Table
from maintd.table.files.evolution import add_columns
from maintd.table.files.filters import parse_filter
from maintd.table.log import timeline
from maintd.table.log.actions import Field_
from maintd.table.read.feed import CHANGE_COLUMN, CHANGE_VERSION_COLUMN

SOURCE_NAME = "maintd"


class MaintdDataSource(DataSource):
    """``spark.read.format("maintd").load(uri)``, ``spark.readStream.format("maintd").load(uri)``,
    ``df.write.format("maintd").save(uri)`` and ``df.writeStream.format("maintd").start(uri)``."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    # -- options --------------------------------------------------------------------------------
    @property
    def uri(self) -> str:
        uri = self.options.get("path")
        if not uri:
            raise InvalidInputError("the maintd data source needs the table URI: .load(uri), .save(uri) or .start(uri)")
        return str(uri)

    def _int(self, key: str) -> int | None:
        return parse_int_option(self.options, key, uri=self.uri)

    @property
    def change_feed(self) -> bool:
        raw = str(self.options.get("readChangeFeed", "false")).strip().lower()
        if raw not in ("true", "false"):
            raise InvalidInputError(f"table {self.uri}: option readChangeFeed={raw!r} must be true or false")
        return raw == "true"

    def _version(self, table: Table) -> int:
        version, as_of = self._int("versionAsOf"), self.options.get("timestampAsOf")
        return table.resolve_version(version, _time(as_of))

    def _change_range(self, table: Table) -> tuple[int, int]:
        """(start, end) of ``Table.changes``: its start is exclusive, so startingVersion - 1."""
        start, end = self._int("startingVersion"), self._int("endingVersion")
        start_ts, end_ts = _time(self.options.get("startingTimestamp")), _time(self.options.get("endingTimestamp"))
        if start is None and start_ts is None:
            raise InvalidInputError(f"table {self.uri}: readChangeFeed needs startingVersion or startingTimestamp")
        if start is None:
            assert start_ts is not None
            start = self._first_version_from(table, start_ts)
        first = table.resolve_version(start)
        last = table.resolve_version(end, end_ts)
        if first > last:
            raise InvalidInputError(f"table {self.uri}: the change feed starts at version {first}, after its end "
                                    f"at version {last}")
        try:
            before = table.resolve_version(max(first - 1, 0))
        except VersionNotFoundError as exc:
            raise VersionNotFoundError(
                f"table {self.uri}: the change feed from version {first} compares the table with version "
                f"{first - 1}, which is no longer retained ({exc}); start later", oldest_retained=exc.oldest_retained,
                latest=exc.latest) from None
        return before, last

    def _first_version_from(self, table: Table, ts: str | int) -> int:
        """The first version committed at or after ``ts`` (Delta's startingTimestamp)."""
        latest = table.version
        found = timeline.first_version_at_or_after(table.log, timeline.oldest_available(table.log, latest), latest,
                                                   _to_ms(ts))
        if found is None:
            raise InvalidInputError(f"table {self.uri}: no version was committed at or after startingTimestamp "
                                    f"{ts!r}; the latest version is {latest}")
        return found

    def _columns(self, metadata: Metadata) -> tuple[str, ...] | None:
        raw = self.options.get("columns")
        if raw is None:
            return None
        cols = tuple(c.strip() for c in str(raw).split(",") if c.strip())
        unknown = [c for c in cols if c not in metadata.column_names]
        if unknown or not cols:
            raise InvalidInputError(f"table {self.uri}: option columns={raw!r} names unknown column(s) "
                                    f"{', '.join(unknown) or '(none given)'}; the table has "
                                    f"{', '.join(metadata.column_names)}")
        return cols

    # -- reads ----------------------------------------------------------------------------------
    def schema(self) -> T.StructType:
        table = Table.open(self.uri)
        if self.change_feed:
            md = table.snapshot().metadata  # the schema is fixed at create: the latest metadata has it
            base = table_schema(md)
            nullable = T.StructType([T.StructField(f.name, f.dataType, True) for f in base.fields])
            return nullable.add(CHANGE_COLUMN, T.StringType()).add(CHANGE_VERSION_COLUMN, T.LongType())
        md = table.snapshot(self._version(table)).metadata
        return table_schema(md, self._columns(md))

    def reader(self, schema: T.StructType) -> DataSourceReader:
        table = Table.open(self.uri)
        if self.change_feed:
            start, end = self._change_range(table)
            snap = table.snapshot(end)
            known = [*snap.metadata.column_names, CHANGE_COLUMN, CHANGE_VERSION_COLUMN]
            unknown = [c for c in schema.fieldNames() if c not in known]
            if unknown:
                raise SchemaMismatchError(f"table {self.uri}: the change feed has no column(s) {', '.join(unknown)}; "
                                          f"its columns are {', '.join(known)}")
            return ChangeFeedReader(self.uri, start, end, snap.protocol, snap.metadata, schema.fieldNames(),
                                    [f.nullable for f in schema.fields])
        snap = table.snapshot(self._version(table))
        md = snap.metadata
        columns = check_read_schema(schema, md, uri=self.uri)
        row_filter = parse_filter(self.options.get("filter"), md, where=f"table {self.uri}")
        return SnapshotReader(self.uri, snap.version, md, columns, row_filter, self._int("splitBytes"),
                              [f.nullable for f in schema.fields])

    def streamReader(self, schema: T.StructType) -> DataSourceStreamReader:
        table = Table.open(self.uri)
        if not self.change_feed:
            raise InvalidInputError(f"table {self.uri}: a stream of a maintd table serves its change feed: add "
                                    ".option('readChangeFeed', 'true') (with startingVersion or startingTimestamp "
                                    "to start before the query does)")
        if self.options.get("endingVersion") or self.options.get("endingTimestamp"):
            raise InvalidInputError(f"table {self.uri}: a stream has no end; endingVersion and endingTimestamp "
                                    "apply to batch reads (spark.read)")
        snap = table.snapshot()
        first = self._int("startingVersion")
        start_ts = _time(self.options.get("startingTimestamp"))
        if first is None and start_ts is not None:
            first = self._first_version_from(table, start_ts)
        if first is None:
            first = snap.version + 1  # the versions committed after the query starts
        elif first <= snap.version:
            table.resolve_version(max(first - 1, 0))  # the feed from `first` compares with `first - 1`: retained?
        else:
            raise InvalidInputError(f"table {self.uri}: startingVersion {first} is after the latest version "
                                    f"{snap.version}")
        known = [*snap.metadata.column_names, CHANGE_COLUMN, CHANGE_VERSION_COLUMN]
        unknown = [c for c in schema.fieldNames() if c not in known]
        if unknown:
            raise SchemaMismatchError(f"table {self.uri}: the change feed has no column(s) {', '.join(unknown)}; "
                                      f"its columns are {', '.join(known)}")
        bounds = Bounds(self._positive("maxFilesPerTrigger"), self._positive("maxBytesPerTrigger"))
        return ChangeFeedStreamReader(self.uri, first, snap.protocol, snap.metadata, schema.fieldNames(),
                                      [f.nullable for f in schema.fields], bounds)

    def _positive(self, key: str) -> int | None:
        value = self._int(key)
        if value is not None and value < 1:
            raise InvalidInputError(f"table {self.uri}: option {key}={value} must be at least 1")
        return value

    # -- writes ---------------------------------------------------------------------------------
    def _list(self, key: str) -> tuple[str, ...]:
        raw = str(self.options.get(key) or "")
        return tuple(c.strip() for c in raw.split(",") if c.strip())

    def _open_or_create(self, schema: T.StructType) -> Table:
        """The table at the URI; created from the DataFrame's schema when absent and ``primaryKey`` is given
        (with ``partitionBy``, ``buckets`` and ``property.<key>`` options), as Delta creates on a first write."""
        try:
            return Table.open(self.uri)
        except TableNotFoundError:
            key = self._list("primaryKey")
            if not key:
                raise TableNotFoundError(
                    f"no table at {self.uri}; create it first (maintd table create, Table.create), or let this "
                    "write create it: .option('primaryKey', 'id') (and 'partitionBy', 'buckets')") from None
        op_column = self.options.get("opColumn") or None
        fields = fields_from_spark(schema, primary_key=key, uri=self.uri, leave_out=[op_column] if op_column else [])
        properties = {k.removeprefix("property."): v for k, v in self.options.items() if k.startswith("property.")}
        try:
            return Table.create(self.uri, fields, key, self._list("partitionBy"), buckets=self._int("buckets"),
                                properties=properties)
        except TableExistsError:  # a concurrent first write created it: write into it (its layout is checked)
            return Table.open(self.uri)

    def _job(self, schema: T.StructType, overwrite: bool, *, operation: str) -> WriteJob:
        table = self._open_or_create(schema)
        snap = table.snapshot()
        md = snap.metadata
        op_column = self.options.get("opColumn") or None
        added: tuple[Field_, ...] = ()
        if _flag(self.options.get("mergeSchema"), key="mergeSchema", uri=self.uri):
            added = columns_to_merge(schema, md, uri=self.uri, leave_out=[op_column] if op_column else [])
            md = add_columns(md, added, table=self.uri) if added else md
        check_write_schema(schema, md, uri=self.uri, op_column=op_column)
        where = self.options.get("replaceWhere")
        if where is not None and not overwrite:
            raise InvalidInputError(f"table {self.uri}: replaceWhere applies to mode('overwrite') only")
        replace_where = parse_filter(where, md, where=f"table {self.uri}: replaceWhere")
        if replace_where is not None:
            outside = [c for c in replace_where.columns if c not in md.partition_by]
            if outside:
                raise InvalidInputError(
                    f"table {self.uri}: replaceWhere may name partition columns only "
                    f"({', '.join(md.partition_by) or 'the table is unpartitioned'}), not {', '.join(outside)}"
                )
        if overwrite and op_column is not None:
            raise InvalidInputError(f"table {self.uri}: an overwrite writes rows, not changes; drop opColumn")
        return WriteJob(self.uri, md, snap.version, op_column=op_column, overwrite=overwrite,
                        replace_where=replace_where, operation="OVERWRITE" if overwrite else operation, added=added,
                        parameters={"engine": "spark", "mode": "overwrite" if overwrite else "append"}
                        | ({"replace_where": str(replace_where)} if replace_where else {}))

    def writer(self, schema: T.StructType, overwrite: bool) -> DataSourceWriter:
        return BatchWriter(self._job(schema, overwrite, operation="WRITE"))

    def streamWriter(self, schema: T.StructType, overwrite: bool) -> DataSourceStreamWriter:
        app_id = self.options.get("appId") or None
        checkpoint = self.options.get("checkpointLocation") or None
        if app_id is None and checkpoint is None:
            raise InvalidInputError(f"table {self.uri}: a streaming write needs .option('checkpointLocation', ...) "
                                    "(or .option('appId', ...)) to commit each micro-batch exactly once")
        job = self._job(schema, overwrite, operation="STREAMING UPDATE")
        return StreamWriter(job, app_id=app_id, checkpoint=checkpoint)


def _flag(value: str | None, *, key: str, uri: str) -> bool:
    """A boolean option: ``true`` or ``false`` (any case), absent is false."""
    text = "" if value is None else str(value).strip().lower()
    if text in ("", "false"):
        return False
    if text == "true":
        return True
    raise InvalidInputError(f"table {uri}: option {key}={value!r} must be true or false")


def _time(value: str | None) -> str | int | None:
    if value is None or str(value).strip() == "":
        return None
    text = str(value).strip()
    return int(text) if text.isdigit() else text


def _to_ms(t: str | int) -> int:
    if isinstance(t, int):
        return t
    return int(datetime.fromisoformat(t).timestamp() * 1000)
