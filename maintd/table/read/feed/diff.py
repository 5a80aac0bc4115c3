"""The diff every strategy ends in: two states of the same keys in, their net changes out."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from maintd.table.files.lazy import lazy_module
from maintd.table.files.schema import VERSION_COLUMN, to_arrow
from maintd.table.log.actions import Metadata
from maintd.table.read.reader import key_columns

if TYPE_CHECKING:
    import pyarrow.compute as pc
else:
    pc = lazy_module("pyarrow.compute")  # imported by the first call: see maintd.table.files.lazy

CHANGE_COLUMN = "_change"
CHANGE_VERSION_COLUMN = "_change_version"


def state_schema(metadata: Metadata) -> pa.Schema:
    """The schema of a state :func:`diff_states` compares: every table column (nullable), then the version."""
    schema = to_arrow(metadata.fields)
    return pa.schema([*[schema.field(c).with_nullable(True) for c in metadata.column_names],
                      pa.field(VERSION_COLUMN, pa.int64())])


def diff_states(md: Metadata, a: pa.Table, b: pa.Table) -> pa.Table:
    """The net changes from state ``a`` to state ``b`` (visible rows with their version, one per key;
    :func:`state_schema`): inserts, updates (some value differs) and deletes, sorted by key."""
    keys = key_columns(md)
    values = [c for c in md.column_names if c not in keys]
    a = a.rename_columns([c if c in keys else f"{c}__a" for c in a.column_names]).append_column(
        "__in_a", pa.repeat(pa.scalar(True), a.num_rows))
    b = b.rename_columns([c if c in keys else f"{c}__b" for c in b.column_names]).append_column(
        "__in_b", pa.repeat(pa.scalar(True), b.num_rows))
    j = a.join(b, keys=keys, join_type="full outer", coalesce_keys=True)
    in_a = pc.fill_null(j.column("__in_a"), False)
    in_b = pc.fill_null(j.column("__in_b"), False)
    differs = pa.repeat(pa.scalar(False), j.num_rows)
    for c in values:
        ne = pc.fill_null(pc.not_equal(j.column(f"{c}__a"), j.column(f"{c}__b")), False)
        null_mismatch = pc.xor(pc.is_null(j.column(f"{c}__a")), pc.is_null(j.column(f"{c}__b")))
        differs = pc.or_(differs, pc.or_(ne, null_mismatch))
    insert = pc.and_(in_b, pc.invert(in_a))
    delete = pc.and_(in_a, pc.invert(in_b))
    update = pc.and_(pc.and_(in_a, in_b), differs)
    kind = pc.if_else(insert, "insert", pc.if_else(delete, "delete", pc.if_else(update, "update", None)))
    j = j.append_column(CHANGE_COLUMN, kind).filter(pc.is_valid(kind))
    out = {}
    for c in md.column_names:
        if c in keys:
            out[c] = j.column(c)
        else:
            out[c] = pc.if_else(pc.equal(j.column(CHANGE_COLUMN), "delete"), j.column(f"{c}__a"), j.column(f"{c}__b"))
    out[CHANGE_COLUMN] = j.column(CHANGE_COLUMN)
    out[CHANGE_VERSION_COLUMN] = j.column(f"{VERSION_COLUMN}__b")
    result = pa.table(out)
    schema = to_arrow(md.fields)
    result = result.cast(pa.schema([*[schema.field(c).with_nullable(True) for c in md.column_names],
                                    pa.field(CHANGE_COLUMN, pa.string()),
                                    pa.field(CHANGE_VERSION_COLUMN, pa.int64())]))
    return result.sort_by([(k, "ascending") for k in keys])



__all__ = ["CHANGE_COLUMN", "CHANGE_VERSION_COLUMN", "diff_states", "state_schema"]
