"""Bucket assignment: ``bucket = hash(primary key) mod write.bucket.num`` (docs/format.md, "Buckets").

The hash is specified bit for bit so any process or language assigns the same bucket.

* ``mix64(x)`` is the SplitMix64 finaliser over unsigned 64-bit integers (wrapping arithmetic)::

      z = x + 0x9E3779B97F4A7C15
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
      z = (z ^ (z >> 27)) * 0x94D049BB133111EB
      return z ^ (z >> 31)

* A column value hashes to ``mix64(v)``. For integers, dates (days since epoch), timestamps
  (microseconds since epoch) and booleans (0/1), ``v`` is their signed 64-bit value reinterpreted as
  unsigned. For strings (UTF-8) and binaries, ``v`` is their FNV-1a 64-bit hash (offset
  0xCBF29CE484222325, prime 0x100000001B3), fed through ``mix64``.
* A key of columns c1..cn hashes to ``h_n`` with ``h_0 = 0`` and ``h_i = mix64(h_{i-1} XOR hash(c_i))``.
* ``bucket = h_n mod buckets``. Null key values are rejected before hashing.

The computation is vectorised with NumPy; strings are hashed one byte position at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from maintd.table.files.lazy import lazy_module

if TYPE_CHECKING:
    import pyarrow.compute as pc
else:
    pc = lazy_module("pyarrow.compute")  # imported by the first call: see maintd.table.files.lazy

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


def mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser over a uint64 array (wrapping)."""
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def _fnv1a(arr: pa.Array) -> np.ndarray:
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        arr = arr.cast(pa.large_binary() if pa.types.is_large_string(arr.type) else pa.binary())
    if pa.types.is_binary(arr.type):
        arr = arr.cast(pa.large_binary())
    n = len(arr)
    h = np.full(n, _FNV_OFFSET, dtype=np.uint64)
    if n == 0:
        return h
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int64)[arr.offset : arr.offset + n + 1]
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    starts = offsets[:-1]
    lengths = offsets[1:] - starts
    maxlen = int(lengths.max()) if n else 0
    with np.errstate(over="ignore"):
        for pos in range(maxlen):
            live = np.nonzero(lengths > pos)[0]
            byte = data[starts[live] + pos].astype(np.uint64)
            h[live] = (h[live] ^ byte) * _FNV_PRIME
    return h


def column_hash(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The per-row hash of one key column, as uint64."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    t = arr.type
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return mix64(_fnv1a(arr))
    if pa.types.is_boolean(t):
        ints = pc.cast(arr, pa.int64())
    elif pa.types.is_date32(t) or pa.types.is_timestamp(t) or pa.types.is_date64(t):
        ints = arr.view(pa.int32() if pa.types.is_date32(t) else pa.int64()).cast(pa.int64())
    elif pa.types.is_integer(t):
        ints = pc.cast(arr, pa.int64())
    else:
        raise TypeError(f"type {t} cannot be part of a primary key")
    values = ints.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    return mix64(values.view(np.uint64))


def key_hash(columns: Sequence[pa.Array | pa.ChunkedArray]) -> np.ndarray:
    """The hash of composite keys, one uint64 per row."""
    n = len(columns[0])
    h = np.zeros(n, dtype=np.uint64)
    for col in columns:
        h = mix64(h ^ column_hash(col))
    return h


def bucket_of(table: pa.Table, primary_key: Sequence[str], buckets: int) -> np.ndarray:
    """The bucket of every row of ``table`` (int32 array)."""
    h = key_hash([table.column(c) for c in primary_key])
    return (h % np.uint64(buckets)).astype(np.int32)
