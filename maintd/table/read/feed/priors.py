"""Prior-rows files as the change feed reads them (docs/format.md, "Prior rows"): one group's, each read once.

A compaction unit of a table with ``changes.prior.rows`` stores, for the keys of its DeltaFile rows, the rows
its BaseFiles hold (or a marker: none) and every row version of those keys in its DeltaFiles
(:mod:`maintd.execution.prior`). A clustering of a table with ``changes.prior.rows=lookup`` stores the same for
the DeltaFiles it merged, looked up in the BaseFiles still live. :class:`GroupPriors` answers the strategies'
questions of them:

* **a whole record** (:meth:`GroupPriors.record`, :meth:`GroupPriors.rows`): the files of one compaction that hold
  every row the feed of a group needs (:mod:`maintd.table.read.feed.record`).
* **changed rows** and **DeltaFile rows** (:meth:`GroupPriors.changed_rows`, :meth:`GroupPriors.file_rows`): a
  file not bounded to a key range holds every row of its DeltaFiles, so the changed files it names, and the
  DeltaFiles of either state it names, are not opened. With the BaseFile answers, they may be every row a group
  needs (:meth:`GroupPriors.answered`, :mod:`maintd.table.read.feed.answered`);
* **BaseFile answers** (:meth:`GroupPriors.usable`, :meth:`GroupPriors.base_rows`, :meth:`GroupPriors.listed`):
  for a state in which all BaseFiles of a file are live, its BaseFile rows and markers stand in for reading
  those BaseFiles, for the keys it lists (:mod:`maintd.table.read.feed.keys`).

A clustering's looked-up files are used in every way but as a whole record. A file that cannot be read is not
used (a warning), and the feed reads the data files instead.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from loguru import logger

from maintd.storage import Storage
from maintd.table.files.datafiles import file_schema, rows_with_keys
from maintd.table.files.evolution import added_columns, fill_missing
from maintd.table.files.lazy import lazy_module
from maintd.table.files.schema import OP_COLUMN, OP_DELETE, VERSION_COLUMN
from maintd.table.log.actions import AddFile, Metadata, PriorRows

if TYPE_CHECKING:
    import pyarrow.compute as pc
else:
    pc = lazy_module("pyarrow.compute")  # imported by the first call: see maintd.table.files.lazy


@dataclass(frozen=True)
class Held:
    """The rows of a group's changed files, as prior-rows files hold them (:meth:`GroupPriors.changed_rows`)."""

    rows: pa.Table
    cover: tuple[PriorRows, ...]
    """The files they come from."""


@dataclass(frozen=True)
class _Parts:
    """One prior-rows file as read: the BaseFile rows (markers left out: they stand for no row and carry no
    partition values), the keys it answers for (markers included) and the DeltaFile rows."""

    bases: pa.Table
    listed: pa.Table
    deltas: pa.Table


class GroupPriors:
    """The prior-rows files of one (partition, bucket), each read once (whole: they hold the changed rows only)."""

    def __init__(self, storage: Storage, md: Metadata, priors: Sequence[PriorRows]) -> None:
        self.storage, self.md = storage, md
        self.pk = list(md.primary_key)
        self.priors = priors
        self._read: dict[str, _Parts | None] = {}

    # -- a whole record ------------------------------------------------------------------------------------
    def record(self, changed: Sequence[AddFile], was: set[str], now: set[str]) -> list[PriorRows] | None:
        """The files of one compaction that hold every row the feed needs, or None.

        They do when they are one from every unit of its task (so they hold every DeltaFile row it read), their
        BaseFiles are all live at both versions, and their DeltaFiles include every changed file. The BaseFiles
        live at both versions are theirs, and every DeltaFile row live at either version is in one of their
        DeltaFiles (a row leaves the bucket's DeltaFiles only into a BaseFile, or by an overwrite, which would
        have removed their BaseFiles too). ``changed``: the group's files added or removed by the data-changing
        commits of the range; ``was``, ``now``: the paths of the group's live files at its start and end.
        """
        by_commit: dict[int, list[PriorRows]] = defaultdict(list)
        for p in self.priors:
            if not p.lookup:  # a clustering's answers hold no DeltaFile row, and its DeltaFiles not all the bucket's
                by_commit[p.deletion_time].append(p)
        need = {f.path for f in changed}
        for ps in by_commit.values():
            of = {path for p in ps for path in p.of}
            deltas = {path for p in ps for path in p.deltas}
            if of <= was and of <= now and need <= deltas and _complete(ps) and all(self._parts(p) for p in ps):
                return ps
        return None

    def rows(self, record: Sequence[PriorRows], start: int, end: int) -> pa.Table:
        """Every row ``record`` holds of the keys the writers changed in (start, end]: BaseFile rows and
        DeltaFile rows."""
        parts = [x for p in record if (x := self._parts(p)) is not None]
        deltas = pa.concat_tables([x.deltas for x in parts])
        rows = pa.concat_tables([*(x.bases for x in parts), deltas])
        v = deltas.column(VERSION_COLUMN)
        if not deltas.num_rows or (pc.min(v).as_py() > start and pc.max(v).as_py() <= end):
            return rows  # (start, end] holds every DeltaFile row: every key it answers for changed
        changed = deltas.filter(pc.and_(pc.greater(v, start), pc.less_equal(v, end))).select(self.pk)
        return rows_with_keys(rows, self.pk, changed.group_by(self.pk, use_threads=False).aggregate([]))

    # -- changed rows --------------------------------------------------------------------------------------
    def changed_rows(self, changed: Sequence[AddFile], start: int, end: int) -> Held | None:
        """Every row the group's changed files (``changed``: added or removed by the range's data-changing
        commits) hold, from prior-rows files instead of the files, or None.

        A file not bounded to a key range holds every row of the DeltaFiles it names. If every changed file is
        one of those and was added in (start, end] (none taken away by an overwrite: its rows would be older),
        their rows are exactly those files' rows of versions in (start, end]. Every row of such a version was
        written by a commit of the range into a changed file (and moved, at most, into other DeltaFiles by a
        clustering: the same rows, found once).
        """
        need = {f.path for f in changed}
        if not need or any(f.min_version <= start for f in changed):
            return None
        cover = [p for p in self.priors if _every_row(p) and need & set(p.deltas)]
        if not need <= {path for p in cover for path in p.deltas}:
            return None
        parts = [x.deltas for p in cover if (x := self._parts(p)) is not None]
        if len(parts) < len(cover):
            return None
        rows = _versions(pa.concat_tables(parts), start + 1, end)
        if len(parts) > 1:  # several files may hold the same rows (a clustering of files another had merged)
            numbered = rows.select([*self.pk, VERSION_COLUMN]).append_column(
                "__row", pa.array(np.arange(rows.num_rows, dtype=np.int64)))
            first = numbered.group_by([*self.pk, VERSION_COLUMN], use_threads=False).aggregate([("__row", "min")])
            rows = rows.take(pa.array(np.sort(first.column("__row_min").to_numpy()), pa.int64()))
        return Held(rows, tuple(cover))

    def answered(self, held: Held, was: Sequence[AddFile], now: Sequence[AddFile],
                 need: set[str]) -> pa.Table | None:
        """Every row the group's states need, with ``held``: the BaseFile rows of the changed keys, the changed
        rows, and the rows of those keys in the other DeltaFiles of either state (``was``, ``now``: the group's
        live files). None unless the files that hold ``held`` answer for every BaseFile of both states and
        prior-rows files hold those DeltaFiles (:meth:`file_rows`). A file lists every key of its DeltaFile
        rows, so every changed key. The BaseFiles are the same at both versions, so every DeltaFile row live
        at one that is not newer than the other is live at the other too (it can only have moved between
        DeltaFiles): the states are the newest rows of at most each version
        (:func:`maintd.table.read.feed.base.record_states`)."""
        bases = {f.path for f in was if f.kind == "base"}
        if bases != {f.path for f in now if f.kind == "base"} or any(set(p.of) != bases for p in held.cover):
            return None
        keys = held.rows.select(self.pk)
        others = {f.path: f for f in [*was, *now] if f.kind != "base" and f.path not in need}
        extra = [self.file_rows(f, keys) for f in others.values()]
        if any(t is None for t in extra):
            return None
        found = [x.bases for p in held.cover if (x := self._parts(p)) is not None]
        return pa.concat_tables([rows_with_keys(pa.concat_tables(found), self.pk, keys), held.rows,
                                 *(t for t in extra if t is not None)])

    def file_rows(self, f: AddFile, keys: pa.Table) -> pa.Table | None:
        """The rows of ``keys`` that DeltaFile ``f`` holds, from a prior-rows file that holds all of its rows (one
        not bounded to a key range), or None if none does; with, at most, other rows of its versions.

        Those are rows live wherever ``f`` is: every DeltaFile row of a version in ``f``'s range was written
        after the last compaction before ``f`` was (which took every DeltaFile then live, so ``f`` holds no
        older row), and a compaction after it would have taken ``f`` too.
        """
        for p in self.priors:
            if _every_row(p) and f.path in p.deltas and (x := self._parts(p)) is not None:
                return rows_with_keys(_versions(x.deltas, f.min_version, f.max_version), self.pk, keys)
        return None

    # -- BaseFile answers ----------------------------------------------------------------------------------
    def usable(self, live: set[str]) -> list[PriorRows]:
        """The files whose BaseFiles are all live in a state whose live files are ``live`` (and readable)."""
        return [p for p in self.priors if set(p.of) <= live and self._parts(p) is not None]

    def base_rows(self, usable: Sequence[PriorRows], keys: pa.Table) -> pa.Table | None:
        """The BaseFile rows (markers left out) the ``usable`` files hold for ``keys`` (None: none usable)."""
        found = [x.bases for p in usable if (x := self._parts(p)) is not None]
        return rows_with_keys(pa.concat_tables(found), self.pk, keys) if found else None

    def listed(self, usable: Sequence[PriorRows], path: str, keys: pa.Table) -> pa.Table | None:
        """Those of ``keys`` that the ``usable`` files answer for BaseFile ``path`` (None: none of them does)."""
        found = [x.listed for p in usable if path in p.of and (x := self._parts(p)) is not None]
        if not found:
            return None
        return rows_with_keys(pa.concat_tables(found), self.pk, keys)

    # -- reading -------------------------------------------------------------------------------------------
    def _parts(self, p: PriorRows) -> _Parts | None:
        """The parts of ``p``; None if it cannot be read."""
        if p.path not in self._read:
            self._read[p.path] = self._load(p)
        return self._read[p.path]

    def _load(self, p: PriorRows) -> _Parts | None:
        names = [*self.md.column_names, OP_COLUMN, VERSION_COLUMN]
        added = added_columns(self.md)
        try:
            with self.storage.filesystem.open_input_file(self.storage.full_path(p.path)) as source:
                pf = pq.ParquetFile(source, pre_buffer=self.storage.coalesce_reads)
                have = set(pf.schema_arrow.names)  # written before columns were added: those read as nulls
                t = pf.read(columns=[n for n in names if n in have or n not in added])
        except (pa.ArrowInvalid, OSError, KeyError) as exc:
            logger.warning("table {}: prior-rows file {} cannot be read ({}); the change feed reads the data files "
                           "instead", self.storage.uri, p.path, " ".join(str(exc).split()))
            return None
        t = fill_missing(t.replace_schema_metadata(None), file_schema(self.md, "delta", 1), names)
        older = pc.less_equal(t.column(VERSION_COLUMN), p.below)
        base = t.filter(older)
        return _Parts(bases=base.filter(pc.not_equal(base.column(OP_COLUMN), OP_DELETE)), listed=base.select(self.pk),
                      deltas=t.filter(pc.invert(older)))


def _every_row(p: PriorRows) -> bool:
    """Whether ``p`` holds every row of its DeltaFiles: it is not bounded to a key range (a clustering's
    looked-up file, or a compaction of one unit)."""
    return p.key_lo is None and p.key_hi is None


def _versions(t: pa.Table, lo: int, hi: int) -> pa.Table:
    """The rows of ``t`` of versions ``lo`` to ``hi``, both included."""
    v = t.column(VERSION_COLUMN)
    return t.filter(pc.and_(pc.greater_equal(v, lo), pc.less_equal(v, hi)))


def _complete(ps: Sequence[PriorRows]) -> bool:
    """Whether ``ps`` (of one commit and group) are the files of every unit of one compaction task. Its units'
    key ranges hold every row of its DeltaFiles (a compaction rewrites them all); the ranges they leave out
    are those of BaseFiles it keeps, which hold none of their keys."""
    return len(ps) == ps[0].units and sorted(p.unit for p in ps) == list(range(ps[0].units))


__all__ = ["GroupPriors", "Held"]
