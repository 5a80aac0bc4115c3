"""Prior rows: what a compaction unit stores, beside its BaseFiles, for the change feed.

The change feed of (a, b] needs, for every key a commit in between wrote, the key's row at ``a`` and at ``b``;
in BaseFiles, reading those few rows costs a decode of the whole bucket. A compaction has exactly those rows at
hand. So, in tables with ``changes.prior.rows``, each compaction unit also writes a *prior-rows file*. For every
key of its DeltaFile rows, the row its BaseFiles hold for that key, or a marker (the key, ``_maintd_op`` =
delete, version 0) when they hold none, and every row version of the key in its DeltaFiles. The feed then reads
that one file instead (:mod:`maintd.table.read.feed`).

The file is an answer about the BaseFiles' content, which never changes, so it is right whether or not its
commit lands; its commit names it (a ``prior`` action, feature ``priorRows``) so that reclamation deletes it with
its BaseFiles. A unit that merges through spilled runs keeps every row version in its runs
(:mod:`maintd.execution.rewrite`), so its last pass tells BaseFile and DeltaFile rows apart.

docs/format.md ("Prior rows") specifies the file and how the feed uses it; docs/design.md ("Prior rows") why.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from maintd.execution.inputs import constant_columns
from maintd.execution.output import OutputFile, file_unique, output_options
from maintd.execution.specs import TaskSpec
from maintd.storage import Storage
from maintd.table.files.datafiles import prior_file_path
from maintd.table.files.dictionaries import conform, dictionary_types
from maintd.table.files.schema import OP_COLUMN, OP_DELETE, VERSION_COLUMN
from maintd.table.log.actions import PriorRows

PRIOR_PREFIX = "prior-"
"""How prior-rows file names start; the unit's token follows, as in its data files' names."""


class PriorWriter:
    """The prior-rows file of one compaction unit, fed the unit's unmerged chunks as they pass.

    ``below``: the greatest version any of the unit's BaseFiles holds; every DeltaFile row is newer (a
    compaction takes every DeltaFile of its bucket). Every unit of a task that reads BaseFiles and DeltaFiles
    (``spec.prior_rows``) writes a file, even one whose key range holds none of the task's BaseFiles or none of
    its DeltaFiles. It then answers for what its task names (:class:`~maintd.execution.specs.TaskPriors`), so
    that the feed can use the task's files as a whole record. A unit whose versions do not separate so writes
    nothing.
    """

    def __init__(self, storage: Storage, spec: TaskSpec, schema: pa.Schema, *, row_group_rows: int, attempt: int,
                 durable: bool) -> None:
        self.storage = storage
        self.spec = spec
        self.keys = list(spec.metadata.primary_key)
        fixed = {*self.keys, OP_COLUMN, VERSION_COLUMN}  # a marker's other columns, partition ones too, are null
        self.schema = pa.schema([f if f.name in fixed else f.with_nullable(True) for f in schema])
        self.constant = constant_columns(spec.metadata)
        """Columns the unit's chunks lack (:class:`maintd.execution.inputs.Layout`): written as constants."""
        self.values: dict[str, pa.Array] = {}
        self.row_schema = pa.schema([f for f in self.schema if f.name not in self.constant])
        self.row_group_rows = max(1, row_group_rows)
        self.attempt = attempt
        self.durable = durable
        bases = [f for f in spec.inputs if f.kind == "base"]
        deltas = [f for f in spec.inputs if f.kind != "base"]
        task = spec.task_priors  # what the unit answers for where its own key range holds no such file
        self.of: tuple[str, ...] = ()
        self.below = 0
        if bases:
            self.of, self.below = tuple(f.path for f in bases), max(f.max_version for f in bases)
        elif task is not None:
            self.of, self.below = task.bases, task.below
        self.deltas = tuple(f.path for f in deltas) or ((task.delta,) if task is not None else ())
        self.enabled = (spec.prior_rows and spec.kind == "compact" and bool(self.of) and bool(self.deltas)
                        and all(self.below < f.min_version for f in deltas))
        self.file: OutputFile | None = None
        self.key_count = 0
        self.row_count = 0
        self.delta_count = 0

    def set_constants(self, values: Mapping[str, pa.Array]) -> None:
        """The value of each partition column, for the rows taken (markers hold null)."""
        self.values = {c: values[c] for c in self.constant if c in values}

    def take(self, chunk: pa.Table) -> None:
        """Record the rows of the keys of ``chunk``'s DeltaFile rows (a chunk holds every row of its keys).

        The rows are gathered from the chunk once, in (key, version) order (found on the key and version
        columns alone), and written before the merge copies the chunk: one copy of at most the chunk's rows,
        freed before the merge's own, so the unit's peak memory stays the merge's. A chunk's markers, keys
        only, follow them in their own row group.
        """
        if not self.enabled or chunk.num_rows == 0:
            return
        newer = pc.greater(chunk.column(VERSION_COLUMN), self.below)
        if not pc.any(newer).as_py():
            return
        held, missing = self._split(chunk, newer)
        wanted = pa.concat_arrays([held, pc.indices_nonzero(newer).cast(pa.int64())])
        keyed = chunk.select([*self.keys, VERSION_COLUMN]).take(wanted)
        order = pc.sort_indices(keyed, sort_keys=[*((k, "ascending") for k in self.keys),
                                                  (VERSION_COLUMN, "ascending")])
        rows = conform(chunk.take(wanted.take(order)).select(self.row_schema.names), self.row_schema)
        self.key_count += len(held) + missing.num_rows
        self.row_count += len(held)
        self.delta_count += rows.num_rows - len(held)
        for start in range(0, rows.num_rows, self.row_group_rows):
            self._write(rows.slice(start, self.row_group_rows))
        if missing.num_rows:
            self._write(markers(missing, self.row_schema), markers=True)

    def _split(self, chunk: pa.Table, newer: pa.ChunkedArray | pa.Array) -> tuple[pa.Array, pa.Table]:
        """(the indices of the BaseFile rows of the keys DeltaFile rows hold, those keys no BaseFile row holds)."""
        older = pc.invert(newer)
        if len(self.keys) == 1:
            k = self.keys[0]
            column = chunk.column(k)
            changed = pc.unique(column.filter(newer))
            held = pc.indices_nonzero(pc.and_(older, pc.is_in(column, value_set=changed)))
            absent = changed.filter(pc.invert(pc.is_in(changed, value_set=column.take(held))))
            return held.cast(pa.int64()), pa.table({k: absent})
        keyed = chunk.select(self.keys)
        changed = keyed.filter(newer).group_by(self.keys, use_threads=False).aggregate([])
        rows = keyed.append_column("__row", pa.array(np.arange(chunk.num_rows, dtype=np.int64))).filter(older)
        semi = rows.join(changed, keys=self.keys, join_type="left semi", use_threads=False)
        held = pa.array(np.sort(semi.column("__row").to_numpy()), pa.int64())
        absent = changed.join(keyed.take(held), keys=self.keys, join_type="left anti", use_threads=False)
        return held, absent

    def _write(self, group: pa.Table, *, markers: bool = False) -> None:
        """Write ``group`` (the columns of :attr:`row_schema`) as a row group, with the partition columns'
        values (null in ``markers``)."""
        if self.file is None:
            if len(self.values) < len(self.constant):
                raise RuntimeError("prior rows to write before the partition columns' values were set")
            self._open()
        assert self.file is not None
        self.file.write_group(group, self.keys, count_deletes=False, null_constants=markers)

    def _open(self) -> None:
        s = self.spec
        path = prior_file_path(s.metadata, s.partition, s.bucket, unique=file_unique(s.token, self.attempt))
        options = output_options(self.schema, "delta", 1, [*s.metadata.partition_by, *self.keys], self.constant)
        text = dictionary_types(self.schema, [*self.constant, *self.keys])
        self.file = OutputFile(self.storage, path, self.schema, options, self.values, text)

    def close(self) -> PriorRows | None:
        """Finish the file and describe it (None: the unit stores none). A unit whose range holds no DeltaFile
        row writes an empty file all the same: the feed knows a compaction's files complete when every unit
        of its task wrote one."""
        if not self.enabled:
            return None
        if self.file is None:
            self._open()
        assert self.file is not None
        size = self.file.close(durable=self.durable)
        s = self.spec
        return PriorRows(path=self.file.path, of=self.of, deltas=self.deltas, partition=dict(s.partition),
                         bucket=s.bucket, key_lo=s.key_lo, key_hi=s.key_hi, unit=s.unit, units=s.units,
                         below=self.below, keys=self.key_count,
                         rows=self.row_count, delta_rows=self.delta_count, bytes=size)

    def discard(self) -> None:
        """Delete the file (a failed unit)."""
        if self.file is not None:
            self.file.abort()
            with contextlib.suppress(Exception):
                self.storage.delete(self.file.path)
        self.file = None
        self.key_count = self.row_count = self.delta_count = 0


def markers(keys: pa.Table, schema: pa.Schema) -> pa.Table:
    """One row per key of ``keys``: the key, ``_maintd_op`` = delete, version 0, every other column null."""
    n = keys.num_rows
    cols: list[pa.Array | pa.ChunkedArray] = []
    for field in schema:
        if field.name in keys.column_names:
            cols.append(keys.column(field.name).cast(field.type))
        elif field.name == OP_COLUMN:
            cols.append(pa.repeat(pa.scalar(OP_DELETE, field.type), n))
        elif field.name == VERSION_COLUMN:
            cols.append(pa.repeat(pa.scalar(0, field.type), n))
        else:
            cols.append(pa.nulls(n, field.type))
    return pa.Table.from_arrays(cols, schema=schema)

