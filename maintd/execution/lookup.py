"""Looked-up prior rows: what a clustering stores for the change feed in ``changes.prior.rows=lookup`` tables.

Compactions are rare, so until the next one the feed over the newest commits would decode the BaseFiles of
every changed bucket. A clustering of such a table therefore also looks the keys of the DeltaFiles it merges up
in the bucket's live BaseFiles, once, and stores what it finds. It stores the BaseFile row of each key, or a
marker (the key, ``_maintd_op`` = delete, version 0) when they hold none, and every row it merges. It is Paimon's
``lookup`` changelog producer, run by maintenance rather than by the writer, so writers pay nothing.

The file (a ``prior`` action with ``lookup`` set, feature ``lookedUpPriorRows``) answers for BaseFiles that
stay live (:mod:`maintd.table.read.feed.priors`). Its content depends only on files that never change, so it is
right whether or not its commit lands; the commit conflicts with a concurrent removal of any of its BaseFiles.

The clustering's chunks are written as they pass and their keys kept (one copy of the key columns,
deduplicated per chunk). At the end each BaseFile whose key range holds one of them is read, only the row
groups whose key statistics enclose one, and the rows of those keys kept.

docs/format.md ("Looked-up prior rows") specifies the file and its lifetime.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from maintd.execution.prior import PriorWriter, markers
from maintd.execution.specs import TaskSpec
from maintd.storage import Storage
from maintd.table.files.datafiles import read_rows_of_keys, rows_with_keys
from maintd.table.files.dictionaries import conform
from maintd.table.log.actions import PriorRows


class LookupWriter(PriorWriter):
    """The looked-up prior-rows file of one clustering unit: fed the unit's chunks (every row a DeltaFile row
    of a version above the BaseFiles'), it looks their keys up when closed."""

    def __init__(self, storage: Storage, spec: TaskSpec, schema: pa.Schema, *, row_group_rows: int, attempt: int,
                 durable: bool) -> None:
        super().__init__(storage, spec, schema, row_group_rows=row_group_rows, attempt=attempt, durable=durable)
        lookup = spec.lookup
        self.bases = lookup.bases if lookup is not None else ()
        self.of = tuple(f.path for f in self.bases)
        self.below = lookup.below if lookup is not None else 0
        self.deltas = tuple(f.path for f in spec.inputs)
        self.enabled = (spec.kind == "cluster" and bool(self.bases) and bool(self.deltas)
                        and all(self.below < f.min_version for f in spec.inputs))
        self.key_schema = pa.schema([self.schema.field(k) for k in self.keys])
        self._keys: list[pa.Table] = []

    def take(self, chunk: pa.Table) -> None:
        """Write the rows of ``chunk`` (every one a DeltaFile row of a key it changed) and keep its keys (each
        once). The feed takes the changed rows from the file rather than from the many DeltaFiles."""
        if not self.enabled or chunk.num_rows == 0:
            return
        rows = conform(chunk.select(self.row_schema.names), self.row_schema)
        self.delta_count += rows.num_rows
        for start in range(0, rows.num_rows, self.row_group_rows):
            self._write(rows.slice(start, self.row_group_rows))
        keys = conform(chunk.select(self.keys), self.key_schema)
        self._keys.append(keys.group_by(self.keys, use_threads=False).aggregate([]))

    def close(self) -> PriorRows | None:
        """Look the keys up in the BaseFiles, write what they hold (and markers) and describe the file; None if
        the unit stores none."""
        if not self.enabled:
            return None
        keys = self._unique_keys()
        self._keys = []
        found = [read_rows_of_keys(self.storage, self.spec.metadata, f, keys) for f in self.bases]
        rows = pa.concat_tables([conform(t.select(self.row_schema.names), self.row_schema) for t in found])
        if rows.num_rows:
            order = pc.sort_indices(rows, sort_keys=[(k, "ascending") for k in self.keys])
            rows = rows.take(order)
        missing = rows_with_keys(keys, self.keys, rows.select(self.keys), keep=False)
        self.key_count, self.row_count = keys.num_rows, rows.num_rows
        for start in range(0, rows.num_rows, self.row_group_rows):
            self._write(rows.slice(start, self.row_group_rows))
        if missing.num_rows:
            self._write(markers(missing, self.row_schema), markers=True)
        written = super().close()
        return written.model_copy(update={"lookup": True}) if written is not None else None

    def _unique_keys(self) -> pa.Table:
        if not self._keys:
            return self.key_schema.empty_table()
        return pa.concat_tables(self._keys).group_by(self.keys, use_threads=False).aggregate([])

    def discard(self) -> None:
        self._keys = []
        super().discard()


def prior_writer(storage: Storage, spec: TaskSpec, schema: pa.Schema, *, row_group_rows: int, attempt: int,
                 durable: bool) -> PriorWriter:
    """The writer of a unit's prior rows: a compaction's, or a clustering's looked-up ones."""
    cls = LookupWriter if spec.lookup is not None and spec.kind == "cluster" else PriorWriter
    return cls(storage, spec, schema, row_group_rows=row_group_rows, attempt=attempt, durable=durable)


__all__ = ["LookupWriter", "prior_writer"]
