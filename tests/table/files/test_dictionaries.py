"""Text columns of few values, dictionary-encoded from the writer on (maintd/table/files/dictionaries.py)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from maintd import Table
from maintd.table.files.datafiles import level0_options, write_parquet
from maintd.table.files.dictionaries import (
    DICTIONARY_KEY,
    DICTIONARY_PAGE_LIMIT,
    common_dictionaries,
    compact,
    conform,
    dictionary_columns,
    encode_batch,
    encode_text,
    fits,
)


def test_a_column_of_few_values_becomes_a_dictionary_and_one_of_many_does_not() -> None:
    few = pa.array(["red", "green", None, "red"] * 500)
    encoded = encode_text(few)
    assert encoded is not None and encoded.to_pylist() == few.to_pylist()
    assert sorted(encoded.dictionary.to_pylist()) == ["green", "red"], "nulls are null indices, not entries"
    assert encode_text(pa.array([f"user-{i:012d}" for i in range(5000)])) is None
    assert encode_text(pa.array([], pa.string())) is None
    tiny = pa.array([f"u{i}" for i in range(10)])  # mostly distinct, but so few that a dictionary is as cheap
    assert encode_text(tiny) is not None


def test_a_skewed_sorted_column_is_judged_by_a_sample_spread_over_it() -> None:
    """Rows sorted by key with a hot key first: the first rows hold one value, the column as a whole 30,000."""
    names = pa.array(["hot"] * 20_000 + [f"user-{i:012d}" for i in range(30_000)])
    assert encode_text(names) is None


def _sampled_once(values: pa.Array) -> pa.DictionaryArray | None:
    """The rule :func:`encode_text` follows for a plain column, with the whole sample hashed at once."""
    from maintd.table.files.dictionaries import MIN_DISTINCT, SAMPLE_DISTINCT, SAMPLE_ROWS

    n = len(values)
    sample = values if n <= SAMPLE_ROWS else values.take(np.linspace(0, n - 1, SAMPLE_ROWS, dtype=np.int64))
    distinct = len(sample.dictionary_encode().dictionary)
    if (distinct > MIN_DISTINCT and distinct * SAMPLE_DISTINCT > len(sample)) or not fits(
            sample.dictionary_encode().dictionary):
        return None
    encoded = values.dictionary_encode()
    return encoded if fits(encoded.dictionary) else None


@settings(max_examples=120, deadline=None)
@given(rows=st.integers(4_097, 12_000), distinct=st.integers(1, 6_000), hot=st.floats(0.0, 0.95),
       width=st.integers(1, 40), nulls=st.floats(0.0, 0.5), seed=st.integers(0, 2**32 - 1))
def test_hashing_half_the_sample_first_decides_as_the_whole_sample_would(
        rows: int, distinct: int, hot: float, width: int, nulls: float, seed: int) -> None:
    """Skewed or not, wide or narrow values, any share of nulls: the early look at every other sampled row never
    turns a column away that the whole sample would have encoded, and never keeps one it would not."""
    rng = np.random.default_rng(seed)
    picks = np.where(rng.random(rows) < hot, 0, rng.integers(0, distinct, rows))
    values = pa.array([None if rng.random() < nulls else f"{i:0{width}d}" for i in np.sort(picks)], pa.string())
    got, expected = encode_text(values), _sampled_once(values)
    assert (got is None) == (expected is None)
    if got is not None:
        assert got.to_pylist() == values.to_pylist()


def test_a_dictionary_too_large_for_one_page_is_refused() -> None:
    width = 1000
    values = pa.array([f"{i:0{width}d}" for i in range(DICTIONARY_PAGE_LIMIT // width + 1)] * 8)
    assert encode_text(values) is None
    assert not fits(pa.array(["x" * (DICTIONARY_PAGE_LIMIT - 4)])) and fits(pa.array(["x" * 100]))


def test_merged_dictionaries_are_unified_and_compacted_only_when_large() -> None:
    a = pa.array(["x", "y", "x"]).dictionary_encode()
    b = pa.array(["z", "x"]).dictionary_encode()
    merged = encode_text(pa.chunked_array([a, b]))
    assert merged is not None and merged.to_pylist() == ["x", "y", "x", "z", "x"]
    assert isinstance(merged, pa.DictionaryArray) and len(merged.dictionary) == 3
    unused_small = pa.DictionaryArray.from_arrays(pa.array([0, 0], pa.int32()), pa.array(["a", "b"]))
    assert len(encode_text(unused_small).dictionary) == 2, "a small dictionary keeps its unused entries"  # type: ignore[union-attr]
    big = pa.array([f"{i:0100d}" for i in range(300)])  # 31 KB of entries: over a quarter of a page
    unused_big = pa.DictionaryArray.from_arrays(pa.array([5, 7, None, 5], pa.int32()), big)
    kept = encode_text(unused_big)
    assert kept is not None and kept.to_pylist() == unused_big.to_pylist() and len(kept.dictionary) == 2


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(0, 30)), max_size=60), st.integers(1, 40))
def test_compacting_a_dictionary_keeps_every_value_and_drops_the_unused_entries(indices: list[int | None],
                                                                               size: int) -> None:
    dictionary = pa.array([f"v{i}" for i in range(max(size, 31))])
    arr = pa.DictionaryArray.from_arrays(pa.array(indices, pa.int32()), dictionary)
    out = compact(arr)
    assert out.to_pylist() == arr.to_pylist()
    used = {i for i in indices if i is not None}
    assert len(out.dictionary) == len(used), "every entry left is used"


def test_the_footer_list_is_read_leniently() -> None:
    def md(value: bytes | None) -> pq.FileMetaData:
        t = pa.table({"a": [1]})
        if value is not None:
            t = t.replace_schema_metadata({DICTIONARY_KEY: value})
        buf = io.BytesIO()
        pq.write_table(t, buf)
        return pq.read_metadata(io.BytesIO(buf.getvalue()))

    assert dictionary_columns(md(None)) == frozenset()
    assert dictionary_columns(md(b"not json")) == frozenset()
    assert dictionary_columns(md(b'{"a": 1}')) == frozenset()
    assert dictionary_columns(md(b'["a", 3, "b"]')) == {"a", "b"}
    assert common_dictionaries([md(b'["a", "b"]'), md(b'["b", "c"]')], ["a", "b", "c"]) == {"b"}
    assert common_dictionaries([md(b'["a", "b"]'), md(None)], ["a", "b"]) == frozenset()


def test_conform_keeps_a_dictionary_column_of_the_schemas_type() -> None:
    t = pa.table({"a": pa.array(["x", "y"]).dictionary_encode(), "b": pa.array([1, 2], pa.int32())})
    schema = pa.schema([("a", pa.string()), ("b", pa.int64())])
    out = conform(t, schema)
    assert pa.types.is_dictionary(out.schema.field("a").type) and out.schema.field("b").type == pa.int64()
    assert conform(t, pa.schema([("a", pa.binary()), ("b", pa.int32())])).schema.field("a").type == pa.binary()


def _written(data: pa.Table, text: list[str]) -> pq.ParquetFile:
    buf = io.BytesIO()
    write_parquet(data, buf, level0_options(data.schema, ["id"]), text)
    return pq.ParquetFile(io.BytesIO(buf.getvalue()))


def test_a_written_file_lists_its_dictionaries_and_says_its_plain_schema() -> None:
    data = pa.table({"id": pa.array(range(1000), pa.int64()), "tier": ["gold", "silver"] * 500,
                     "name": [f"n{i}" for i in range(1000)]})
    pf = _written(data, ["tier", "name"])
    assert dictionary_columns(pf.metadata) == {"tier"}
    assert pf.schema_arrow == data.schema, "readers see the plain columns"
    assert pf.read().equals(data)
    buf = io.BytesIO()
    write_parquet(data, buf, level0_options(data.schema, ["id"]), ["tier", "name"])
    got = pq.ParquetFile(io.BytesIO(buf.getvalue()), read_dictionary=["tier"]).read()
    assert pa.types.is_dictionary(got.schema.field("tier").type)
    assert got.column("tier").to_pylist() == data.column("tier").to_pylist()


def test_the_files_of_an_encoded_batch_share_its_dictionary_compacted_where_a_file_holds_few_rows() -> None:
    rng = np.random.default_rng(0)
    values = np.array([f"city-{i:03d}" for i in range(200)])
    batch = pa.table({"id": pa.array(range(4000), pa.int64()), "city": values[rng.integers(0, 200, 4000) // 40]})
    encoded = encode_batch(batch, ["city"])
    assert pa.types.is_dictionary(encoded.schema.field("city").type)
    small = encoded.slice(0, 3)  # three rows of a batch whose dictionary has five entries
    pf = _written(small, ["city"])
    assert dictionary_columns(pf.metadata) == {"city"} and pf.read().equals(batch.slice(0, 3))
    assert pf.metadata.row_group(0).column(1).has_dictionary_page
    whole = _written(encoded, ["city"])
    assert whole.read().equals(batch)


def test_a_batch_column_whose_dictionary_does_not_fit_is_written_plain_and_not_listed() -> None:
    big = pa.DictionaryArray.from_arrays(pa.array(np.arange(2000) % 1500, pa.int32()),
                                         pa.array([f"{i:080d}" for i in range(1500)]))
    data = pa.table({"id": pa.array(range(2000), pa.int64()), "c": big})
    pf = _written(data, ["c"])
    assert dictionary_columns(pf.metadata) == frozenset() and pf.schema_arrow.field("c").type == pa.string()
    assert pf.read().column("c").to_pylist() == big.to_pylist()


def test_a_writers_level0_files_list_few_valued_text_and_readers_see_plain_strings(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "t"), "id:int64!,tier:string,name:string", primary_key="id", buckets=4)
    rows = pa.table({"id": pa.array(range(2000), pa.int64()), "tier": ["a", "b", "c", None] * 500,
                     "name": [f"n{i}" for i in range(2000)]})
    table.upsert(rows)
    files = list(table.snapshot().files.values())
    assert len(files) == 4
    for f in files:
        md = pq.read_metadata(table.storage.full_path(f.path))
        assert dictionary_columns(md) == {"tier"}
        assert json.loads(md.metadata[DICTIONARY_KEY.encode()]) == ["tier"]
    got = table.read().sort_by("id")
    assert got.cast(rows.schema).equals(rows) and got.schema.metadata is None


@pytest.mark.parametrize("values", [["a", "b"], [None, None]])
def test_an_all_null_or_tiny_column_is_written_and_read_back(values: list[str | None]) -> None:
    data = pa.table({"id": pa.array([1, 2], pa.int64()), "c": pa.array(values, pa.string())})
    assert _written(data, ["c"]).read().equals(data)
