"""What a row filter lets a reader skip, decided from the log alone: groups, buckets and files.

A filter on partition columns skips (partition, bucket) groups (:func:`partition_may_match`), equalities on
every primary-key column name the only buckets the keys hash to (:func:`buckets_for`), and comparisons on the
leading key column skip files whose ``key_min``/``key_max`` exclude them (:func:`file_may_match`). Values are
compared as the filter compares them: as Python values of the column's type. A skipped file can hide a newer
version of a key the filter excludes, so readers apply the same predicates to the merged rows
(:mod:`maintd.table.read.scan` does).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from maintd.errors import InvalidInputError
from maintd.table.files.bucketing import bucket_of
from maintd.table.files.filters import Predicate, RowFilter
from maintd.table.files.keys import column_value
from maintd.table.files.partitions import partition_value
from maintd.table.files.schema import TYPES
from maintd.table.log.actions import AddFile, Metadata

MAX_KEY_COMBINATIONS = 4096
"""Beyond this many candidate keys, a filter's key equalities do not prune buckets (hashing them costs more)."""


def file_may_match(f: AddFile, row_filter: RowFilter | None, lead: str, typ: pa.DataType) -> bool:
    """False only when the file's key bounds exclude every key the filter can accept."""
    if row_filter is None or not f.key_min or not f.key_max:
        return True
    lo, hi = column_value(f.key_min[0], typ), column_value(f.key_max[0], typ)
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
    types = {f.name: f.type for f in metadata.fields}
    values = {c: _partition_value(c, types[c], partition.get(c)) for c in metadata.partition_by}
    return any(all(_value_admits(p, values[p.column]) for p in conj if p.column in values)
               for conj in row_filter.conjunctions)


_UNKNOWN = object()
_COMPARE = {"=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
            ">=": operator.ge}


def _partition_value(column: str, type_name: str, text: str | None) -> Any:
    """The value a partition's text names, read as the writer wrote it (:func:`partition_value`), or
    ``_UNKNOWN`` (the partition is kept) for text that names no value Python holds, such as a year past 9999."""
    try:
        return partition_value(column, type_name, text, table="").to_pylist()[0]
    except (InvalidInputError, ValueError, OverflowError):
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
