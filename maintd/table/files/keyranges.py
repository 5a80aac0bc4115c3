"""Key ranges of a bucket: splitting its files into disjoint primary-key ranges (pure, stats only).

Every data file is sorted by primary key and its ``add`` records the first and last key
(``key_min``/``key_max``), so a bucket can be cut into ranges of the key space that are read,
merged and written independently: a range's rows are those of the files overlapping it, restricted
to the range. This is how a large bucket's compaction runs as several tasks and how a reader can
split one bucket over several workers. Every version of one key lies in one range, so the
greatest-version rule is exact per range.

Keys are compared as stored in the log (JSON scalars: binary as lowercase hex, dates and timestamps
as ISO text), which orders them as their column values are ordered for every key type of the format
(integers, booleans, strings, binary, dates, timestamps).

Nothing here reads a file: sizes are estimates from the ``add`` actions, optionally refined by
``points`` (for example the first key of each row group of a file, with its bytes).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from maintd.table.log.actions import AddFile, KeyValue

Key = tuple[KeyValue, ...]
"""A primary key as stored in ``key_min``/``key_max``."""
Point = tuple[Key, int]
"""A key inside a file and the bytes of the file from that key to the next point (or the file's end)."""


def key_value(v: Any) -> KeyValue:
    """One key column value as stored in the log: JSON scalars as they are, binary as hex, others as text."""
    if isinstance(v, int | float | str | bool) or v is None:
        return v
    if isinstance(v, bytes):
        return v.hex()
    return str(v)


@dataclass(frozen=True)
class KeyRange:
    """The keys ``lo <= key < hi``; None is unbounded on that side."""

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
    if None in (a_min, a_max, b_min, b_max):
        return True
    assert a_min is not None and a_max is not None and b_min is not None and b_max is not None
    return sort_key(a_min) <= sort_key(b_max) and sort_key(b_min) <= sort_key(a_max)


def split_key_ranges(files: Sequence[AddFile], max_bytes: int, *, fences: Sequence[AddFile] = (),
                     points: Mapping[str, Sequence[Point]] | None = None) -> list[KeyRangeSplit]:
    """Split a bucket's ``files`` into consecutive key ranges of about ``max_bytes`` each.

    Cut candidates are the first key of every BaseFile (BaseFiles of a bucket hold disjoint key
    ranges), the first key of every fence and every key of ``points``. Between two candidates the
    bytes of a file are estimated from its points when it has some, else spread evenly over the
    intervals its ``key_min..key_max`` spans. Adjacent intervals are then joined while they stay
    within ``max_bytes``, but never across a fence: ``fences`` are files that stay as they are
    (BaseFiles a compaction keeps), so no range, and so no file written from a range, may span one.

    A point may be a prefix of the key (the first column only): it sorts before every key that starts
    with it, so it is a valid cut.

    Args:
        files: the files to split (any kind), each sorted by key with ``key_min``/``key_max`` set.
        max_bytes: the target bytes of one range (a single interval may exceed it).
        fences: files whose key ranges must not be spanned.
        points: optional per-path ``(key, bytes)`` samples inside files (for example the first key of
            each row group).

    Returns:
        The ranges in key order that overlap at least one file. Together they cover every key of
        ``files``: ranges without files are left out, and no file holds a key in them.
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
