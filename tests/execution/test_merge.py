"""The k-way merge of sorted streams: chunks of bounded size in ascending, disjoint key ranges, every key whole."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from maintd.execution.merge import merge_chunk, merge_streams, stable_order
from maintd.table.files.merge import latest_rows, sort_by_key_version


def _stream(t: pa.Table, batch: int) -> Iterator[pa.Table]:
    for i in range(0, t.num_rows, batch):
        yield t.slice(i, batch)


def _files(rng: np.random.Generator, files: int, rows: int, a_values: int, versions_per_file: int = 1
           ) -> list[pa.Table]:
    """Files of a table keyed by (a, b): sorted by key, ``a`` with few values, versions ascending by file."""
    out = []
    for v in range(files):
        a = rng.integers(0, a_values, rows)
        b = rng.integers(0, 10 * rows, rows)
        keys = sorted(set(zip(a.tolist(), b.tolist(), strict=True)))
        reps = versions_per_file
        out.append(pa.table({"a": pa.array([k[0] for k in keys for _ in range(reps)], pa.int64()),
                             "b": [f"k{k[1]:08d}" for k in keys for _ in range(reps)],
                             "_maintd_op": pa.array(np.zeros(len(keys) * reps, np.int8)),
                             "_maintd_version": pa.array([v * reps + r for _ in keys for r in range(reps)],
                                                         pa.int64())}))
    return out


def _check_chunks(chunks: list[pa.Table], keys: list[str]) -> None:
    seen: set[tuple[object, ...]] = set()
    last: tuple[object, ...] | None = None
    for c in chunks:
        ks = list(zip(*(c.column(k).to_pylist() for k in keys), strict=True))
        assert not (set(ks) & seen), "a key's versions are split across chunks"
        assert last is None or min(ks) > last, "chunks are not in ascending, disjoint key ranges"
        seen |= set(ks)
        last = max(ks)


def _row_bytes(files: list[pa.Table]) -> float:
    return sum(f.nbytes for f in files) / sum(f.num_rows for f in files)


def test_a_composite_key_whose_first_column_barely_varies_still_cuts_into_small_chunks() -> None:
    files = _files(np.random.default_rng(1), files=8, rows=2000, a_values=1)
    rb = _row_bytes(files)
    chunks = list(merge_streams([_stream(f, 256) for f in files], ["a", "b"], chunk_bytes=1000 * rb,
                                buffer_bytes=512 * rb))
    bound = 1000 + 8 * (512 + 256)  # a chunk: its target, plus at most one step (every stream's buffer)
    assert max(c.num_rows for c in chunks) <= bound
    assert len(chunks) >= sum(f.num_rows for f in files) // bound > 1  # a leading-column cut gives one chunk
    _check_chunks(chunks, ["a", "b"])
    merged = pa.concat_tables([merge_chunk(c, ["a", "b"], "cluster", version_ordered=True) for c in chunks])
    assert merged.equals(sort_by_key_version(pa.concat_tables(files), ["a", "b"], newest_first=False))


@pytest.mark.parametrize("kind", ["cluster", "compact"])
def test_streamed_chunks_merge_to_what_one_in_memory_merge_gives(kind: str) -> None:
    rng = np.random.default_rng(5)
    files = []
    for v in range(40):  # single integer key, 20% deletes, one version per file
        keys = np.unique(rng.integers(0, 5000, 300))
        files.append(pa.table({"id": pa.array(keys, pa.int64()), "x": rng.random(len(keys)),
                               "_maintd_op": pa.array((rng.random(len(keys)) < 0.2).astype(np.int8)),
                               "_maintd_version": pa.array(np.full(len(keys), v), pa.int64())}))
    rb = _row_bytes(files)
    chunks = list(merge_streams([_stream(f, 64) for f in files], ["id"], chunk_bytes=500 * rb,
                                buffer_bytes=128 * rb, numeric=True))
    _check_chunks(chunks, ["id"])
    streamed = pa.concat_tables([merge_chunk(c, ["id"], kind, version_ordered=True) for c in chunks])
    data = pa.concat_tables(files)
    expected = (sort_by_key_version(data, ["id"], newest_first=False) if kind == "cluster"
                else latest_rows(data, ["id"]).sort_by("id"))
    assert streamed.equals(expected)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12), st.integers(1, 300), st.integers(1, 3), st.integers(1, 4), st.integers(0, 10_000),
       st.integers(1, 64))
def test_any_streams_merge_into_whole_keys_in_order(files: int, rows: int, a_values: int, reps: int, seed: int,
                                                    batch: int) -> None:
    """Many versions of one key in one file (level-1 inputs) may straddle batches: still one chunk per key."""
    parts = _files(np.random.default_rng(seed), files, rows, a_values, reps)
    rb = _row_bytes(parts)
    chunks = list(merge_streams([_stream(p, batch) for p in parts], ["a", "b"], chunk_bytes=max(1, rows // 3) * rb,
                                buffer_bytes=2 * batch * rb))
    _check_chunks(chunks, ["a", "b"])
    assert sum(c.num_rows for c in chunks) == sum(p.num_rows for p in parts)
    merged = pa.concat_tables([merge_chunk(c, ["a", "b"], "cluster", version_ordered=True) for c in chunks])
    assert merged.equals(sort_by_key_version(pa.concat_tables(parts), ["a", "b"], newest_first=False))


INTEGER_TYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(INTEGER_TYPES), st.data())
def test_the_stable_order_of_integer_keys_is_that_of_a_stable_sort(dtype: type, data: st.DataObject) -> None:
    """Packed (key, row) words where the span allows (small spans, repeats), timsort where it does not
    (a span near the type's whole range): the same indices as numpy's stable argsort either way."""
    info = np.iinfo(dtype)
    lo = data.draw(st.integers(int(info.min), int(info.max)), label="lo")
    hi = data.draw(st.integers(lo, min(int(info.max), lo + data.draw(st.sampled_from([0, 5, 1 << 20, 1 << 70])))),
                   label="hi")
    keys = np.array(data.draw(st.lists(st.integers(lo, hi), max_size=400), label="keys"), dtype=dtype)
    order = stable_order(keys)
    assert order.dtype == np.int64
    assert np.array_equal(order, np.argsort(keys, kind="stable"))
