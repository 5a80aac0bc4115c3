"""Primary keys as the log stores them: their one order, key ranges, and splitting a bucket into ranges.

Every data file is sorted by primary key (Arrow's ascending sort of the key columns) and its ``add`` action
records the first and the last key (``key_min``/``key_max``) as JSON scalars. Integers and booleans are written
as they are, strings as they are, binary as lowercase hex, dates and timestamps as ISO text (:func:`key_value`;
:func:`column_value` turns them back into values of the column's type). :func:`sort_key` orders keys in
that form exactly as Arrow's sort orders the key columns, for every key type, so nothing here opens a file.

A :class:`KeyRange` is the keys ``lo <= key < hi`` (whole keys or key prefixes: a prefix sorts before every
key that starts with it). Every version of one key lies in one range, so the "greatest version wins" merge
is exact per range. A bucket is cut into ranges two ways:

* :func:`split_key_ranges`, for maintenance: consecutive whole-key ranges of about a size, cut where
  BaseFiles and row groups start, never across a *fence* (a file the rewrite keeps). Each range is
  rewritten by a task of its own.
* :func:`split_lead_ranges`, for scans: ranges of the leading key column only, cut where files start, so
  that a reader pushes the range down to Parquet as a filter on one column (:mod:`maintd.table.read.scan`).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa

from maintd.table.files.schema import TYPES
from maintd.table.log.actions import AddFile, KeyValue, Metadata

Key = tuple[KeyValue, ...]
"""A primary key (or a prefix of one) as stored in ``key_min``/``key_max``."""
Point = tuple[Key, int]
"""A key inside a file and the bytes of the file from that key to the next point (or the file's end)."""


# -- representation ----------------------------------------------------------------------------------------------


def key_value(v: Any) -> KeyValue:
    """One key column value as stored in the log: JSON scalars as they are, binary as hex, others as text."""
    if isinstance(v, int | float | str | bool) or v is None:
        return v
    if isinstance(v, bytes):
        return v.hex()
    return str(v)


def column_value(v: KeyValue, typ: pa.DataType) -> Any:
    """A stored key value (:func:`key_value`) as a Python value of the column's Arrow type (None stays None)."""
    if v is None:
        return None
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
        return bytes.fromhex(v) if isinstance(v, str) else v
    if isinstance(v, str) and not (pa.types.is_string(typ) or pa.types.is_large_string(typ)):
        return pa.scalar(v).cast(typ).as_py()
    return v


def lead_type(metadata: Metadata) -> pa.DataType:
    """The Arrow type of the leading primary-key column (the one scan ranges and filter bounds speak of)."""
    types = {f.name: f.type for f in metadata.fields}
    return TYPES[types[metadata.primary_key[0]]]


# -- the order ---------------------------------------------------------------------------------------------------

_NAN = (2, 0)
_NULL = (4, 0)


def value_order(v: KeyValue) -> tuple[int, Any]:
    """One stored key value as a sortable pair: the order of Arrow's ascending sort of its column.

    Within a column's type: as the values compare (numbers, False before True, text by code point,
    which is UTF-8 byte order, binary hex and ISO dates and timestamps as their values), NaN after
    every number, null last. Across types (never within one column) an arbitrary fixed rank, so the
    order is total: booleans, numbers, NaN, text, null.
    """
    if v is None:
        return _NULL
    if isinstance(v, str):
        return (3, v)
    if isinstance(v, bool):
        return (0, v)
    if v != v:
        return _NAN
    return (1, v)


def sort_key(key: Key) -> tuple[tuple[int, Any], ...]:
    """``key`` as a tuple that sorts as Arrow sorts the key columns (:func:`value_order`); a prefix of a
    key sorts before every key that starts with it."""
    return tuple(value_order(v) for v in key)


def overlaps(a_min: Key | None, a_max: Key | None, b_min: Key | None, b_max: Key | None) -> bool:
    """Whether two inclusive key intervals overlap (an unknown bound overlaps everything)."""
    if a_min is None or a_max is None or b_min is None or b_max is None:
        return True
    return sort_key(a_min) <= sort_key(b_max) and sort_key(b_min) <= sort_key(a_max)


# -- ranges ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KeyRange:
    """The keys ``lo <= key < hi``; None is unbounded on that side. A bound may be a key prefix (a
    range of the leading column's values ``[a, b)`` is ``KeyRange((a,), (b,))``)."""

    lo: Key | None = None
    hi: Key | None = None

    @property
    def bounded(self) -> bool:
        return self.lo is not None or self.hi is not None

    def contains(self, key: Key) -> bool:
        return (self.lo is None or sort_key(key) >= sort_key(self.lo)) and (
            self.hi is None or sort_key(key) < sort_key(self.hi))

    def overlaps(self, key_min: Key | None, key_max: Key | None) -> bool:
        """Whether a file holding keys ``key_min..key_max`` (inclusive; None: unknown) may hold keys here."""
        if key_min is None or key_max is None:
            return True
        return (self.hi is None or sort_key(key_min) < sort_key(self.hi)) and (
            self.lo is None or sort_key(key_max) >= sort_key(self.lo))


def file_in_range(f: AddFile, r: KeyRange) -> Literal["all", "part", "none"]:
    """How much of file ``f`` falls in range ``r``, by its key bounds: all of it, part of it, or none.

    A file without key bounds is all in an unbounded range, and in part in any other (none if it holds no rows).
    """
    if not r.bounded or not f.key_min or not f.key_max:
        return "all" if not r.bounded or not f.rows else "part"
    if not r.overlaps(f.key_min, f.key_max):
        return "none"
    return "all" if r.contains(f.key_min) and r.contains(f.key_max) else "part"


# -- splitting a bucket for maintenance --------------------------------------------------------------------------


@dataclass(frozen=True)
class KeyRangeSplit:
    """One range of a split: its keys, the files overlapping it (in the order given) and their bytes in it
    (an estimate)."""

    range: KeyRange
    files: tuple[AddFile, ...]
    bytes: int


@dataclass
class _Interval:
    lo: Key | None
    hard: bool = False
    bytes: float = 0.0
    members: list[int] = field(default_factory=list)


def split_key_ranges(files: Sequence[AddFile], max_bytes: int, *, fences: Sequence[AddFile] = (),
                     points: Mapping[str, Sequence[Point]] | None = None) -> list[KeyRangeSplit]:
    """Split a bucket's ``files`` into consecutive key ranges of about ``max_bytes`` each.

    Cuts fall at the first key of every BaseFile and fence and at every key of ``points``; a file's bytes
    are spread over the intervals it spans by its points, else evenly. Adjacent intervals are joined while
    within ``max_bytes``, never across a fence.

    Args:
        files: the files to split, each sorted by key with ``key_min``/``key_max`` set.
        max_bytes: the target bytes of one range (one interval may exceed it).
        fences: files that stay as they are (BaseFiles a compaction keeps).
        points: optional per-path ``(key, bytes)`` samples inside files.

    Returns:
        The ranges in key order that overlap a file; together they cover every key of ``files``.
    """
    pts = points or {}
    intervals = _intervals(files, fences, pts)
    starts = [sort_key(iv.lo) for iv in intervals[1:] if iv.lo is not None]
    for i, f in enumerate(files):
        _spread(intervals, starts, i, f, pts.get(f.path, ()))
    return _join(intervals, files, max(1, max_bytes))


def _intervals(files: Sequence[AddFile], fences: Sequence[AddFile],
               points: Mapping[str, Sequence[Point]]) -> list[_Interval]:
    soft: set[Key] = {f.key_min for f in files if f.kind == "base" and f.key_min is not None}
    soft |= {k for ps in points.values() for k, _ in ps}
    hard: set[Key] = {f.key_min for f in fences if f.key_min is not None}
    cuts = sorted(soft | hard, key=sort_key)
    return [_Interval(None)] + [_Interval(c, c in hard) for c in cuts]


def _spread(intervals: list[_Interval], starts: Sequence[tuple[Any, ...]], index: int, f: AddFile,
            pts: Sequence[Point]) -> None:
    """Make file ``index`` a member of the intervals it spans and add its bytes to them."""
    if f.key_min is None or f.key_max is None:
        first, last = 0, len(intervals) - 1
    else:
        first = bisect.bisect_right(starts, sort_key(f.key_min))
        last = bisect.bisect_right(starts, sort_key(f.key_max))
    for j in range(first, last + 1):
        intervals[j].members.append(index)
    if pts:
        for key, size in pts:
            intervals[bisect.bisect_right(starts, sort_key(key))].bytes += size
        return
    share = f.bytes / (last - first + 1)
    for j in range(first, last + 1):
        intervals[j].bytes += share


def _join(intervals: Sequence[_Interval], files: Sequence[AddFile], max_bytes: int) -> list[KeyRangeSplit]:
    groups: list[list[_Interval]] = []
    size = 0.0
    for iv in intervals:
        if not groups or iv.hard or (size + iv.bytes > max_bytes and size > 0):
            groups.append([iv])
            size = iv.bytes
        else:
            groups[-1].append(iv)
            size += iv.bytes
    out: list[KeyRangeSplit] = []
    for n, group in enumerate(groups):
        hi = groups[n + 1][0].lo if n + 1 < len(groups) else None
        members = sorted({i for iv in group for i in iv.members})
        if not members:
            continue
        out.append(KeyRangeSplit(KeyRange(group[0].lo, hi), tuple(files[i] for i in members),
                                 round(sum(iv.bytes for iv in group))))
    return out


# -- splitting a bucket for a scan -------------------------------------------------------------------------------


def split_lead_ranges(files: Sequence[AddFile], target_bytes: int) -> list[KeyRange]:
    """Cut a bucket's files into ranges of the leading key column holding about ``target_bytes`` each.

    Every bound is a one-column key prefix, so a range is a range of the leading column's values, which a
    reader pushes down to Parquet. Each file counts toward the range where its first key falls; a range
    closes before a file that would take it past the target, unless a file of the range at least as large
    reaches past that file's first key (cuts fall between large files, never through them). Files holding
    no rows are ignored. One whole range when everything fits.
    """
    if target_bytes <= 0 or sum(f.bytes for f in files) <= target_bytes:
        return [KeyRange()]
    spans = sorted(((f.key_min[0], f.key_max[0], f.bytes) for f in files if f.key_min and f.key_max),
                   key=lambda s: value_order(s[0]))
    cuts: list[KeyValue] = []
    held: list[tuple[KeyValue, int]] = []  # (last key, bytes) of the files counted in the open range
    for first, last, size in spans:
        if (held and sum(b for _, b in held) + size > target_bytes and first != spans[0][0]
                and (not cuts or first != cuts[-1]) and not _reaches(held, first, size)):
            cuts.append(first)
            held = []
        held.append((last, size))
    bounds: list[Key | None] = [None, *((c,) for c in cuts), None]
    return [KeyRange(lo, hi) for lo, hi in itertools.pairwise(bounds)]


def _reaches(held: Sequence[tuple[KeyValue, int]], key: KeyValue, size: int) -> bool:
    """Whether a held file at least ``size`` bytes large holds keys at or past ``key``."""
    return any(b >= size and value_order(last) >= value_order(key) for last, b in held)
