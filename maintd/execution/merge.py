"""Merging sorted inputs: the merge rule of one chunk, and a k-way merge of sorted record-batch streams.

Every data file is sorted by primary key, so a task never needs a whole bucket in memory: it merges
*streams* of sorted tables (one per input file, or per spilled run) chunk by chunk.

**The k-way merge** (:func:`merge_streams`) keeps a buffer of rows per stream and repeatedly takes, from
every buffer, the rows whose key is below the *frontier*: the smallest last buffered key among the streams
not yet exhausted. Those rows are complete, so every version of a key is taken in one step; steps are
gathered into chunks of about ``chunk_bytes``. Keys compare as whole primary-key tuples. A cut point is a
binary search and buffers are refilled once half empty, so a step costs O(k log B) for k streams of B
buffered rows and the total is linear in the rows, whatever the number of streams.

**The merge of a chunk** (:func:`merge_chunk`) sorts by (key, version) and, for compaction, keeps the
last row of each key. The pieces of a chunk are presorted runs in the streams' order: when the streams'
version ranges do not overlap and come in version order, a *stable* sort on the key alone gives (key,
version) order (for one integer key, :func:`stable_order`); otherwise Arrow sorts on (key, version).

docs/architecture.md ("Memory") places the merge within a unit's memory budget.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from itertools import pairwise
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from maintd.table.files.keys import Key, KeyRange, key_value, sort_key
from maintd.table.files.schema import OP_COLUMN, OP_DELETE, VERSION_COLUMN
from maintd.table.log.actions import AddFile


def in_version_order(inputs: Sequence[AddFile]) -> tuple[list[AddFile], bool]:
    """The inputs by ascending version, and whether their version ranges are disjoint (no overlap)."""
    files = sorted(inputs, key=lambda f: (f.min_version, f.max_version, f.path))
    disjoint = all(a.max_version < b.min_version for a, b in pairwise(files))
    return files, disjoint


# -- keys of sorted tables ---------------------------------------------------------------------------------------


def integer_key(schema: pa.Schema, keys: Sequence[str]) -> bool:
    """Whether the primary key is one integer column (the numpy fast paths apply)."""
    return len(keys) == 1 and pa.types.is_integer(schema.field(keys[0]).type)


def key_at(t: pa.Table, keys: Sequence[str], i: int) -> Key:
    """The key of row ``i`` as stored in the log (:func:`~maintd.table.files.keys.key_value`)."""
    return tuple(key_value(t.column(k)[i].as_py()) for k in keys)


class _RowKeys(Sequence[tuple[Any, ...]]):
    """The sortable keys of a sorted table, computed only for the rows a binary search probes."""

    def __init__(self, t: pa.Table, keys: Sequence[str]) -> None:
        self.cols = [t.column(k) for k in keys]
        self.n: int = t.num_rows

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: Any) -> Any:
        return sort_key(tuple(key_value(c[i].as_py()) for c in self.cols))


def rows_below(t: pa.Table, keys: Sequence[str], bound: Key, numeric: np.ndarray | None = None) -> int:
    """How many leading rows of ``t`` (sorted by ``keys``) have a key below ``bound``."""
    if numeric is not None:
        return int(np.searchsorted(numeric, np.int64(int(bound[0] or 0))))  # first index >= bound: rows below it
    return int(bisect.bisect_left(_RowKeys(t, keys), sort_key(bound)))


def restrict(t: pa.Table, keys: Sequence[str], r: KeyRange) -> pa.Table:
    """The rows of ``t`` (sorted by ``keys``) inside ``r``: a zero-copy slice."""
    if not r.bounded or t.num_rows == 0:
        return t
    start = rows_below(t, keys, r.lo) if r.lo is not None else 0
    end = rows_below(t, keys, r.hi) if r.hi is not None else t.num_rows
    return t.slice(start, max(0, end - start))


# -- the k-way merge ---------------------------------------------------------------------------------------------


class _Stream:
    """One sorted input: ``buf`` holds its rows read but not yet taken; sizes are measured, not estimated."""

    def __init__(self, it: Iterator[pa.Table], keys: Sequence[str], numeric: bool) -> None:
        self.it = it
        self.keys = keys
        self.buf: pa.Table | None = None
        self.nkeys: np.ndarray | None = None
        self.numeric = numeric
        self.done = False
        self.seen_rows = 0
        self.seen_bytes = 0

    @property
    def rows(self) -> int:
        return 0 if self.buf is None else self.buf.num_rows

    @property
    def row_bytes(self) -> float:
        """Arrow bytes per row of what this stream has read so far."""
        return self.seen_bytes / self.seen_rows if self.seen_rows else 0.0

    @property
    def buffered_bytes(self) -> float:
        return self.rows * self.row_bytes

    def fill(self, target_bytes: float) -> None:
        """Read batches until ``target_bytes`` are buffered (at least one row) or the stream ends."""
        while not self.done and (self.rows == 0 or self.buffered_bytes < target_bytes):
            nxt = next(self.it, None)
            if nxt is None:
                self.done = True
            elif nxt.num_rows:
                self._append(nxt)

    def _append(self, t: pa.Table) -> None:
        self.seen_rows += t.num_rows
        self.seen_bytes += t.nbytes
        self.buf = t if self.buf is None or self.buf.num_rows == 0 else pa.concat_tables([self.buf, t])
        if self.numeric:
            k = t.column(self.keys[0]).to_numpy()
            self.nkeys = k if self.nkeys is None or len(self.nkeys) == 0 else np.concatenate([self.nkeys, k])

    def last_key(self) -> Key:
        assert self.buf is not None
        return key_at(self.buf, self.keys, self.buf.num_rows - 1)

    def take_below(self, bound: Key | None) -> pa.Table | None:
        """Remove and return the buffered rows below ``bound`` (all of them if None)."""
        if self.buf is None or self.buf.num_rows == 0:
            return None
        n = self.buf.num_rows if bound is None else rows_below(self.buf, self.keys, bound, self.nkeys)
        if n == 0:
            return None
        head, self.buf = self.buf.slice(0, n), self.buf.slice(n)
        if self.nkeys is not None:
            self.nkeys = self.nkeys[n:]
        return head


def merge_streams(streams: Sequence[Iterator[pa.Table]], keys: Sequence[str], *, chunk_bytes: float,
                  buffer_bytes: float, numeric: bool = False) -> Iterator[pa.Table]:
    """Yield the rows of sorted ``streams`` in chunks of ascending, disjoint key ranges.

    Each chunk holds every version of the keys it covers, and within a chunk the rows of each stream
    come in the order of ``streams`` (a stable sort by key keeps that order between a key's versions).
    A stream's buffer is refilled to ``buffer_bytes`` (measured Arrow bytes) once it is half empty, and a
    chunk is yielded once it holds ``chunk_bytes``, so memory is about ``len(streams) x buffer_bytes`` plus
    a chunk (and at most one step more), whatever the size of the inputs.
    """
    srcs = [_Stream(it, keys, numeric) for it in streams]
    pending: list[pa.Table] = []
    pending_bytes = 0.0
    while True:
        for s in srcs:
            if s.rows == 0 or s.buffered_bytes < buffer_bytes / 2:
                s.fill(buffer_bytes)
        live = [s for s in srcs if s.rows]
        if not live:
            break
        open_ = [s for s in live if not s.done]
        bound = min((s.last_key() for s in open_), key=sort_key) if open_ else None
        taken = [(t, s.row_bytes) for s, t in ((s, s.take_below(bound)) for s in live) if t is not None]
        if not taken:  # the frontier streams hold only the frontier key: read on until it ends
            for s in open_:
                if s.last_key() == bound:
                    s.fill(s.buffered_bytes + max(1.0, buffer_bytes / 2))
            continue
        pending += [t for t, _ in taken]
        pending_bytes += sum(t.num_rows * rb for t, rb in taken)
        if pending_bytes >= chunk_bytes:
            yield pa.concat_tables(pending)
            pending, pending_bytes = [], 0.0
    if pending:
        yield pa.concat_tables(pending)


# -- the merge of one chunk --------------------------------------------------------------------------------------


def merge_chunk(t: pa.Table, keys: Sequence[str], kind: str, *, version_ordered: bool,
                keep_deletes: bool = False) -> pa.Table:
    """Sort ``t`` by (key, version); for ``compact`` keep the greatest version per key.

    Delete rows are dropped from a compaction's output unless ``keep_deletes`` (an intermediate run,
    whose deletes must still hide older rows of other runs).

    ``version_ordered``: the rows of any one key already appear in ascending version order (inputs
    concatenated in version order, with disjoint version ranges), so a stable sort on the key suffices.
    """
    if t.num_rows == 0:
        return t
    idx = _order(t, keys, version_ordered)
    if kind == "compact":
        keep = last_of_each_key([pc.take(t.column(k), idx) for k in keys])
        if not keep_deletes:
            keep &= pc.not_equal(pc.take(t.column(OP_COLUMN), idx), OP_DELETE).to_numpy(zero_copy_only=False)
        idx = idx.filter(pa.array(keep))
    return t.take(idx)


def _order(t: pa.Table, keys: Sequence[str], version_ordered: bool) -> pa.Array:
    if version_ordered and integer_key(t.schema, keys):
        return pa.array(stable_order(t.column(keys[0]).to_numpy()))
    if version_ordered and len(keys) == 1:
        return pc.sort_indices(t.column(keys[0]))
    order = [(k, "ascending") for k in keys] + ([] if version_ordered else [(VERSION_COLUMN, "ascending")])
    return pc.sort_indices(t, sort_keys=order)


def stable_order(k: np.ndarray) -> np.ndarray:
    """The indices that sort the integers ``k`` stably (equal values keep their order), as int64.

    When the span of ``k`` leaves room for a row number in 63 bits, each value is packed with its row
    number into one word, ``(value - min) << bits | row``. The words are distinct and sort in exactly the
    stable order of ``k``, so numpy's unstable sort of plain integers (vectorised: x86-simd-sort where the
    processor has AVX-512 or AVX2) sorts them in place and the low bits are the indices (docs/benchmarks.md
    compares it with timsort). Wider spans use timsort (``np.argsort(kind="stable")``), which merges presorted
    runs in O(n log runs).
    """
    n = len(k)
    bits = max(1, (n - 1).bit_length())
    if n < 2 or int(k.max()) - int(k.min()) >= 1 << (63 - bits):
        return np.argsort(k, kind="stable").astype(np.int64, copy=False)
    lo = k.min()
    # the offsets fit in 63 - bits: computed where they cannot overflow (unsigned: k >= lo; signed: in int64)
    words: np.ndarray = (k - lo).astype(np.int64) if k.dtype.kind == "u" else np.subtract(k, lo, dtype=np.int64)
    np.left_shift(words, bits, out=words)
    np.bitwise_or(words, np.arange(n, dtype=np.int64), out=words)
    words.sort()
    np.bitwise_and(words, (1 << bits) - 1, out=words)
    return words


def last_of_each_key(sorted_keys: Sequence[pa.ChunkedArray | pa.Array]) -> np.ndarray:
    """Boolean mask of the rows that end a run of equal keys (columns already sorted)."""
    n = len(sorted_keys[0])
    mask = np.zeros(n, dtype=bool)
    if n == 0:
        return mask
    mask[n - 1] = True
    for col in sorted_keys:
        c = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        mask[: n - 1] |= pc.not_equal(c.slice(0, n - 1), c.slice(1)).to_numpy(zero_copy_only=False)
    return mask
