"""Key ranges of a bucket, and what a filter lets a reader skip: pure functions over ``add`` actions.

Every data file is sorted by primary key and its ``add`` action records the first and the last key
(``key_min`` / ``key_max``). Two uses follow, neither of which opens a file:

* **Splitting a large bucket** (:func:`split_key_ranges`): a bucket whose files are too big to merge
  at once is read as several ranges of its leading key column. Every version of a key has the same
  leading value, so the ranges partition the keys and the "greatest version wins" merge is exact
  per range. Cuts fall where files start, so files that compaction wrote per key range (several base
  files of one bucket) land one per range; a file that spans a cut is read in part by each range
  (Parquet row-group statistics skip the rest).
* **Pruning** (:func:`file_may_match`, :func:`partition_may_match`, :func:`buckets_for`): a filter on
  partition columns skips (partition, bucket) groups, equalities on every primary-key column name
  the only buckets the keys hash to, and comparisons on the leading key column skip files whose key
  bounds exclude them. A skipped file can hide a newer version of a key the filter excludes, so
  readers apply the same predicates to the merged rows (:mod:`maintd.table.read.scan` does).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from maintd.table.files.bucketing import bucket_of
from maintd.table.files.filters import Predicate, RowFilter
from maintd.table.files.schema import TYPES
from maintd.table.log.actions import AddFile, KeyValue, Metadata

MAX_KEY_COMBINATIONS = 4096
"""Beyond this many candidate keys, a filter's key equalities do not prune buckets (hashing them costs more)."""


@dataclass(frozen=True)
class KeyRange:
    """Keys whose leading primary-key column is in ``[low, high)``; None is unbounded.

    Values are in the representation of ``AddFile.key_min`` (JSON scalars: dates and timestamps as
    ISO strings, binaries as hex), so a range is as serialisable as the actions it is cut from.
    """

    low: KeyValue = None
    high: KeyValue = None

    @property
    def whole(self) -> bool:
        return self.low is None and self.high is None


def split_key_ranges(files: Sequence[AddFile], target_bytes: int) -> list[KeyRange]:
    """Cut a bucket's files into ranges of the leading key column holding about ``target_bytes`` each.

    Files are taken in the order of their first keys, and each counts toward the range where its first
    key falls. A range is closed before a file whose bytes would take it past the target, unless a file
    of the range at least as large reaches past that file's first key: cuts fall between the large
    files (compaction's per-range base files), never through them for the sake of a small file that
    starts inside one (a writer's file spread over the whole bucket). Files holding no rows are ignored.
    One whole range when everything fits, or when no file starts anywhere but at the first key.
    """
    if target_bytes <= 0 or sum(f.bytes for f in files) <= target_bytes:
        return [KeyRange()]
    spans = sorted(((f.key_min[0], f.key_max[0], f.bytes) for f in files if f.key_min and f.key_max),
                   key=lambda s: _order(s[0]))
    cuts: list[KeyValue] = []
    held: list[tuple[KeyValue, int]] = []  # (last key, bytes) of the files counted in the open range
    for first, last, size in spans:
        if (held and sum(b for _, b in held) + size > target_bytes and first != spans[0][0]
                and (not cuts or first != cuts[-1]) and not _reaches(held, first, size)):
            cuts.append(first)
            held = []
        held.append((last, size))
    bounds: list[KeyValue] = [None, *cuts, None]
    return [KeyRange(lo, hi) for lo, hi in itertools.pairwise(bounds)]


def _reaches(held: Sequence[tuple[KeyValue, int]], key: KeyValue, size: int) -> bool:
    """Whether a held file at least ``size`` bytes large holds keys at or past ``key``."""
    try:
        return any(b >= size and _order(last) >= _order(key) for last, b in held)
    except TypeError:
        return False


def _order(v: KeyValue) -> tuple[int, Any]:
    return (0, v) if not isinstance(v, str) else (1, v)


def lead_type(metadata: Metadata) -> pa.DataType:
    """The Arrow type of the leading primary-key column (the one key ranges and bounds speak of)."""
    types = {f.name: f.type for f in metadata.fields}
    return TYPES[types[metadata.primary_key[0]]]


def key_value(v: KeyValue, typ: pa.DataType) -> Any:
    """A ``key_min``/``key_max`` component as a Python value of the column's type (None stays None)."""
    if v is None:
        return None
    if pa.types.is_binary(typ) or pa.types.is_large_binary(typ):
        return bytes.fromhex(v) if isinstance(v, str) else v
    if isinstance(v, str) and not (pa.types.is_string(typ) or pa.types.is_large_string(typ)):
        return pa.scalar(v).cast(typ).as_py()
    return v


def file_in_range(f: AddFile, r: KeyRange, typ: pa.DataType) -> str:
    """``"all"``, ``"part"`` or ``"none"``: how much of file ``f`` falls in range ``r``."""
    if r.whole or not f.key_min or not f.key_max:
        return "all" if r.whole or not f.rows else "part"
    lo, hi = key_value(f.key_min[0], typ), key_value(f.key_max[0], typ)
    low, high = key_value(r.low, typ), key_value(r.high, typ)
    try:
        if (high is not None and lo >= high) or (low is not None and hi < low):
            return "none"
        if (low is None or lo >= low) and (high is None or hi < high):
            return "all"
    except TypeError:
        pass
    return "part"


def file_may_match(f: AddFile, row_filter: RowFilter | None, lead: str, typ: pa.DataType) -> bool:
    """False only when the file's key bounds exclude every key the filter can accept."""
    if row_filter is None or not f.key_min or not f.key_max:
        return True
    lo, hi = key_value(f.key_min[0], typ), key_value(f.key_max[0], typ)
    return any(all(_bounds_admit(p, lo, hi) for p in conj if p.column == lead) for conj in row_filter.conjunctions)


def _bounds_admit(p: Predicate, lo: Any, hi: Any) -> bool:
    try:
        if p.op == "=":
            return bool(lo <= p.value <= hi)
        if p.op == "in":
            return any(lo <= v <= hi for v in p.value)
        if p.op in ("<", "<="):
            return bool(lo < p.value or (p.op == "<=" and lo == p.value))
        if p.op in (">", ">="):
            return bool(hi > p.value or (p.op == ">=" and hi == p.value))
    except TypeError:  # a bound of another type than the value: cannot tell, so keep the file
        return True
    return True


def partition_may_match(partition: Mapping[str, str | None], row_filter: RowFilter | None,
                        metadata: Metadata) -> bool:
    """False only when the partition's values fail every conjunction of the filter."""
    if row_filter is None or not metadata.partition_by:
        return True
    types = {f.name: TYPES[f.type] for f in metadata.fields}
    values = {c: _partition_value(partition.get(c), types[c]) for c in metadata.partition_by}
    return any(all(_value_admits(p, values[p.column]) for p in conj if p.column in values)
               for conj in row_filter.conjunctions)


_UNKNOWN = object()
_COMPARE = {"=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
            ">=": operator.ge}


def _partition_value(v: str | None, typ: pa.DataType) -> Any:
    if v is None:
        return None
    try:
        return pa.scalar(v).cast(typ).as_py()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return _UNKNOWN


def _value_admits(p: Predicate, v: Any) -> bool:
    if v is _UNKNOWN:
        return True
    if p.op in ("is null", "is not null"):
        return (v is None) == (p.op == "is null")
    if v is None:
        return False
    if p.op in ("in", "not in"):
        return (v in p.value) == (p.op == "in")
    try:
        return bool(_COMPARE[p.op](v, p.value))
    except TypeError:
        return True


def buckets_for(row_filter: RowFilter | None, metadata: Metadata) -> set[int] | None:
    """The buckets that can hold a row the filter accepts, or None when that is every bucket.

    Known only when each conjunction pins every primary-key column with ``=`` or ``in``: the
    candidate keys are hashed as writers hash them (:mod:`maintd.table.files.bucketing`).
    """
    if row_filter is None:
        return None
    pk = metadata.primary_key
    types = {f.name: TYPES[f.type] for f in metadata.fields}
    out: set[int] = set()
    for conj in row_filter.conjunctions:
        choices = [_pinned(conj, c) for c in pk]
        if any(ch is None for ch in choices):
            return None
        keys = list(itertools.islice(itertools.product(*choices), MAX_KEY_COMBINATIONS + 1))  # type: ignore[arg-type]
        if len(keys) > MAX_KEY_COMBINATIONS:
            return None
        if keys:
            t = pa.table({c: pa.array([k[i] for k in keys], types[c]) for i, c in enumerate(pk)})
            out.update(int(b) for b in bucket_of(t, pk, metadata.buckets))
    return out


def _pinned(conj: Iterable[Predicate], column: str) -> list[Any] | None:
    """The values a conjunction allows for ``column`` when it pins them (= or in), else None."""
    allowed: set[Any] | None = None
    for p in conj:
        if p.column != column or p.op not in ("=", "in"):
            continue
        vals = {p.value} if p.op == "=" else set(p.value)
        allowed = vals if allowed is None else allowed & vals
    return None if allowed is None else sorted(allowed, key=repr)
