"""Reading a task's inputs: whole files from memory (small inputs) or sorted streams within a key range.

Two ways to read, chosen by the task's memory budget (:mod:`maintd.execution.rewrite`):

* **whole** (:func:`read_all`): every input fetched with one read and decoded from memory in parallel
  threads (Parquet decoding releases the GIL); the fast path of the small-file case.
* **streams** (:func:`file_stream`): a Parquet reader per input with a small read buffer and no
  pre-buffering, so an open input costs about two pages per column, not a row group. Only the row
  groups that can hold keys of the task's range are read (the ``maintd.key_index`` footer entry of
  files maintd wrote, else the leading key column's statistics).

Both restrict rows to the task's key range and add the hidden columns (``_maintd_op``,
``_maintd_version``) that a file's kind leaves implicit.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from maintd.execution.merge import key_at, restrict
from maintd.storage import LocalStorage, Storage
from maintd.table.files.datafiles import data_file_errors, file_schema, map_in_runs, with_hidden_columns
from maintd.table.files.dictionaries import common_dictionaries, dictionary_schema, dictionary_types
from maintd.table.files.evolution import added_columns, fill_missing
from maintd.table.files.keys import Key, KeyRange, key_value, sort_key
from maintd.table.files.schema import OP_COLUMN, VERSION_COLUMN, to_arrow
from maintd.table.log.actions import AddFile, Metadata

KEY_INDEX = "maintd.key_index"
"""Footer key-value entry of files maintd writes: JSON list of the first key of every row group."""
READ_BUFFER = 64 << 10
"""Read buffer of a streamed column chunk (bytes)."""
DEFAULT_PAGE = 1 << 20
"""Page size assumed for files not written by maintd (pyarrow's default data page size)."""
OWN_PAGE = 128 << 10
"""Data page size of the files maintd writes (:mod:`maintd.execution.output`)."""


def constant_columns(metadata: Metadata) -> tuple[str, ...]:
    """The partition columns a unit leaves out of the rows it merges: those not in the primary key.

    A unit rewrites one bucket of one partition, so its partition columns hold one value in every row of
    every input: they are not read. :func:`partition_constants` reads their value once; the outputs write it
    back (:mod:`maintd.execution.output`). A partition column that is part of the primary key is read and
    merged like the key's other columns, since keys are handled as whole primary-key tuples.
    """
    return tuple(c for c in metadata.partition_by if c not in metadata.primary_key)


class Layout:
    """Per task: which columns to read from a file of a given kind and level, and the merged schema.

    :attr:`schema`, the rows a unit merges, lacks the unit's :func:`constant_columns`; :attr:`full_schema`
    has them.

    ``dictionaries``: the text columns every input lists as dictionary-encoded throughout
    (:func:`unit_dictionaries`), read as dictionary arrays and typed so in :attr:`schema`
    (:mod:`maintd.table.files.dictionaries`).
    """

    def __init__(self, metadata: Metadata, dictionaries: Iterable[str] = ()) -> None:
        self.metadata = metadata
        self.dictionaries = frozenset(dictionaries)
        self.constant = constant_columns(metadata)
        self.added = added_columns(metadata)
        wanted = (set(metadata.column_names) | {OP_COLUMN, VERSION_COLUMN}) - set(self.constant)
        self._wanted = wanted
        self._columns: dict[tuple[str, int | None], list[str]] = {}
        keys = set(metadata.primary_key) | set(metadata.partition_by)
        names = [*metadata.column_names, OP_COLUMN, VERSION_COLUMN]
        base = file_schema(metadata, "delta", 1)
        self.full_schema = pa.schema([base.field(n) if n in keys or n in (OP_COLUMN, VERSION_COLUMN)
                                      else base.field(n).with_nullable(True) for n in names])
        self.schema = dictionary_schema(pa.schema([f for f in self.full_schema if f.name in wanted]),
                                        self.dictionaries)
        level0 = file_schema(metadata, "delta", 0)
        self.level0_schema = dictionary_schema(pa.schema([f for f in level0 if f.name in wanted]), self.dictionaries)
        """The columns read from a level-0 file, as written (and read: dictionaries typed so)."""

    def columns(self, f: AddFile) -> list[str]:
        key = (f.kind, f.level)
        if key not in self._columns:
            self._columns[key] = [c for c in file_schema(self.metadata, f.kind, f.level).names if c in self._wanted]
        return self._columns[key]

    def unify(self, t: pa.Table) -> pa.Table:
        """Columns in one order, value columns nullable: so delete-bearing and base files concat. Columns added
        to the schema after a file was written are nulls (docs/format.md, "Schema evolution"): maintenance
        writes them into its outputs."""
        if t.schema.equals(self.schema):
            return t
        return fill_missing(t, self.schema, self.schema.names).cast(self.schema)

    def present(self, f: AddFile, names: Sequence[str]) -> list[str]:
        """The columns of ``f`` (:meth:`columns`) that a file with column ``names`` holds: a file written before
        columns were added lacks them (:meth:`unify` fills them in)."""
        wanted = self.columns(f)
        if not self.added:
            return wanted
        have = set(names)
        return [c for c in wanted if c in have or c not in self.added]


# -- whole files --------------------------------------------------------------------------------------------------


class Fetched:
    """One input fetched whole: its bytes, its parsed footer (:attr:`metadata`) and a reader of it, opened with
    the dictionary columns the unit is expected to choose (:func:`fetch_all`)."""

    __slots__ = ("_dictionaries", "_opened", "buffer", "metadata")

    def __init__(self, buffer: pa.Buffer, opened: pq.ParquetReader, dictionaries: frozenset[str]) -> None:
        self.buffer = buffer
        self.metadata: pq.FileMetaData = opened.metadata
        self._opened = opened
        self._dictionaries = dictionaries

    def reader(self, dictionaries: frozenset[str] | None = None) -> pq.ParquetReader:
        """A reader of the file with ``dictionaries`` read as dictionary arrays (None: as opened at the fetch):
        the one opened at the fetch when it was opened so (the common case), else a new one, given the parsed
        footer."""
        if dictionaries is None or dictionaries == self._dictionaries:
            return self._opened
        reader = pq.ParquetReader()
        reader.open(self.buffer, pre_buffer=False, metadata=self.metadata, read_dictionary=sorted(dictionaries) or None)
        return reader


def unit_dictionaries(metadata: Metadata, footers: Iterable[pq.FileMetaData]) -> frozenset[str]:
    """The text value columns every input of a unit lists as dictionary-encoded throughout: read, merged and
    written as dictionary arrays (:mod:`maintd.table.files.dictionaries`)."""
    return common_dictionaries(footers, dictionary_candidates(metadata))


def dictionary_candidates(metadata: Metadata) -> list[str]:
    """The columns of a table that files may list as dictionary-encoded: text value columns."""
    return dictionary_types(to_arrow(metadata.fields), [*metadata.primary_key, *metadata.partition_by])


def fetch_all(storage: Storage, files: Sequence[AddFile], threads: int, candidates: Sequence[str] = ()
              ) -> list[Fetched]:
    """Every file fetched with one read, its footer parsed: ``threads`` at once where reads wait on storage
    (:attr:`Storage.parallel_reads`), one after the other on a local disk.

    Readers are opened with the ``candidates`` the first file lists as dictionaries read as such: a unit's files
    list the same columns except while a table moves from files that list none, and only then is a reader
    opened again (:meth:`Fetched.reader`).

    A local file is read with plain ``open`` (no pathlib), at the path :meth:`Storage.full_paths` checked.
    """
    if isinstance(storage, LocalStorage):
        paths = dict(zip((f.path for f in files), storage.full_paths([f.path for f in files]), strict=True))

        def get(path: str) -> bytes:
            with open(paths[path], "rb") as fh:
                return fh.read()
    else:
        get = storage.read

    def open_one(f: AddFile, dictionaries: frozenset[str], where: dict[str, int] | None = None) -> Fetched:
        # the reader under pq.ParquetFile: the wrapper resolves its source as a path first and maps every
        # nested column path in Python, a sixth of the GIL time of a unit of 50 small files
        with data_file_errors(storage, f):
            buffer = pa.py_buffer(get(f.path))
            reader = pq.ParquetReader()
            reader.open(buffer, pre_buffer=False,
                        read_dictionary=sorted(where.values()) if where else sorted(dictionaries) or None)
            if where and not _at(reader.metadata, where):  # columns laid out otherwise: named, footer kept
                md = reader.metadata
                reader = pq.ParquetReader()
                reader.open(buffer, pre_buffer=False, metadata=md, read_dictionary=sorted(dictionaries))
            return Fetched(buffer, reader, dictionaries)

    if not files:
        return []
    first = open_one(files[0], frozenset())
    expected = common_dictionaries([first.metadata], candidates)
    # named columns cost each reader a map of every column path, built in Python: the first file's positions
    # are given instead, and checked in each file (one laid out in another column order is opened by name)
    where = {c: first.reader().column_name_idx(c) for c in expected}
    rest = map_in_runs(lambda f: open_one(f, expected, where), files[1:], threads if storage.parallel_reads else 1)
    return [first, *rest]


def _at(md: pq.FileMetaData, where: Mapping[str, int]) -> bool:
    """Whether each column of ``where`` is the leaf at its position in the file of footer ``md``."""
    schema = md.schema
    n = md.num_columns
    return all(i < n and schema.column(i).path == name for name, i in where.items())


def partition_constants(metadata: Metadata, readers: Iterable[pq.ParquetReader | pq.ParquetFile | Fetched]
                        ) -> dict[str, pa.Array]:
    """The value of each partition column (:attr:`Layout.constant`) as an array of one row, read from the
    first row of the first of ``readers`` that has one; empty when no reader has a row (nothing to write).

    The value is read from the data, not parsed from the partition's name in the log, so it keeps its
    exact type (a timestamp's time zone and unit, a binary value's bytes).
    """
    if not metadata.partition_by:
        return {}
    for r in readers:
        md = r.metadata
        group = next((i for i in range(md.num_row_groups) if md.row_group(i).num_rows), None)
        if group is None:
            continue
        names = md.schema.names
        missing = [c for c in metadata.partition_by if c not in names]
        if missing:
            raise ValueError(f"data file lacks partition column(s) {', '.join(missing)}")
        if isinstance(r, Fetched):
            r = r.reader()
        if isinstance(r, pq.ParquetReader):
            t = r.read_row_group(group, column_indices=[names.index(c) for c in metadata.partition_by],
                                 use_threads=False)
        else:
            t = r.read_row_group(group, columns=list(metadata.partition_by), use_threads=False)
        return {c: t.column(c).slice(0, 1).combine_chunks() for c in metadata.partition_by}
    return {}


def decoded_bytes(pf: pq.ParquetFile | pq.ParquetReader | Fetched) -> int:
    """The uncompressed size of a Parquet file's row groups, from its footer (a proxy of its Arrow size)."""
    md = pf.metadata
    return sum(md.row_group(i).total_byte_size for i in range(md.num_row_groups))


class TooLargeError(Exception):
    """The decoded inputs outgrew the limit given to :func:`read_all` (they are streamed instead)."""


def read_all(metadata: Metadata, files: Sequence[AddFile], data: Sequence[Fetched], threads: int,
             key_range: KeyRange, limit: float | None = None, dictionaries: Iterable[str] = ()) -> pa.Table:
    """Decode fetched inputs, in the order given, restricted to ``key_range``, the ``dictionaries`` columns
    as dictionary arrays (:func:`unit_dictionaries`).

    Files are decoded in parallel threads. When every input is a level-0 file with the same columns
    (the small-file case), the parts are concatenated as read and the version column, one constant
    per file, is added once for all of them.

    Raises:
        TooLargeError: the decoded parts hold more than ``limit`` bytes of Arrow memory. Footers do not
            tell the Arrow size of every column (a dictionary-encoded string column decodes to far more),
            so the size is measured as the files are decoded, and decoding stops once it is exceeded.
    """
    layout = Layout(metadata, dictionaries)
    keys = list(metadata.primary_key)
    level0 = all(f.kind == "delta" and f.level == 0 for f in files)
    constant = set(layout.constant)
    decoded = [0]
    lock = threading.Lock()

    def read(i: int) -> pa.Table:
        if limit is not None and decoded[0] > limit:
            raise TooLargeError
        f = files[i]
        reader = data[i].reader(layout.dictionaries)
        columns = None if level0 and not constant else [
            reader.column_name_idx(c) for c in layout.present(f, reader.metadata.schema.names)]
        t = reader.read_all(column_indices=columns, use_threads=False).replace_schema_metadata(None)
        with lock:  # a freshly decoded table shares no buffers: their sum is its size (cheaper than
            decoded[0] += t.get_total_buffer_size()  # nbytes, which looks for shared ones)
        t = restrict(t, keys, key_range)
        return t if level0 else layout.unify(with_hidden_columns(t, f))

    if threads > 1 and len(files) > 1:
        with ThreadPoolExecutor(min(threads, len(files))) as pool:
            parts = list(pool.map(read, range(len(files))))
    else:
        parts = [read(i) for i in range(len(files))]
    if limit is not None and decoded[0] > limit:
        raise TooLargeError
    if not level0:
        return pa.concat_tables(parts)
    l0 = layout.level0_schema
    if all(p.schema.equals(l0) for p in parts):
        versions = np.repeat(np.array([f.min_version for f in files], dtype=np.int64), [p.num_rows for p in parts])
        merged = pa.concat_tables(parts).append_column(pa.field(VERSION_COLUMN, pa.int64(), nullable=False),
                                                       pa.array(versions))
        return layout.unify(merged)
    return pa.concat_tables([layout.unify(with_hidden_columns(p, f)) for p, f in zip(parts, files, strict=True)])


# -- streams ------------------------------------------------------------------------------------------------------


@dataclass
class StreamSource:
    """One input to stream, with what a memory plan needs to know about it (the file is opened only when
    it is streamed, so a task with thousands of inputs never holds thousands of open files)."""

    location: str
    """A path for ``filesystem`` (or a local path when ``filesystem`` is None)."""
    filesystem: pafs.FileSystem | None
    metadata: pq.FileMetaData
    columns: list[str] | None
    hidden: AddFile | None
    """The ``add`` whose implicit hidden columns are filled in (None: the file holds them, a spilled run)."""
    row_groups: list[int]
    row_bytes: int
    """Estimated Arrow bytes of one row, hidden columns included."""
    overhead: int
    """Estimated bytes of an open reader: pages, dictionaries and read buffers of the columns read."""
    dictionaries: frozenset[str] = frozenset()
    """The columns read as dictionary arrays (set by the unit once it knows every input's footer)."""

    @property
    def rows(self) -> int:
        return sum(self.metadata.row_group(i).num_rows for i in self.row_groups)

    @property
    def whole_bytes(self) -> int:
        """Estimated memory of its rows read at once (what a small input costs: less than a reader)."""
        return self.rows * self.row_bytes

    def cost(self, buffer_rows: int) -> int:
        """Memory of taking part in a merge: read whole, or a reader plus ``buffer_rows`` buffered rows."""
        return min(self.whole_bytes, self.overhead + int(1.5 * buffer_rows * self.row_bytes))

    def streamed(self, buffer_rows: int) -> bool:
        return self.whole_bytes > self.overhead + 1.5 * buffer_rows * self.row_bytes

    @property
    def spilled(self) -> bool:
        return self.filesystem is None

    def open(self) -> pq.ParquetFile:
        src = self.location if self.filesystem is None else self.filesystem.open_input_file(self.location)
        return pq.ParquetFile(src, metadata=self.metadata, buffer_size=READ_BUFFER, pre_buffer=False,
                              read_dictionary=sorted(self.dictionaries) or None)


def open_source(location: str, filesystem: pafs.FileSystem | None, f: AddFile | None, columns: list[str] | None,
                keys: Sequence[str], key_range: KeyRange, page_bytes: int | None = None,
                optional: frozenset[str] = frozenset()) -> StreamSource:
    """Read a Parquet file's footer for streaming: its row groups in ``key_range`` and its memory figures.
    Of ``columns``, the ``optional`` ones the file lacks are not read (:meth:`Layout.unify` fills them in)."""
    if filesystem is None:
        md = pq.read_metadata(location)
    else:
        with filesystem.open_input_file(location) as fh:
            md = pq.read_metadata(fh)
    index = key_index(md)
    groups = row_groups_in(md, keys, key_range, index)
    if columns is not None and optional:  # a file written before columns were added lacks them (read as nulls)
        have = set(md.schema.names)
        columns = [c for c in columns if c in have or c not in optional]
    names = columns or md.schema.names
    page = page_bytes or (OWN_PAGE if index is not None else DEFAULT_PAGE)
    return StreamSource(location, filesystem, md, columns, f, groups, _row_bytes(md, names),
                        _overhead(md, names, page))


def _row_bytes(md: pq.FileMetaData, names: Sequence[str]) -> int:
    """Estimated Arrow bytes per row of the columns read, from the largest row group's footer.

    A column's uncompressed Parquet size is a fair estimate, except for dictionary-encoded strings,
    whose Arrow form repeats every value: for those the longer of the min and max statistics (plus an
    offset) is used when it says more.
    """
    if md.num_row_groups == 0:
        return 32
    wanted = set(names)
    group = md.row_group(max(range(md.num_row_groups), key=lambda i: md.row_group(i).total_byte_size))
    rows = max(1, group.num_rows)
    total = 24.0  # validity and offsets, and the hidden columns a level-0 file lacks
    for c in range(group.num_columns):
        col = group.column(c)
        if col.path_in_schema not in wanted:
            continue
        per_row = col.total_uncompressed_size / rows
        stats = col.statistics
        if col.physical_type == "BYTE_ARRAY" and stats is not None and stats.has_min_max:
            longest = max(len(str(stats.min).encode()), len(str(stats.max).encode()))
            per_row = max(per_row, longest + 4.0)
        total += per_row
    return int(total * 1.25)


def _overhead(md: pq.FileMetaData, names: Sequence[str], page: int) -> int:
    """Per column read: a page compressed and decoded, or a dictionary, and a read buffer."""
    if md.num_row_groups == 0:
        return 0
    wanted = set(names)
    rg = max(range(md.num_row_groups), key=lambda i: md.row_group(i).total_byte_size)
    group = md.row_group(rg)
    total = 0
    for c in range(group.num_columns):
        col = group.column(c)
        if col.path_in_schema in wanted:
            chunk = col.total_uncompressed_size
            total += 2 * min(chunk, page) + min(chunk, READ_BUFFER)
    return total


def key_index(md: pq.FileMetaData) -> list[Key] | None:
    """The first key of every row group, from the footer of a file maintd wrote (None: not recorded)."""
    raw = (md.metadata or {}).get(KEY_INDEX.encode())
    if raw is None:
        return None
    try:
        keys = [tuple(k) for k in json.loads(raw)]
    except (ValueError, TypeError):
        return None
    return keys if len(keys) == md.num_row_groups else None


def row_groups_in(md: pq.FileMetaData, keys: Sequence[str], r: KeyRange, index: list[Key] | None) -> list[int]:
    """The row groups that may hold keys of ``r``: by the key index, else by the leading key's statistics."""
    groups = list(range(md.num_row_groups))
    if not r.bounded:
        return groups
    if index is not None:  # row group i holds keys from index[i] up to index[i + 1] (inclusive: a key's
        # versions may straddle the boundary), the last one up to the file's end
        ends: list[Key | None] = [*index[1:], None]
        return [i for i in groups
                if (r.hi is None or sort_key(index[i]) < sort_key(r.hi))
                and (r.lo is None or (end := ends[i]) is None or sort_key(end) >= sort_key(r.lo))]
    lead = md.schema.names.index(keys[0]) if keys[0] in md.schema.names else None
    return [i for i in groups if lead is None or _lead_overlaps(md.row_group(i).column(lead).statistics, r)]


def _lead_overlaps(stats: pq.Statistics | None, r: KeyRange) -> bool:
    if stats is None or not stats.has_min_max:
        return True
    lo, hi = key_value(stats.min), key_value(stats.max)
    return (r.hi is None or sort_key((lo,)) <= sort_key(r.hi[:1])) and (
        r.lo is None or sort_key((hi,)) >= sort_key(r.lo[:1]))


def file_stream(src: StreamSource, layout: Layout | None, keys: Sequence[str], batch_rows: int,
                key_range: KeyRange, *, whole: bool = False) -> Iterator[pa.Table]:
    """The rows of ``src`` in ``key_range``, in sorted tables of up to ``batch_rows`` rows (read at once
    when ``whole``: the rows stay in memory until the last of them is merged)."""
    if not src.row_groups:
        return
    pf = src.open()
    if whole:
        rows = pf.read_row_groups(src.row_groups, columns=src.columns, use_threads=False)
        batches: Iterator[Any] = (rows.slice(i, batch_rows) for i in range(0, rows.num_rows, batch_rows))
    else:
        batches = pf.iter_batches(batch_size=batch_rows, row_groups=src.row_groups, columns=src.columns,
                                  use_threads=False)
    for b in batches:
        t = (b if isinstance(b, pa.Table) else pa.Table.from_batches([b])).replace_schema_metadata(None)
        if src.hidden is not None and layout is not None:
            t = layout.unify(with_hidden_columns(t, src.hidden))
        if key_range.hi is not None and t.num_rows and sort_key(key_at(t, keys, 0)) >= sort_key(key_range.hi):
            break
        t = restrict(t, keys, key_range)
        if t.num_rows:
            yield t
