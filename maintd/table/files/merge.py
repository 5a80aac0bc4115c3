"""Merge kernels over Arrow tables: the "greatest version wins" rule (docs/format.md, "Row versions")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from maintd.table.files.lazy import lazy_module
from maintd.table.files.schema import OP_COLUMN, OP_DELETE, VERSION_COLUMN

if TYPE_CHECKING:
    import pyarrow.compute as pc
else:
    pc = lazy_module("pyarrow.compute")  # imported by the first call: see maintd.table.files.lazy


def sort_by_key_version(t: pa.Table, keys: Sequence[str], *, newest_first: bool) -> pa.Table:
    order = [(k, "ascending") for k in keys] + [(VERSION_COLUMN, "descending" if newest_first else "ascending")]
    return t.take(pc.sort_indices(t, sort_keys=order))


def first_of_each_key(t: pa.Table, keys: Sequence[str]) -> np.ndarray:
    """Boolean mask of rows that start a new key in a table sorted by ``keys``."""
    n = t.num_rows
    mask = np.zeros(n, dtype=bool)
    if n == 0:
        return mask
    mask[0] = True
    for k in keys:
        col = t.column(k).combine_chunks()
        diff = pc.not_equal(col.slice(1), col.slice(0, n - 1))
        mask[1:] |= diff.to_numpy(zero_copy_only=False)
    return mask


def latest_rows(t: pa.Table, keys: Sequence[str], *, keep_deletes: bool = False,
                newest_first: bool = False) -> pa.Table:
    """The row with the greatest version per key, sorted by key; delete rows dropped unless asked.

    ``t`` holds ``_maintd_version`` and ``_maintd_op``; a key appears at most once per version.
    ``newest_first``: the rows of a key already come in descending version order (level-0 files
    concatenated newest first), so a stable sort by key alone is enough (a cheaper sort).
    """
    if t.num_rows == 0:
        return t
    if newest_first and len(keys) == 1:
        return t.take(first_of_each_key_hashed(t, keys[0], keep_deletes=keep_deletes))
    # order, winners and deletes are found on the key, version and op columns alone; the other columns
    # are taken once, for the winning rows only
    if newest_first:  # pyarrow's sort_indices is stable: equal keys keep their (newest first) order
        order = pc.sort_indices(t.select(list(keys)), sort_keys=[(k, "ascending") for k in keys])
    else:
        order = pc.sort_indices(t.select([*keys, VERSION_COLUMN]), sort_keys=[
            *[(k, "ascending") for k in keys], (VERSION_COLUMN, "descending")])
    mask = first_of_each_key(t.select(list(keys)).take(order), keys)
    if not keep_deletes:
        mask &= t.column(OP_COLUMN).take(order).to_numpy(zero_copy_only=False) != OP_DELETE
    return t.take(order.filter(pa.array(mask)))


def first_of_each_key_hashed(t: pa.Table, key: str, *, keep_deletes: bool, in_key_order: bool = True) -> pa.Array:
    """Row indices of the first row of each value of the one key column (deletes left out unless asked), in
    key order, or with ``in_key_order=False`` in the order of the rows.

    Found by hashing rather than sorting every row: ``unique`` lists each key once, in order of first
    appearance, and ``index_in`` looks each of them up in the column, which yields the index of its first
    occurrence (the look-up table keeps the first index of a repeated value). Only the winners are sorted,
    and they are a fraction of the rows when many files repeat keys.
    """
    column = t.column(key).combine_chunks()
    first = pc.index_in(pc.unique(column), value_set=column)
    if in_key_order:
        first = first.take(pc.sort_indices(column.take(first)))
    if not keep_deletes:
        first = first.filter(pc.not_equal(t.column(OP_COLUMN).take(first), OP_DELETE))
    return first


def dedupe_last_occurrence(t: pa.Table, keys: Sequence[str]) -> pa.Table:
    """Keep the last occurrence of each key (a writer's batch: repeats settle to the last one), sorted by key."""
    if t.num_rows == 0:
        return t
    pos = pa.array(np.arange(t.num_rows, dtype=np.int64))
    tmp = t.append_column("__pos", pos)
    order = [(k, "ascending") for k in keys] + [("__pos", "descending")]
    s = tmp.take(pc.sort_indices(tmp, sort_keys=order))
    s = s.filter(pa.array(first_of_each_key(s, keys)))
    return s.drop_columns(["__pos"])
