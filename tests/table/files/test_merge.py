"""The newest row of each key: the hashed kernel against a plain oracle (merge-on-read of a bucket of many level-0
files is in tests/table/read/test_reader_newest_rows.py)."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from maintd.table.files.merge import first_of_each_key_hashed, latest_rows
from maintd.table.files.schema import OP_COLUMN, OP_DELETE, OP_UPSERT, VERSION_COLUMN

ROWS = st.lists(st.tuples(st.integers(0, 12), st.booleans()), max_size=60)


def _newest_first(rows: list[tuple[object, bool]]) -> pa.Table:
    """Rows given newest first: row i has version len - i; a True flag makes it a delete."""
    n = len(rows)
    key_type = pa.string() if rows and isinstance(rows[0][0], str) else pa.int64()
    return pa.table({"k": pa.array([k for k, _ in rows], key_type), "v": [f"row{i}" for i in range(n)],
                     OP_COLUMN: pa.array([OP_DELETE if d else OP_UPSERT for _, d in rows], pa.int8()),
                     VERSION_COLUMN: pa.array(range(n, 0, -1), pa.int64())})


def _oracle(rows: list[tuple[object, bool]], keep_deletes: bool) -> list[int]:
    """Indices of the first (newest) row of each key, in key order."""
    first: dict[object, int] = {}
    for i, (k, _) in enumerate(rows):
        first.setdefault(k, i)
    return [first[k] for k in sorted(first) if keep_deletes or not rows[first[k]][1]]


@settings(max_examples=150, deadline=None)
@given(rows=ROWS, keep_deletes=st.booleans(), text=st.booleans())
def test_the_hashed_kernel_keeps_the_newest_row_of_each_key(rows: list[tuple[int, bool]], keep_deletes: bool,
                                                              text: bool) -> None:
    if text:  # string keys hash and sort as well as integers
        rows = [(f"key-{k:03d}", d) for k, d in rows]
    t = _newest_first(rows)
    expected = _oracle(rows, keep_deletes)
    assert first_of_each_key_hashed(t, "k", keep_deletes=keep_deletes).to_pylist() == expected
    merged = latest_rows(t, ["k"], keep_deletes=keep_deletes, newest_first=True)
    assert merged.equals(t.take(pa.array(expected, pa.int64())))
    # the sorting kernel, which reads the version column, agrees
    assert merged.equals(latest_rows(t, ["k"], keep_deletes=keep_deletes))
    unordered = first_of_each_key_hashed(t, "k", keep_deletes=keep_deletes, in_key_order=False).to_pylist()
    assert unordered == sorted(expected), "in the rows' order: the first occurrences, ascending"


def test_the_hashed_kernel_reads_a_chunked_key_column() -> None:
    rows = [(3, False), (1, True), (3, True), (2, False), (1, False)]
    t = _newest_first(rows)
    chunked = pa.concat_tables([t.slice(0, 2), t.slice(2, 1), t.slice(3)])
    assert chunked.column("k").num_chunks == 3
    assert first_of_each_key_hashed(chunked, "k", keep_deletes=False).to_pylist() == [3, 0]
    assert first_of_each_key_hashed(chunked, "k", keep_deletes=True).to_pylist() == [1, 3, 0]
