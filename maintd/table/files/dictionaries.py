"""Text columns of few distinct values, kept dictionary-encoded from the writer to the last merge.

As plain strings such a column is decoded, reordered and hashed back into a dictionary by every merge; as a
dictionary it stays an array of small integers at every step (docs/design.md, "Data file encoding"). So:

* writers and maintenance outputs store such a column dictionary-encoded: :func:`encode_text` decides per
  column, by a sample first (mostly distinct values stay plain), then by the size of the whole dictionary;
* the footer lists the columns whose every page, in every row group, is dictionary-encoded
  (:data:`DICTIONARY_KEY`, :func:`dictionary_columns`).
* a maintenance unit whose every input lists a column reads it as a dictionary, merges the indices and
  writes dictionary and indices as they are, after dropping the entries no row uses.
* the footer's ``ARROW:schema`` still says ``string`` (:func:`arrow_schema_metadata`), so every other reader
  reads the column as it always did.

The entry is a hint about encoding only: a reader that ignores it reads the same values, and one that follows
it on a column whose pages are not all dictionary-encoded still reads the right values, only more slowly.
"""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from maintd.table.files.lazy import lazy_module

if TYPE_CHECKING:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
else:
    pc = lazy_module("pyarrow.compute")

DICTIONARY_KEY = "maintd.dictionary"
"""Footer key-value entry: JSON list of the columns whose every page is dictionary-encoded."""
DICTIONARY_PAGE_LIMIT = 64 << 10
"""The dictionary page limit of every writer of data files: a dictionary must encode to less than this (4 bytes of
length and the bytes of each entry), or the Parquet writer falls back to plain pages part way."""
SAMPLE_ROWS = 4096
"""Values hashed before a column is hashed whole, spread evenly over it (rows come sorted by key, and a run of
one hot key's versions at the start would make any column look like it had one value). Enough that a column
of mostly distinct values under a skewed key (most rows the versions of a few hot keys) still shows them."""
SAMPLE_DISTINCT = 4
"""A column is left plain when more than one in this many of its sampled values is distinct (and more than
:data:`MIN_DISTINCT`): its dictionary would hold nearly every value."""
COMPACT_SHARE = 0.25
"""A dictionary that merges handed over is compacted (its unused entries dropped) once it encodes to more than
this share of :data:`DICTIONARY_PAGE_LIMIT`: below it the entries no row uses cost little, and finding them
costs a pass over every row."""
MIN_DISTINCT = 16
"""So few distinct values make a dictionary whatever the sample's size: a file of a few rows lists its low-
cardinality columns as larger files do, and a unit of many small files can still read them as dictionaries."""


def dictionary_types(schema: pa.Schema, exclude: Iterable[str] = ()) -> list[str]:
    """The columns of ``schema`` that may be dictionary-encoded this way: string and binary ones, not ``exclude``
    (key and partition columns: mostly distinct, or stored as a constant)."""
    skip = set(exclude)
    return [f.name for f in schema
            if f.name not in skip and (pa.types.is_string(f.type) or pa.types.is_binary(f.type))]


def dictionary_columns(md: pq.FileMetaData) -> frozenset[str]:
    """The columns a data file's footer lists as dictionary-encoded throughout (none: an older file)."""
    raw = (md.metadata or {}).get(DICTIONARY_KEY.encode())
    if not raw:
        return frozenset()
    try:
        names = json.loads(raw)
    except ValueError:
        return frozenset()
    return frozenset(n for n in names if isinstance(n, str)) if isinstance(names, list) else frozenset()


def common_dictionaries(footers: Iterable[pq.FileMetaData], allowed: Iterable[str]) -> frozenset[str]:
    """The ``allowed`` columns every one of ``footers`` lists (a unit reads them as dictionaries)."""
    common = frozenset(allowed)
    for md in footers:
        common &= dictionary_columns(md)
        if not common:
            break
    return common


def encode_text(values: pa.Array | pa.ChunkedArray) -> pa.DictionaryArray | None:
    """``values`` as one dictionary array whose dictionary encodes below :data:`DICTIONARY_PAGE_LIMIT`, every entry
    used; None when the column is better left plain (mostly distinct values, or too large a dictionary).

    A dictionary array (a merge of dictionary-read inputs) is unified and compacted, never hashed again. A plain
    one is sampled, then hashed whole. Every other sampled row is hashed first: most plain columns are mostly
    distinct, and when that half already rules the column out, so would the whole sample (a superset), so the
    decision is the same at half the hashing.
    """
    n = len(values)
    if n == 0:
        return None
    if pa.types.is_dictionary(values.type):
        encoded = _one_dictionary(values)
        if not fits(encoded.dictionary, COMPACT_SHARE):
            encoded = compact(encoded)
        return encoded if fits(encoded.dictionary) else None
    half, rows = _sample_rows(n) if n > SAMPLE_ROWS else (None, None)
    if half is not None and _plain(_one_dictionary(pc.dictionary_encode(values.take(half))).dictionary, SAMPLE_ROWS):
        return None  # half the sample already has too many distinct values for the whole of it
    sample = values if rows is None else values.take(rows)
    encoded = _one_dictionary(pc.dictionary_encode(sample))
    if _plain(encoded.dictionary, len(sample)):
        return None
    if n > SAMPLE_ROWS:
        encoded = _one_dictionary(pc.dictionary_encode(values))
    return encoded if fits(encoded.dictionary) else None


@functools.lru_cache(maxsize=16)
def _sample_rows(n: int) -> tuple[pa.Array, pa.Array]:
    """Every other one of the :data:`SAMPLE_ROWS` rows sampled from a column of ``n`` rows, and all of them, spread
    evenly: the same for every column of a row group, so worked out once for all of them."""
    rows = np.linspace(0, n - 1, SAMPLE_ROWS, dtype=np.int64)
    return pa.array(rows[::2]), pa.array(rows)


def encode_batch(t: pa.Table, columns: Iterable[str]) -> pa.Table:
    """``t`` with those of its ``columns`` that have few distinct values as dictionary arrays
    (:func:`encode_text`): a writer's batch is encoded once, before it is split into files, whose slices then
    share its dictionaries (:func:`file_dictionary`)."""
    encoded = {c: d for c in columns if (d := encode_text(t.column(c))) is not None}
    return with_dictionaries(t, encoded) if encoded else t


def file_dictionary(values: pa.Array | pa.ChunkedArray) -> pa.DictionaryArray | None:
    """A dictionary column of one file cut from an encoded batch (:func:`encode_batch`) as written: its
    dictionary compacted when it has more entries than the file has rows; None if it does not fit."""
    arr = _one_dictionary(values)
    if len(arr.dictionary) > len(arr):
        arr = compact(arr)
    return arr if fits(arr.dictionary) else None


def _plain(dictionary: pa.Array, sampled: int) -> bool:
    """Whether a column whose sample of ``sampled`` rows (or a subset of that sample) has the distinct values
    ``dictionary`` is better left plain: too many distinct values (:data:`SAMPLE_DISTINCT`), or a dictionary
    already too large. Both only grow as rows are added, so a subset that rules a column out decides it."""
    distinct = len(dictionary)
    return (distinct > MIN_DISTINCT and distinct * SAMPLE_DISTINCT > sampled) or not fits(dictionary)


def fits(dictionary: pa.Array, share: float = 1.0) -> bool:
    """Whether ``dictionary`` encodes below ``share`` of :data:`DICTIONARY_PAGE_LIMIT` (at 1: so is never given
    up part way)."""
    return 4 * len(dictionary) + _value_bytes(dictionary) < DICTIONARY_PAGE_LIMIT * share


def _value_bytes(dictionary: pa.Array) -> int:
    offsets = np.frombuffer(dictionary.buffers()[1], np.int32, len(dictionary) + 1, dictionary.offset * 4)
    return int(offsets[-1] - offsets[0])


def _one_dictionary(values: pa.Array | pa.ChunkedArray) -> pa.DictionaryArray:
    """A dictionary array or chunked array as one array with one dictionary."""
    if isinstance(values, pa.ChunkedArray):
        values = values.unify_dictionaries().combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    assert isinstance(values, pa.DictionaryArray)
    return values


def compact(values: pa.DictionaryArray) -> pa.DictionaryArray:
    """``values`` with the dictionary entries no row uses dropped (unified dictionaries of many inputs hold
    every entry of each, and would otherwise only grow from merge to merge)."""
    indices = values.indices
    present = pc.drop_null(indices) if values.null_count else indices
    used = np.bincount(present.to_numpy(zero_copy_only=False), minlength=len(values.dictionary)) > 0
    if used.all():
        return values
    remap = pa.array(np.cumsum(used, dtype=np.int32) - 1)
    return pa.DictionaryArray.from_arrays(pc.take(remap, indices), values.dictionary.filter(pa.array(used)))


def dictionary_schema(schema: pa.Schema, columns: Iterable[str]) -> pa.Schema:
    """``schema`` with ``columns`` typed as dictionaries of their type (``int32`` indices, as Parquet reads them)."""
    chosen = set(columns)
    return pa.schema([f.with_type(pa.dictionary(pa.int32(), f.type)) if f.name in chosen else f for f in schema],
                     metadata=schema.metadata)


def conform(t: pa.Table, schema: pa.Schema) -> pa.Table:
    """``t`` cast to ``schema``, except that a dictionary column of ``schema``'s type stays a dictionary."""
    target = pa.schema([f.with_type(t.schema.field(f.name).type)
                        if pa.types.is_dictionary(t.schema.field(f.name).type)
                        and t.schema.field(f.name).type.value_type == f.type else f for f in schema],
                       metadata=schema.metadata)
    return t if t.schema.equals(target) else t.cast(target)


def arrow_schema_metadata(schema: pa.Schema) -> dict[bytes, bytes]:
    """The footer entries through which Arrow readers restore ``schema``: the ``ARROW:schema`` entry, as Arrow's
    Parquet writer makes it (the schema in Arrow's IPC format, base64), and the schema's own metadata. A file
    written from dictionary arrays stores the plain schema this way, so readers see plain columns."""
    return {**(schema.metadata or {}), b"ARROW:schema": base64.b64encode(schema.serialize().to_pybytes())}


def footer_entries(schema: pa.Schema, columns: Sequence[str]) -> dict[bytes, bytes]:
    """The footer of a file written from dictionary arrays: ``schema`` (the file's plain schema) and the list of
    the dictionary-encoded ``columns``."""
    return {**arrow_schema_metadata(schema), DICTIONARY_KEY.encode(): json.dumps(list(columns)).encode()}


def with_dictionaries(t: pa.Table, columns: Mapping[str, pa.DictionaryArray]) -> pa.Table:
    """``t`` with the named columns replaced by their dictionary arrays."""
    for name, arr in columns.items():
        t = t.set_column(t.schema.get_field_index(name), t.schema.field(name).with_type(arr.type), arr)
    return t


__all__ = [
    "DICTIONARY_KEY",
    "DICTIONARY_PAGE_LIMIT",
    "arrow_schema_metadata",
    "common_dictionaries",
    "compact",
    "conform",
    "dictionary_columns",
    "dictionary_schema",
    "dictionary_types",
    "encode_batch",
    "encode_text",
    "file_dictionary",
    "fits",
    "footer_entries",
    "with_dictionaries",
]
