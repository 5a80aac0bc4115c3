"""Data files: naming, writing Parquet with its statistics, and reading files back with row versions.

Column layout of data files (docs/format.md, "Data files"):

* level-0 DeltaFile (writers): table columns + ``_maintd_op``; the row version is the
  version of the commit that added the file (``AddFile.min_version``).
* level-1/2 DeltaFile (clustering): table columns + ``_maintd_op`` + ``_maintd_version``.
* BaseFile (compaction): table columns + ``_maintd_version``; no deletes.

Rows are sorted by primary key (then version) so that readers and merges can stream them. A data file
is made durable (``Storage.make_durable``) before the commit that adds it can be published, and one that
is missing, not Parquet, or whose columns differ from the table schema is a
:class:`~maintd.errors.DataFileError` naming it, never a raw pyarrow error.
"""

from __future__ import annotations

import contextlib
import functools
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from maintd.errors import DataFileMissingError, DataFileSchemaError
from maintd.storage import Storage
from maintd.storage.threads import SharedThreads
from maintd.table.files.codecs import without_futile_compression
from maintd.table.files.dictionaries import (
    DICTIONARY_PAGE_LIMIT,
    conform,
    dictionary_types,
    encode_text,
    file_dictionary,
    fits,
    footer_entries,
    with_dictionaries,
)
from maintd.table.files.evolution import added_columns, fill_missing
from maintd.table.files.keys import key_value
from maintd.table.files.lazy import lazy_module
from maintd.table.files.schema import OP_COLUMN, OP_DELETE, OP_UPSERT, VERSION_COLUMN, to_arrow
from maintd.table.log.actions import AddFile, Field_, FileKind, KeyValue, Metadata
from maintd.table.log.snapshot import partition_path

if TYPE_CHECKING:
    import pyarrow.compute as pc
else:
    pc = lazy_module("pyarrow.compute")  # imported by the first call: see maintd.table.files.lazy

_T = TypeVar("_T")
_R = TypeVar("_R")

WRITE_OPTIONS: dict[str, Any] = {"compression": "zstd", "compression_level": 1, "write_statistics": True}
"""Parquet options of the files maintenance writes (level-1 and level-2 DeltaFiles, BaseFiles): zstd
level 1 and column statistics; these files are large and long-lived, so their size is what counts."""
LEVEL0_OPTIONS: dict[str, Any] = {"compression": "lz4", "use_dictionary": False}
"""Parquet options of a writer's level-0 DeltaFiles: LZ4 (the Parquet ``LZ4_RAW`` codec), no dictionaries,
integer key and hidden columns ``DELTA_BINARY_PACKED`` and uncompressed, and statistics for the key and
hidden columns only (:func:`level0_options`). A micro-batch file is small and short-lived, so what counts is
the time to write and read it (docs/design.md, "Data file encoding"; figures in docs/benchmarks.md, "Writer").
Value columns' statistics could never prune a DeltaFile: a reader merges before it filters on values.
Every engine that reads Parquet in maintd's world reads ``LZ4_RAW``."""


def stats_columns(schema: pa.Schema, key_columns: Sequence[str]) -> list[str]:
    """The columns of ``schema`` whose statistics a DeltaFile keeps: the key columns and the hidden ones."""
    kept = {*key_columns, OP_COLUMN, VERSION_COLUMN}
    return [f.name for f in schema if f.name in kept]


def text_columns(schema: pa.Schema) -> list[str]:
    """The string and binary columns of ``schema``: the ones a dictionary shrinks most for its cost."""
    return [f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)
            or pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type)]


def delta_coded(schema: pa.Schema, key_columns: Sequence[str], constant: Sequence[str] = ()) -> list[str]:
    """The columns of ``schema`` that level-0 and level-1 files store ``DELTA_BINARY_PACKED`` and uncompressed.
    The integer, date and timestamp key columns (sorted in a file: small deltas) and the hidden ones (an op
    of 0 or 1, versions close to each other), but not ``constant`` ones (a dictionary of one value,
    :mod:`maintd.execution.output`). These pack into a few bits per value, faster than LZ4 compresses them
    plain and smaller. Value columns stay plain: random wide integers (an epoch in microseconds, a hash)
    unpack more slowly than LZ4 decompresses them, and their values are unknown until written."""
    kept = {*key_columns, OP_COLUMN, VERSION_COLUMN} - set(constant)
    return [f.name for f in schema if f.name in kept
            and (pa.types.is_integer(f.type) or pa.types.is_date32(f.type) or pa.types.is_timestamp(f.type))]


def packed_options(schema: pa.Schema, key_columns: Sequence[str], constant: Sequence[str] = ()) -> dict[str, Any]:
    """Parquet options: :func:`delta_coded` columns ``DELTA_BINARY_PACKED`` and uncompressed, the others LZ4."""
    packed = delta_coded(schema, key_columns, constant)
    return {"compression": {f.name: "none" if f.name in packed else "lz4" for f in schema},
            "column_encoding": dict.fromkeys(packed, "DELTA_BINARY_PACKED")}


def level0_options(schema: pa.Schema, key_columns: Sequence[str], sample: pa.Table | None = None) -> dict[str, Any]:
    """:data:`LEVEL0_OPTIONS` for level-0 files of ``schema`` keyed by ``key_columns``, their integer key and
    hidden columns packed (:func:`packed_options`), and the columns whose values in ``sample`` LZ4 cannot shrink
    stored uncompressed (:func:`~maintd.table.files.codecs.without_futile_compression`; None: none judged)."""
    options = {**LEVEL0_OPTIONS, **packed_options(schema, key_columns),
               "write_statistics": stats_columns(schema, key_columns)}
    return options if sample is None else without_futile_compression(options, sample)


def data_file_path(metadata: Metadata, partition: Mapping[str, str | None], bucket: int, kind: FileKind,
                   level: int | None, *, unique: str | None = None) -> str:
    """A new, unique relative path for a data file.

    ``unique`` (32 lowercase hex digits) replaces the random part of the name, for writers that name
    their files so they can find them again (maintenance attempts); default: a random UUID.
    """
    return _bucket_file_path(metadata, partition, bucket, "base" if kind == "base" else f"delta-L{level}", unique)


def prior_file_path(metadata: Metadata, partition: Mapping[str, str | None], bucket: int, *, unique: str) -> str:
    """A new relative path for a prior-rows file, beside the BaseFiles of its bucket (``prior-<hex>.parquet``)."""
    return _bucket_file_path(metadata, partition, bucket, "prior", unique)


def _bucket_file_path(metadata: Metadata, partition: Mapping[str, str | None], bucket: int, tag: str,
                      unique: str | None) -> str:
    part = partition_path(partition, metadata.partition_by)
    if unique is not None and (len(unique) != 32 or unique.strip("0123456789abcdef")):
        raise ValueError(f"unique part of a data file name must be 32 lowercase hex digits, got {unique!r}")
    name = f"bucket-{bucket:05d}/{tag}-{unique or uuid.uuid4().hex}.parquet"
    return f"{part}/{name}" if part else name


def file_schema(metadata: Metadata, kind: FileKind, level: int | None) -> pa.Schema:
    """The Arrow schema of a data file of ``kind`` and ``level`` (docs/format.md, "Data files").

    Remembered per ``metadata`` object (a read of many files passes the same one every time, and hashing
    its fields costs more than the look-up saves); the entry holds the object, so its id is not reused
    while the entry lives.
    """
    key = (id(metadata), kind, level)
    hit = _BY_METADATA.get(key)
    if hit is not None and hit[0] is metadata:
        return hit[1]
    schema = _file_schema(metadata.fields, frozenset(metadata.primary_key) | frozenset(metadata.partition_by),
                          kind, level)
    if len(_BY_METADATA) >= 64:
        _BY_METADATA.clear()
    _BY_METADATA[key] = (metadata, schema)
    return schema


_BY_METADATA: dict[tuple[int, str, int | None], tuple[Metadata, pa.Schema]] = {}


@functools.lru_cache(maxsize=256)
def _file_schema(fields: tuple[Field_, ...], keys: frozenset[str], kind: FileKind, level: int | None) -> pa.Schema:
    """Cached: a read of many files asks for the same few schemas, and building one copies every field."""
    if kind == "delta":  # delete rows carry only the key: every other column may be null
        schema = to_arrow(f if f.name in keys else f.model_copy(update={"nullable": True}) for f in fields)
        schema = schema.append(pa.field(OP_COLUMN, pa.int8(), nullable=False))
    else:
        schema = to_arrow(fields)
    if kind == "base" or (level or 0) > 0:
        schema = schema.append(pa.field(VERSION_COLUMN, pa.int64(), nullable=False))
    return schema


def key_bounds(data: pa.Table, primary_key: Sequence[str]) -> tuple[tuple[KeyValue, ...] | None, ...]:
    """(first key, last key) of data sorted by primary key; (None, None) when empty."""
    if data.num_rows == 0:
        return None, None
    first = tuple(key_value(data.column(c)[0].as_py()) for c in primary_key)
    last = tuple(key_value(data.column(c)[data.num_rows - 1].as_py()) for c in primary_key)
    return first, last


def write_data_file(storage: Storage, metadata: Metadata, data: pa.Table, *, partition: Mapping[str, str | None],
                    bucket: int, kind: FileKind, level: int | None, min_version: int = 0, max_version: int = 0,
                    min_commit_time: int = 0, max_commit_time: int = 0, data_change: bool = True) -> AddFile:
    """Write ``data`` (already in the file layout and sorted) and describe it as an ``add`` action.

    For level-0 files the versions and commit times are placeholders the transaction fills in.
    """
    return write_data_files(storage, metadata, [(data, partition, bucket)], kind=kind, level=level,
                            min_version=min_version, max_version=max_version, min_commit_time=min_commit_time,
                            max_commit_time=max_commit_time, data_change=data_change)[0]


FileContent = tuple[pa.Table, Mapping[str, str | None], int]
"""The rows of one data file (in the file layout, sorted by key), its partition and its bucket."""

WRITE_THREADS = 4
"""Files of one batch encoded and written at once: pyarrow releases the GIL while it encodes and writes."""


_WRITERS = SharedThreads(WRITE_THREADS, "maintd-write")
"""The threads that write the files of a batch (shared by the process, started on first use)."""


def map_in_runs(fn: Callable[[_T], _R], items: Sequence[_T], threads: int) -> list[_R]:
    """``fn`` of every item, in order, on up to ``threads`` threads that each take a run of consecutive items:
    a future per small file costs more than reading it (reads of many small files)."""
    return [r for run in map_runs(lambda xs: [fn(x) for x in xs], items, threads) for r in run]


def map_runs(fn: Callable[[Sequence[_T]], _R], items: Sequence[_T], threads: int) -> list[_R]:
    """``fn`` of each run of consecutive items, in order: ``items`` cut into up to ``threads`` runs of
    (nearly) equal length, each on a thread of its own (one run, on this thread, when ``threads`` <= 1)."""
    if threads <= 1 or len(items) <= 1:
        return [fn(items)]
    step = -(-len(items) // threads)
    with ThreadPoolExecutor(min(threads, len(items))) as pool:
        return list(pool.map(lambda i: fn(items[i:i + step]), range(0, len(items), step)))




def write_data_files(storage: Storage, metadata: Metadata, contents: Sequence[FileContent], *, kind: FileKind,
                     level: int | None, min_version: int = 0, max_version: int = 0, min_commit_time: int = 0,
                     max_commit_time: int = 0, data_change: bool = True) -> list[AddFile]:
    """Write the files of one commit in parallel and make them durable with one barrier for the batch.

    What a batch shares is computed once (the file schema, the directories); each file is encoded and
    written on a thread; then :meth:`Storage.make_durable_many` syncs the files and their directories
    before this returns, so the commit that names them can be published. If any file fails, the ones
    written stay on storage (no commit names them; orphan cleanup takes them) and the error is raised.
    """
    if not contents:
        return []
    schema = file_schema(metadata, kind, level)
    paths = [data_file_path(metadata, partition, bucket, kind, level) for _, partition, bucket in contents]
    dirs: dict[str, str] = {}
    for d in dict.fromkeys(p.rpartition("/")[0] for p in paths):
        if d:
            storage.makedirs(d)
        dirs[d] = storage.full_path(d) if d else storage.full_path(paths[0]).rpartition("/")[0]
    keys = metadata.primary_key
    level0 = kind == "delta" and level == 0
    options = WRITE_OPTIONS
    if level0:  # the codecs judged once for the batch, on its largest file (the files are slices of one batch)
        largest = max(contents, key=lambda c: c[0].num_rows)[0].select(schema.names)
        options = level0_options(schema, [*metadata.partition_by, *keys], largest)
    text = dictionary_types(schema, [*metadata.partition_by, *keys]) if level0 else []

    shape = conform(contents[0][0].select(schema.names), schema).schema  # the files of a batch share it
    shared: dict[Any, Any] = {}

    def one(i: int) -> AddFile:
        data, partition, bucket = contents[i]
        if not data.schema.equals(shape):
            data = conform(data.select(schema.names), schema)
        d, _, name = paths[i].rpartition("/")  # a new random name in a checked directory
        with storage.filesystem.open_output_stream(f"{dirs[d]}/{name}") as sink:
            write_parquet(data, sink, options, text, schema, shared)
            size = int(sink.tell())
        deletes = int(pc.sum(pc.equal(data.column(OP_COLUMN), OP_DELETE)).as_py() or 0) if kind == "delta" else 0
        kmin, kmax = key_bounds(data, keys)
        return AddFile(path=paths[i], partition=dict(partition), bucket=bucket, kind=kind,
                       level=None if kind == "base" else level, rows=data.num_rows, bytes=size,
                       min_version=min_version, max_version=max_version, min_commit_time=min_commit_time,
                       max_commit_time=max_commit_time, delete_rows=deletes, key_min=kmin, key_max=kmax,
                       data_change=data_change)

    adds = [one(0)] if len(contents) == 1 else list(_WRITERS.get().map(one, range(len(contents))))
    storage.make_durable_many(paths)
    return adds


def write_parquet(data: pa.Table, sink: Any, options: Mapping[str, Any], text: Sequence[str] = (),
                  schema: pa.Schema | None = None, shared: dict[Any, Any] | None = None) -> None:
    """Write ``data`` as one Parquet file with ``options``, those of its ``text`` columns that have few distinct
    values as dictionaries, listed in the footer (docs/format.md, "Data files"); the footer's Arrow schema is
    ``schema`` (default: ``data``'s, its dictionaries as plain columns).

    A text column that comes as a dictionary array (a writer's batch encoded before it was split,
    :func:`~maintd.table.files.dictionaries.encode_batch`) is written as it is; a plain one is encoded here
    (:func:`~maintd.table.files.dictionaries.encode_text`). ``shared``: what the files of one batch share (their
    writer's options and schema, the footer entries in its metadata), worked out for the first of them: a
    streaming writer's commit writes a hundred files of a hundred rows, where every 10 us per file is a
    millisecond per commit.
    """
    encoded: list[str] = []
    for c in text:
        col = data.column(c)
        if pa.types.is_dictionary(col.type):
            if col.num_chunks == 1 and len(d := col.chunk(0).dictionary) <= len(col) and fits(d):
                encoded.append(c)  # a slice of an encoded batch, as it is
                continue
            arr = file_dictionary(col)
        else:
            arr = encode_text(col)
        if arr is not None:
            data = with_dictionaries(data, {c: arr})
            encoded.append(c)
        elif pa.types.is_dictionary(col.type):  # too large a dictionary for one page: plain values
            data = data.set_column(data.schema.get_field_index(c), c, col.cast(col.type.value_type))
    plain = schema or pa.schema([f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f
                                 for f in data.schema], metadata=data.schema.metadata)
    if not encoded:
        pq.write_table(conform(data, plain), sink, **options)
        return
    key = tuple(encoded)
    got = shared.get(key) if shared is not None else None
    if got is None:
        got = ({**options, "use_dictionary": encoded, "dictionary_pagesize_limit": DICTIONARY_PAGE_LIMIT,
                "store_schema": False}, footer_entries(plain, encoded))
        if shared is not None:
            shared[key] = got
    with pq.ParquetWriter(sink, data.schema, **got[0]) as writer:
        writer.write_table(data)
        writer.add_key_value_metadata(got[1])


def read_data_file(storage: Storage, metadata: Metadata, f: AddFile, columns: Sequence[str] | None = None,
                   *, threads: bool = True, hidden: bool = True) -> pa.Table:
    """Read a file with ``_maintd_op`` and ``_maintd_version`` always present (filled for level-0/base).

    ``threads``: decode its columns on pyarrow's threads (off when many files are read on threads).
    ``hidden=False``: leave out the hidden columns the file does not hold (a reader of many level-0
    files adds their version column once for all of them).
    """
    t = _decode(storage, f, storage.full_path(f.path), _projection(metadata, f.kind, f.level, columns), threads)
    return with_hidden_columns(t, f) if hidden else t


def read_data_files(storage: Storage, metadata: Metadata, files: Sequence[AddFile], columns: Sequence[str] | None,
                    threads: int) -> list[pa.Table]:
    """The files read in order as :func:`read_data_file` with ``hidden=False`` reads one, on up to ``threads``
    threads, each taking a run of consecutive files (:func:`read_runs_of_files`)."""
    return [t for run in read_runs_of_files(storage, metadata, files, columns, threads, lambda _, ts: ts) for t in run]


def read_runs_of_files(storage: Storage, metadata: Metadata, files: Sequence[AddFile], columns: Sequence[str] | None,
                       threads: int, per_run: Callable[[Sequence[AddFile], list[pa.Table]], _R]) -> list[_R]:
    """``per_run`` of each run of consecutive files and their tables (read as :func:`read_data_file` with
    ``hidden=False`` reads one), the runs on up to ``threads`` threads (:func:`map_runs`): a reader can
    reduce a run on the thread that read it.

    What the files share (their full paths' checks, the columns to read and where they are in a file of the
    expected schema) is worked out once for all of them, not per file. With hundreds of small files, the
    Python work per file holds the GIL while the other threads wait to start their next decode.
    """
    plans: dict[tuple[str, int | None], _Projection] = {}
    for f in files:
        if (f.kind, f.level) not in plans:
            plans[f.kind, f.level] = _projection(metadata, f.kind, f.level, columns)
    paths = dict(zip((f.path for f in files), storage.full_paths([f.path for f in files]), strict=True))
    single = threads <= 1

    def run(fs: Sequence[AddFile]) -> _R:
        return per_run(fs, [_decode(storage, f, paths[f.path], plans[f.kind, f.level], single) for f in fs])

    return map_runs(run, files, threads)


_Projection = tuple[pa.Schema, list[str], list[int], frozenset[str]]
"""The schema a data file must have, the columns to read from it, their indices in such a file, and the columns
it may lack (added to the schema after it was written: read as nulls)."""


def _projection(metadata: Metadata, kind: FileKind, level: int | None, columns: Sequence[str] | None) -> _Projection:
    names = list(columns) if columns is not None else list(metadata.column_names)
    wanted = list(dict.fromkeys([*metadata.primary_key, *names]))
    expected = file_schema(metadata, kind, level)
    read_cols = wanted + [c for c in (OP_COLUMN, VERSION_COLUMN) if expected.get_field_index(c) >= 0]
    return expected, read_cols, [expected.get_field_index(c) for c in read_cols], added_columns(metadata)


def _decode(storage: Storage, f: AddFile, full_path: str, projection: _Projection, threads: bool) -> pa.Table:
    """The projected columns of data file ``f`` (at ``full_path``), its schema checked against the table's.

    Through ``pq.ParquetReader``, the reader under ``pq.ParquetFile``: the wrapper maps every nested column
    path and looks each column name up in Python for each file, holding the GIL.
    """
    expected, read_cols, indices, optional = projection
    try:
        with storage.filesystem.open_input_file(full_path) as source:
            reader = pq.ParquetReader()
            reader.open(source, pre_buffer=storage.coalesce_reads)
            found = reader.schema_arrow
            present = read_cols
            if not found.equals(expected):  # a file maintd wrote for this schema matches as a whole
                present = _present(found, read_cols, optional)
                _check_columns(f"table {storage.uri}: data file {f.path}", f.path, expected, found, present)
                indices = [found.get_field_index(c) for c in present]
            # the footer's entries (key index, dictionary list) describe the file, not the rows: not passed on
            t = reader.read_all(column_indices=indices, use_threads=threads).replace_schema_metadata(None)
    except (pa.ArrowInvalid, OSError) as exc:
        raise _file_error(storage, f, exc) from None
    return t if present is read_cols else fill_missing(t, expected, read_cols)


def _present(found: pa.Schema, columns: Sequence[str], optional: frozenset[str]) -> list[str]:
    """``columns`` less the ``optional`` ones a file (of schema ``found``) lacks: columns added to the table
    after it was written, read as nulls (docs/format.md, "Schema evolution")."""
    return [c for c in columns if c not in optional or found.get_field_index(c) >= 0]


def read_rows_of_keys(storage: Storage, metadata: Metadata, f: AddFile, keys: pa.Table) -> pa.Table:
    """The rows of ``f`` whose primary key is one of ``keys`` (every column, hidden ones filled).

    Only the row groups that may hold a wanted key are read: those whose leading key column's statistics
    (minimum and maximum) enclose one of the wanted values, or every row group when the statistics cannot
    tell (none written, a type they do not compare as). A file whose key range (``key_min``..``key_max``
    in the log) holds no wanted key is not opened. The rows read are then filtered to the wanted keys: the
    change feed's read of the prior state of some keys in a large file.
    """
    pk = list(metadata.primary_key)
    expected = file_schema(metadata, f.kind, f.level)
    lead = keys.column(pk[0])
    logged = pa.types.is_integer(lead.type) or pa.types.is_string(lead.type)  # kept as they are in the log
    if keys.num_rows == 0 or (logged and f.key_min and f.key_max
                              and not _any_between(lead, f.key_min[0], f.key_max[0])):
        return with_hidden_columns(expected.empty_table(), f)
    where = f"table {storage.uri}: data file {f.path}"
    with data_file_errors(storage, f), storage.filesystem.open_input_file(storage.full_path(f.path)) as source:
        pf = pq.ParquetFile(source, pre_buffer=storage.coalesce_reads)
        present = _present(pf.schema_arrow, expected.names, added_columns(metadata))
        _check_columns(where, f.path, expected, pf.schema_arrow, present)
        meta = pf.metadata
        at = meta.schema.names.index(pk[0]) if pk[0] in meta.schema.names else None
        groups = [i for i in range(meta.num_row_groups)
                  if at is None or _may_hold(lead, meta.row_group(i).column(at).statistics)]
        if not groups:
            return with_hidden_columns(expected.empty_table(), f)
        if len(groups) == 1 or sum(meta.row_group(i).total_byte_size for i in groups) <= _KEYED_READ_BYTES:
            t = rows_with_keys(pf.read_row_groups(groups, columns=present), pk, keys)
        else:  # a row group at a time: what is held is one row group and the rows kept
            t = pa.concat_tables([rows_with_keys(pf.read_row_group(i, columns=present), pk, keys)
                                  for i in groups])
    return with_hidden_columns(fill_missing(t.replace_schema_metadata(None), expected, expected.names), f)


_KEYED_READ_BYTES = 64 << 20
"""Row groups of more bytes than this (uncompressed, as their footer says) are read for some keys one at a time
(:func:`read_rows_of_keys`), so that a lookup in a large BaseFile holds one decoded row group, not the file."""


def rows_with_keys(t: pa.Table, pk: Sequence[str], keys: pa.Table, *, keep: bool = True) -> pa.Table:
    """The rows of ``t`` whose primary key is one of ``keys`` (``keep=False``: is none of them), in order."""
    if len(pk) == 1:
        inside = pc.is_in(t.column(pk[0]), value_set=keys.column(pk[0]))
        return t.filter(inside if keep else pc.invert(inside))
    rows = t.select(pk).append_column("__row", pa.array(np.arange(t.num_rows, dtype=np.int64)))
    kind = "left semi" if keep else "left anti"
    picked = rows.join(keys.select(pk), keys=list(pk), join_type=kind, use_threads=False)
    return t.take(pa.array(np.sort(picked.column("__row").to_numpy()), pa.int64()))


def _may_hold(values: pa.ChunkedArray | pa.Array, stats: pq.Statistics | None) -> bool:
    """Whether a row group whose leading key column has ``stats`` may hold one of ``values``."""
    if stats is None or not stats.has_min_max:
        return True
    return _any_between(values, stats.min, stats.max)


def _any_between(values: pa.ChunkedArray | pa.Array, lo: Any, hi: Any) -> bool:
    """Whether some of ``values`` lies in ``[lo, hi]``; True when that cannot be told: a bound unknown or not
    comparable, or a null or NaN among ``values`` (statistics leave nulls and NaNs out of their range)."""
    if lo is None or hi is None or values.null_count:
        return True
    try:
        if pa.types.is_floating(values.type) and pc.any(pc.is_nan(values)).as_py():
            return True
        inside = pc.and_(pc.greater_equal(values, pa.scalar(lo, values.type)),
                         pc.less_equal(values, pa.scalar(hi, values.type)))
        return bool(pc.any(inside).as_py())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return True


@contextlib.contextmanager
def data_file_errors(storage: Storage, f: AddFile) -> Iterator[None]:
    """Turn the errors of opening or decoding data file ``f`` into errors that name it and say what to do."""
    try:
        yield
    except (pa.ArrowInvalid, OSError) as exc:
        raise _file_error(storage, f, exc) from None


def _file_error(storage: Storage, f: AddFile, exc: Exception) -> Exception:
    """The error that names data file ``f`` and says what to do, for ``exc`` raised opening or decoding it."""
    where = f"table {storage.uri}: data file {f.path}"
    if isinstance(exc, FileNotFoundError):
        return DataFileMissingError(
            f"{where} is missing from storage, but the log references it (bucket {f.bucket}); the table cannot "
            "be read at this version. Restore the file from a backup (or see docs/operations.md 'Recover')",
            path=f.path)
    return DataFileSchemaError(
        f"{where} is not a readable Parquet file ({' '.join(str(exc).split())}); restore it from a backup "
        "(see docs/operations.md 'Recover')", path=f.path)


def _check_columns(where: str, path: str, expected: pa.Schema, found: pa.Schema, columns: Sequence[str]) -> None:
    """Every column to read is in the file, with the table's type (a file written for another schema is refused)."""
    for name in columns:
        want = expected.field(name).type
        index = found.get_field_index(name)
        if index < 0 or found.field(index).type != want:
            got = "missing" if index < 0 else f"of type {found.field(index).type}"
            raise DataFileSchemaError(
                f"{where} does not match the table schema: column {name!r} is {got}, expected {want}; the file "
                "was not written for this table. Restore the right file (see docs/operations.md 'Recover')",
                path=path)


def with_hidden_columns(t: pa.Table, f: AddFile) -> pa.Table:
    if OP_COLUMN not in t.column_names:
        t = t.append_column(pa.field(OP_COLUMN, pa.int8(), nullable=False),
                            pa.repeat(pa.scalar(OP_UPSERT, pa.int8()), t.num_rows))
    if VERSION_COLUMN not in t.column_names:
        t = t.append_column(pa.field(VERSION_COLUMN, pa.int64(), nullable=False),
                            pa.repeat(pa.scalar(f.min_version, pa.int64()), t.num_rows))
    return t
