"""The files a unit writes: one DeltaFile (clustering), or BaseFiles of a target size (compaction).

Rows arrive in key order, chunk by chunk, and are written in row groups of a bounded size. A
compaction closes its current BaseFile once it holds ``target_file_bytes`` and goes on in a new one:
a BaseFile has one row per key, so every row boundary is a key boundary and the files of one unit hold
disjoint, consecutive key ranges. A clustering output keeps every version of the keys it holds and
stays one file (its version range is what clustering's contiguity rule is about).

Every file records the first key of each row group in its footer (``maintd.key_index``), so a later
task reading one key range of it skips the other row groups, and the driver can split a large bucket
into key ranges without reading any rows. Pages are small (128 KiB), so a file streamed later costs
its reader little memory per column.

A file's name starts with the unit's token and carries the Spark attempt number
(``<kind>-<token><attempt><random>.parquet``): every attempt writes under its own names, and the
driver can find what a failed attempt left behind.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from maintd.execution.inputs import KEY_INDEX, OWN_PAGE, constant_columns
from maintd.execution.merge import key_at
from maintd.execution.specs import TaskSpec
from maintd.storage import Storage
from maintd.table.files.codecs import without_futile_compression
from maintd.table.files.datafiles import (
    WRITE_OPTIONS,
    data_file_path,
    file_schema,
    packed_options,
    stats_columns,
    text_columns,
)
from maintd.table.files.dictionaries import (
    DICTIONARY_PAGE_LIMIT,
    arrow_schema_metadata,
    conform,
    dictionary_schema,
    dictionary_types,
    encode_text,
    footer_entries,
    with_dictionaries,
)
from maintd.table.files.keys import Key
from maintd.table.files.schema import OP_COLUMN, OP_DELETE
from maintd.table.log.actions import AddFile, FileKind

OUTPUT_OPTIONS: dict[str, Any] = {**WRITE_OPTIONS, "dictionary_pagesize_limit": DICTIONARY_PAGE_LIMIT,
                                   "data_page_size": OWN_PAGE}
"""Parquet options of merge outputs: the format's (zstd 1, statistics), a 64 KiB dictionary page limit (a
high-cardinality column falls back to plain encoding early instead of hashing 1 MiB of values first:
faster, and smaller files after zstd) and 128 KiB data pages (cheap to stream)."""


def output_options(schema: pa.Schema, kind: FileKind, level: int | None, key_columns: Sequence[str],
                   constant: Sequence[str] = ()) -> dict[str, Any]:
    """:data:`OUTPUT_OPTIONS` for an output file of ``kind`` and ``level``.

    * DeltaFiles keep statistics of their key and hidden columns only: no reader may prune a DeltaFile on
      another column, since a newer version of a key in another file can hide the matching row.
    * A level-1 DeltaFile is rewritten soon, so it is written as level-0 files are (per-level compression):
      LZ4, dictionaries for string, binary and ``constant`` columns only, integer key and hidden columns
      packed (:func:`maintd.table.files.datafiles.delta_coded`).
    * ``constant`` columns (the partition columns, :class:`Outputs`) are dictionary arrays of one value,
      stored as given at every level.
    * Level-2 DeltaFiles keep zstd; BaseFiles, long-lived, keep every column's statistics and zstd.

    docs/design.md ("Data file encoding") gives the reasons.
    """
    if kind == "base":
        return OUTPUT_OPTIONS
    options = {**OUTPUT_OPTIONS, "write_statistics": stats_columns(schema, key_columns)}
    if level == 1:
        options = {k: v for k, v in options.items() if k != "compression_level"} | packed_options(
            schema, key_columns, constant) | {"use_dictionary": [*dict.fromkeys([*text_columns(schema), *constant])]}
    return options


WRITE_BUFFER = 1 << 20
"""Bytes an output file's writes gather in before they reach storage: the Parquet writer writes every page's
header and its data apart, a few hundred small writes per file, each a system call on a local disk."""
def without_rejected_text(schema: pa.Schema, rejected: Sequence[str]) -> bool | list[str]:
    """The ``use_dictionary`` option of a file whose other columns all may be dictionary-encoded, but not the
    ``rejected`` text columns, which :func:`encode_text` found mostly distinct: left to the writer, each would be
    hashed into a dictionary until that outgrew its page limit, then written plain anyway. True (every column)
    when none is rejected, or when ``schema`` has nested columns, whose leaves the option would have to name."""
    if not rejected or any(pa.types.is_nested(f.type) for f in schema):
        return True
    skip = set(rejected)
    return [f.name for f in schema if f.name not in skip]


def file_unique(token: str, attempt: int) -> str:
    """The 32 hex digits of an output file name: the unit's token, the attempt number, 12 random digits."""
    return f"{token}{min(attempt, 0xFFFF):04x}{secrets.token_hex(6)}"


def name_prefix(kind: FileKind, level: int | None, token: str) -> str:
    """How the names of a unit's files start (below its bucket directory), whatever the attempt."""
    return f"{'base' if kind == 'base' else f'delta-L{level}'}-{token}"


def constant_column(value: pa.Array, rows: int) -> pa.DictionaryArray:
    """``rows`` rows of the one value of ``value`` (an array of one row; null or not), dictionary-encoded.

    The Parquet writer stores a dictionary array's dictionary and indices as they are: a constant column
    costs it nothing, where a plain one is hashed value by value.
    """
    if value.null_count:  # null indices into an empty dictionary (the writer takes no null in a dictionary)
        return pa.DictionaryArray.from_arrays(pa.nulls(rows, pa.int32()), value.slice(0, 0))
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(rows, np.int32)), value)


def with_constants(t: pa.Table, schema: pa.Schema, values: Mapping[str, pa.Array | None]) -> pa.Table:
    """``t`` (the other columns of ``schema``) with the columns named in ``values`` added, each a
    :func:`constant_column` (null where the value is None), in ``schema``'s order, as :func:`writer_schema`
    types them (the other columns keep their type: a dictionary column stays one)."""
    n = t.num_rows
    cols = [constant_column(v if (v := values[f.name]) is not None else pa.nulls(1, f.type), n)
            if f.name in values else t.column(f.name) for f in schema]
    fields = [f if f.name in values else f.with_type(t.schema.field(f.name).type)
              for f in writer_schema(schema, values)]
    return pa.Table.from_arrays(cols, schema=pa.schema(fields, metadata=schema.metadata))


def writer_schema(schema: pa.Schema, constant: Sequence[str] | Mapping[str, Any]) -> pa.Schema:
    """``schema`` with the ``constant`` columns dictionary-typed (the type :class:`OutputFile` writes)."""
    return pa.schema([pa.field(f.name, pa.dictionary(pa.int32(), f.type), f.nullable, f.metadata)
                      if f.name in constant else f for f in schema], metadata=schema.metadata)


class OutputFile:
    """One output file being written.

    ``constants``: the value (an array of one row) of each column of ``schema`` that holds one value in
    every row, the partition columns of a unit: the row groups given to :meth:`write_group` lack them, and
    each is written as a :func:`constant_column` (:func:`with_constants`).

    ``text``: the string and binary value columns that may be written as dictionaries
    (:mod:`maintd.table.files.dictionaries`); the first row group decides which (:func:`encode_text`), and the
    footer lists those whose every row group was.

    The file is written from its writer schema (constants and chosen text columns dictionary-typed) and its
    footer says ``schema`` (:func:`arrow_schema_metadata`): readers cannot tell it from a file written from
    ``schema`` itself.
    """

    def __init__(self, storage: Storage, path: str, schema: pa.Schema, options: dict[str, Any],
                 constants: Mapping[str, pa.Array] | None = None, text: Sequence[str] = ()) -> None:
        self.path = path
        self.storage = storage
        storage.makedirs(path.rsplit("/", 1)[0])
        self.sink = storage.filesystem.open_output_stream(storage.full_path(path), buffer_size=WRITE_BUFFER)
        self.schema = schema
        self.options = options
        self.constants = dict(constants or {})
        self.text = [c for c in text if c not in self.constants]
        self.writer: pq.ParquetWriter | None = None
        self.chosen: list[str] = []
        """The text columns written as dictionaries (decided by the first row group)."""
        self.flagged: set[str] = set()
        """Those of :attr:`chosen` whose every row group so far was dictionary-encoded throughout."""
        self.rows = 0
        self.deletes = 0
        self.index: list[Key] = []
        self.first: Key | None = None
        self.last: Key | None = None

    def write_group(self, t: pa.Table, keys: Sequence[str], count_deletes: bool, *, null_constants: bool = False
                    ) -> None:
        """Write ``t`` as a row group, its constant columns added (null ones when ``null_constants``)."""
        if self.constants:
            t = with_constants(t, self.schema, {c: None if null_constants else v for c, v in self.constants.items()})
        # the first row group decides which text columns are dictionaries: later ones encode only those (the
        # others' encodings would be thrown away, and sampling every plain column of every row group is a hash
        # of thousands of strings each)
        encoded = {c: encode_text(t.column(c)) for c in (self.text if self.writer is None else self.chosen)}
        if self.writer is None:
            self._open([c for c in self.text if encoded[c] is not None], t)
        assert self.writer is not None
        self.writer.write_table(self._as_written(t, encoded), row_group_size=t.num_rows)
        first = key_at(t, keys, 0)
        self.index.append(first)
        self.first = self.first or first
        self.last = key_at(t, keys, t.num_rows - 1)
        self.rows += t.num_rows
        if count_deletes:
            self.deletes += int(pc.sum(pc.equal(t.column(OP_COLUMN), OP_DELETE)).as_py() or 0)

    def _open(self, chosen: list[str], first: pa.Table | None = None) -> None:
        self.chosen = chosen
        self.flagged = set(chosen)
        options = dict(self.options)
        written = dictionary_schema(writer_schema(self.schema, self.constants), chosen)
        if isinstance(options.get("use_dictionary"), list):  # only the columns that are dictionaries
            options["use_dictionary"] = [c for c in options["use_dictionary"] if c not in self.text] + chosen
        elif options.get("use_dictionary", True):
            options["use_dictionary"] = without_rejected_text(written, [c for c in self.text if c not in chosen])
        if first is not None:
            options = without_futile_compression(options, first, {*chosen, *self.constants})
        if written.equals(self.schema):
            self.writer = pq.ParquetWriter(self.sink, self.schema, **options)
        else:
            self.writer = pq.ParquetWriter(self.sink, written, **options, store_schema=False)

    def _as_written(self, t: pa.Table, encoded: Mapping[str, pa.DictionaryArray | None]) -> pa.Table:
        """``t`` with its text columns as the writer schema types them. A chosen column whose dictionary does not
        fit this row group is given whole (the Parquet writer then falls back to plain pages part way, and the
        column is no longer listed in the footer), another text column as plain values."""
        for c in self.text:
            col = t.column(c)
            if c in self.chosen:
                arr = encoded[c]
                if arr is None:
                    self.flagged.discard(c)
                    arr = pc.dictionary_encode(col) if not pa.types.is_dictionary(col.type) else col
                t = with_dictionaries(t, {c: arr})
            elif pa.types.is_dictionary(col.type):
                t = t.set_column(t.schema.get_field_index(c), self.schema.field(c), col.cast(self.schema.field(c).type))
        return t

    @property
    def size(self) -> int:
        return int(self.sink.tell())

    def close(self, *, durable: bool) -> int:
        if self.writer is None:  # no row group: a file of the schema alone
            self._open([])
        assert self.writer is not None
        footer: dict[bytes, bytes] = {}
        if self.constants or self.chosen:
            footer = footer_entries(self.schema, sorted(self.flagged)) if self.flagged else arrow_schema_metadata(
                self.schema)
        self.writer.add_key_value_metadata({**footer, KEY_INDEX.encode(): json.dumps(self.index).encode()})
        self.writer.close()
        size = self.size
        self.sink.close()
        if durable:  # on disk before a commit names it (a no-op on object stores)
            self.storage.make_durable(self.path)
        return size

    def abort(self) -> None:
        with contextlib.suppress(Exception):
            if self.writer is not None:
                self.writer.close()
        with contextlib.suppress(Exception):
            self.sink.close()


class Outputs:
    """The output files of one unit, written row group by row group (chunks arrive in key order)."""

    def __init__(self, storage: Storage, spec: TaskSpec, *, row_group_rows: int, attempt: int = 0,
                 durable: bool = True) -> None:
        self.storage = storage
        self.durable = durable
        """Sync each file as it is finished; False leaves it to the caller (:meth:`Storage.make_durable_many`
        over the files of several units, before any of their results is reported)."""
        self.spec = spec
        self.kind: FileKind = "base" if spec.kind == "compact" else "delta"
        self.level = None if self.kind == "base" else spec.target_level
        self.schema = file_schema(spec.metadata, self.kind, self.level)
        self.options = output_options(self.schema, self.kind, self.level,
                                      [*spec.metadata.partition_by, *spec.metadata.primary_key],
                                      constant_columns(spec.metadata))
        self.keys = list(spec.metadata.primary_key)
        self.constant = constant_columns(spec.metadata)
        """The partition columns outside the primary key: one value in every row of a unit, which :meth:`write`
        does not take (the unit's rows lack them, :class:`maintd.execution.inputs.Layout`) and each row group is
        given as a :func:`constant_column` of the value set by :meth:`set_constants`."""
        self.values: dict[str, pa.Array] | None = None if self.constant else {}
        self.row_schema = pa.schema([f for f in self.schema if f.name not in self.constant])
        self.text = dictionary_types(self.schema, [*self.constant, *self.keys])
        """The columns that may be written as dictionaries (:class:`OutputFile`)."""
        self.row_group_rows = max(1, row_group_rows)
        self.attempt = attempt
        self.target = spec.target_file_bytes if self.kind == "base" else None
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._current: OutputFile | None = None
        self._done: list[tuple[OutputFile, int]] = []

    @property
    def paths(self) -> list[str]:
        """Every file this unit has started, finished or not."""
        return [f.path for f, _ in self._done] + ([self._current.path] if self._current else [])

    def set_constants(self, values: Mapping[str, pa.Array]) -> None:
        """The value of each partition column (:func:`maintd.execution.inputs.partition_constants`)."""
        missing = [c for c in self.constant if c not in values]
        if missing:
            raise ValueError(f"no value for partition column(s) {', '.join(missing)}")
        self.values = {c: values[c] for c in self.constant}

    def write(self, t: pa.Table) -> None:
        """Append rows (sorted, all keys above those written before) of every column but the partition ones."""
        if t.num_rows == 0:
            return
        t = conform(t.select(self.row_schema.names), self.row_schema)
        self._pending.append(t)
        self._pending_rows += t.num_rows
        if self._pending_rows >= self.row_group_rows:
            self._flush(final=False)

    def flush(self) -> None:
        """Write the rows gathered so far as a row group now (a file exists on storage afterwards)."""
        if self._pending:
            self._flush(final=True)

    def _flush(self, *, final: bool) -> None:
        data = pa.concat_tables(self._pending) if len(self._pending) > 1 else self._pending[0]
        start = 0
        while data.num_rows - start >= self.row_group_rows or (final and start < data.num_rows):
            group = data.slice(start, min(self.row_group_rows, data.num_rows - start))
            self._write_group(group)
            start += group.num_rows
        rest = data.slice(start)
        self._pending, self._pending_rows = ([rest], rest.num_rows) if rest.num_rows else ([], 0)

    def _write_group(self, group: pa.Table) -> None:
        if self._current is None:
            s = self.spec
            path = data_file_path(s.metadata, s.partition, s.bucket, self.kind, self.level,
                                  unique=file_unique(s.token, self.attempt))
            if self.values is None:
                raise RuntimeError("rows to write before the partition columns' values were set")
            self._current = OutputFile(self.storage, path, self.schema, self.options, self.values, self.text)
        self._current.write_group(group, self.keys, self.kind == "delta")
        if self.target is not None and self._current.size >= self.target:
            self._finish_current()

    def _finish_current(self) -> None:
        assert self._current is not None
        size = self._current.close(durable=self.durable)
        self._done.append((self._current, size))
        self._current = None

    def close(self) -> tuple[AddFile, ...]:
        """Finish every file and describe them; no file when no row survived (the inputs go all the same)."""
        self.flush()
        if self._current is not None:
            self._finish_current()
        return tuple(self._add(f, size) for f, size in self._done)

    def _add(self, f: OutputFile, size: int) -> AddFile:
        s, ins = self.spec, self.spec.inputs
        return AddFile(path=f.path, partition=dict(s.partition), bucket=s.bucket, kind=self.kind, level=self.level,
                       rows=f.rows, bytes=size, min_version=min(i.min_version for i in ins),
                       max_version=max(i.max_version for i in ins),
                       min_commit_time=min(i.min_commit_time for i in ins),
                       max_commit_time=max(i.max_commit_time for i in ins), delete_rows=f.deletes,
                       key_min=f.first, key_max=f.last, data_change=False)

    def discard(self) -> None:
        """Delete every file of this unit (a failed attempt)."""
        if self._current is not None:
            self._current.abort()
        for path in self.paths:
            with contextlib.suppress(Exception):
                self.storage.delete(path)
        self._current, self._done = None, []
