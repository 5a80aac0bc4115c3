"""Merge-on-read: the visible rows of a snapshot (the change feed diffs two of them: :mod:`maintd.table.read.feed`)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa

from maintd.storage import Storage
from maintd.table.files.datafiles import read_data_file, read_data_files, read_runs_of_files, with_hidden_columns
from maintd.table.files.keys import sort_key
from maintd.table.files.merge import first_of_each_key_hashed, latest_rows
from maintd.table.files.schema import HIDDEN_COLUMNS, OP_COLUMN, VERSION_COLUMN, to_arrow
from maintd.table.log.actions import AddFile, Metadata
from maintd.table.log.snapshot import PartitionKey, Snapshot

_THREADS = 4
_PARALLEL_FILES = 8


def key_columns(metadata: Metadata) -> list[str]:
    """The columns that identify a row: partition columns, then the primary key."""
    return list(dict.fromkeys([*metadata.partition_by, *metadata.primary_key]))


def read_bucket(storage: Storage, metadata: Metadata, files: Sequence[AddFile], columns: Sequence[str] | None,
                *, keep_hidden: bool = False) -> pa.Table:
    """The visible rows of one (partition, bucket): greatest version per key, deletes dropped."""
    cols = list(columns) if columns is not None else list(metadata.column_names)
    need = list(dict.fromkeys([*key_columns(metadata), *cols]))
    if not files:
        return _empty(metadata, need, keep_hidden)
    lone = files[0] if len(files) == 1 else None
    if all(f.kind == "base" for f in files):  # BaseFiles of a bucket hold disjoint key ranges: nothing to merge
        ordered = sorted(files, key=lambda f: (f.key_min is not None, sort_key(f.key_min or ()), f.path))
        t = pa.concat_tables([read_data_file(storage, metadata, f, need) for f in ordered])
    elif lone is not None and lone.level == 0 and lone.delete_rows == 0:
        t = read_data_file(storage, metadata, lone, need)  # a writer's file without deletes: keys appear once
    elif all(f.kind == "delta" and f.level == 0 for f in files) and len(metadata.primary_key) == 1:
        t = _newest_of_level0(storage, metadata, sorted(files, key=lambda f: -f.min_version), need)
    else:
        # level-0 files hold one version each: read newest first, and a stable sort by key settles them
        single = all(f.kind == "delta" and f.level == 0 for f in files)
        if single:
            files = sorted(files, key=lambda f: -f.min_version)
        # one (partition, bucket): the partition columns are the same in every row, so the primary key
        # alone tells the rows of a key apart
        t = latest_rows(_read_files(storage, metadata, files, need), list(metadata.primary_key), newest_first=single)
    if keep_hidden:
        return with_table_schema(t.select([*cols, *(c for c in HIDDEN_COLUMNS if c in t.column_names)]), metadata,
                                 deletes=True)
    return with_table_schema(t.select(cols), metadata)


def with_table_schema(t: pa.Table, metadata: Metadata, *, deletes: bool = False) -> pa.Table:
    """Rows ``t`` of one bucket typed as the table's schema says, NOT NULL columns too; with ``deletes`` (rows that
    may be delete rows, whose value columns are null) the columns outside the key nullable.

    The files of a bucket differ in nullability: a DeltaFile above level 0 holds delete rows, so its value columns
    are nullable whatever the table says; a BaseFile's are as the table says. The rows a read returns are the same
    whichever file they came from, and the buckets of one read are concatenated, so they are given one schema.
    """
    keys = set(key_columns(metadata))
    fields = {f.name: f if not deletes or f.name in keys else f.with_nullable(True) for f in to_arrow(metadata.fields)}
    schema = pa.schema([fields.get(f.name, f) for f in t.schema])
    if schema.equals(t.schema):
        return t
    return pa.Table.from_arrays(t.columns, schema=schema)


def _read_files(storage: Storage, metadata: Metadata, files: Sequence[AddFile], columns: Sequence[str]) -> pa.Table:
    """The files of one bucket concatenated in the order given, with the hidden columns (level-0 files' as
    :func:`_with_versions` adds them), decoded on threads when there are many (pyarrow releases the GIL)."""
    few = len(files) < _PARALLEL_FILES  # a few files: one thread, each decoded on pyarrow's threads
    parts = read_data_files(storage, metadata, files, columns, 1 if few else _THREADS)
    if all(f.kind == "delta" and f.level == 0 for f in files):
        return _with_versions(files, parts)
    return pa.concat_tables([with_hidden_columns(p, f) for p, f in zip(parts, files, strict=True)],
                            promote_options="default")


def _newest_of_level0(storage: Storage, metadata: Metadata, files: Sequence[AddFile], columns: Sequence[str]
                      ) -> pa.Table:
    """The visible rows of one bucket of level-0 files given newest first, keyed by a one-column primary key
    (the partition columns are the same in every row of a bucket), sorted by key.

    Each thread reads a run of consecutive files and keeps the newest row of each key of its run, deletes
    included (they hide the older runs' rows); the runs' survivors, newest run first, are settled the same
    way. Half the deduplication runs on the reading threads, and the last one sees fewer rows.
    """
    key = metadata.primary_key[0]
    threads = 1 if len(files) < _PARALLEL_FILES else _THREADS

    def newest_of_run(run: Sequence[AddFile], parts: list[pa.Table]) -> pa.Table:
        t = _with_versions(run, parts)
        return t if threads == 1 else t.take(first_of_each_key_hashed(t, key, keep_deletes=True, in_key_order=False))

    t = pa.concat_tables(read_runs_of_files(storage, metadata, files, columns, threads, newest_of_run),
                         promote_options="default")
    return t.take(first_of_each_key_hashed(t, key, keep_deletes=False))


def _with_versions(files: Sequence[AddFile], parts: list[pa.Table]) -> pa.Table:
    """The tables read from level-0 ``files`` concatenated, with the version column of each file.

    Tables of one schema are concatenated as read and the version column, one constant per file, is added
    once for all of them: a bucket of hundreds of small files pays no per-file column building.
    """
    with contextlib.suppress(pa.ArrowInvalid):  # raised when the files' schemas differ
        level0 = pa.concat_tables(parts)
        versions = np.repeat(np.array([f.min_version for f in files], dtype=np.int64), [p.num_rows for p in parts])
        return level0.append_column(pa.field(VERSION_COLUMN, pa.int64(), nullable=False), pa.array(versions))
    return pa.concat_tables([with_hidden_columns(p, f) for p, f in zip(parts, files, strict=True)],
                            promote_options="default")


def _empty(metadata: Metadata, cols: Sequence[str], keep_hidden: bool) -> pa.Table:
    schema = to_arrow(metadata.fields)
    fields = [schema.field(c) for c in cols]
    if keep_hidden:
        fields += [pa.field(OP_COLUMN, pa.int8()), pa.field(VERSION_COLUMN, pa.int64())]
    return pa.schema(fields).empty_table()


def read_snapshot(storage: Storage, snapshot: Snapshot, columns: Sequence[str] | None = None, *,
                  groups: set[tuple[PartitionKey, int]] | None = None, keep_hidden: bool = False) -> pa.Table:
    """Merge-on-read of a whole snapshot (or of some (partition, bucket) groups), buckets in parallel."""
    md = snapshot.metadata
    if columns is not None:
        unknown = [c for c in columns if c not in md.column_names]
        if unknown:
            from maintd.errors import InvalidInputError

            raise InvalidInputError(
                f"table {storage.uri}: unknown column(s) {', '.join(unknown)}; the table has "
                f"{', '.join(md.column_names)}"
            )
    by_bucket = snapshot.by_bucket()
    selected = [fs for g, fs in sorted(by_bucket.items(), key=lambda kv: (str(kv[0][0]), kv[0][1]))
                if groups is None or g in groups]
    with ThreadPoolExecutor(_THREADS) as pool:
        tables = list(pool.map(lambda fs: read_bucket(storage, md, fs, columns, keep_hidden=keep_hidden), selected))
    if not tables:
        cols = list(columns) if columns is not None else list(md.column_names)
        return _empty(md, cols, keep_hidden)
    return pa.concat_tables(tables)
