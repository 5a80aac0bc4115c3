"""Keys as the log stores them: their order (Arrow's), and splitting a bucket into key ranges for maintenance
(coverage, order, fences, sizes) and for scans (cuts where files start). Pure, stats only."""

from __future__ import annotations

import datetime as dt
import itertools
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import example, given, settings
from hypothesis import strategies as st

from maintd.table.files.keys import (
    KeyRange,
    column_value,
    file_in_range,
    key_value,
    overlaps,
    sort_key,
    split_key_ranges,
    split_lead_ranges,
)
from maintd.table.files.schema import KEY_TYPES, TYPES
from maintd.table.log.actions import AddFile


def _file(name: str, lo: int, hi: int, size: int, kind: str = "delta") -> AddFile:
    return AddFile(path=name, bucket=0, kind=kind, level=None if kind == "base" else 1, rows=10, bytes=size,  # type: ignore[arg-type]
                   min_version=1, max_version=1, min_commit_time=0, max_commit_time=0, key_min=(lo,), key_max=(hi,))


def test_base_files_are_cut_points_and_ranges_join_up_to_the_size() -> None:
    bases = [_file(f"b{i}", i * 100, i * 100 + 99, 100, "base") for i in range(6)]
    delta = _file("d", 0, 599, 60)  # spread evenly: 10 bytes per base range
    splits = split_key_ranges([*bases, delta], 220)
    assert [s.range for s in splits] == [KeyRange(None, (200,)), KeyRange((200,), (400,)), KeyRange((400,), None)]
    assert [s.bytes for s in splits] == [220, 220, 220]
    assert all(delta in s.files for s in splits)
    assert [[f.path for f in s.files if f.kind == "base"] for s in splits] == [["b0", "b1"], ["b2", "b3"], ["b4", "b5"]]


def test_no_range_spans_a_fence() -> None:
    inputs = [_file("b0", 0, 99, 10, "base"), _file("b2", 200, 299, 10, "base"), _file("d", 0, 99, 1),
              _file("e", 250, 260, 1)]
    kept = [_file("b1", 100, 199, 10, "base")]
    splits = split_key_ranges(inputs, 10**9, fences=kept)
    assert [s.range for s in splits] == [KeyRange(None, (100,)), KeyRange((100,), None)]
    for s in splits:  # every file written from a range lies inside it, so outside the fence's keys
        assert not any(f.key_min is not None and f.key_min < (100,) < (f.key_max or ()) for f in s.files)


def test_points_inside_a_file_split_it_by_its_row_groups() -> None:
    big = _file("big", 0, 999, 1000)
    points = {"big": [((0,), 250), ((250,), 250), ((500,), 250), ((750,), 250)]}
    splits = split_key_ranges([big], 500, points=points)
    assert [s.range for s in splits] == [KeyRange(None, (500,)), KeyRange((500,), None)]
    assert [s.bytes for s in splits] == [500, 500]
    assert split_key_ranges([big], 500) == split_key_ranges([big], 10**6)  # no point: one range


def test_key_values_of_every_key_type_order_as_their_values() -> None:
    import datetime as dt

    pairs = [(b"\x00\xff", b"\x01"), (b"ab", b"abc"), (dt.date(2023, 12, 31), dt.date(2024, 1, 1)),
             (dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 1, 0, 0, 0, 500)),
             (dt.datetime(2024, 1, 1, tzinfo=dt.UTC), dt.datetime(2024, 1, 1, 0, 0, 1, tzinfo=dt.UTC)),
             (-5, 3), ("a", "ab"), (False, True)]
    for lo, hi in pairs:
        assert sort_key((key_value(lo),)) < sort_key((key_value(hi),)), (lo, hi)


@st.composite
def _buckets(draw: st.DrawFn) -> tuple[list[AddFile], list[AddFile], int]:
    n = draw(st.integers(0, 6))
    edges = sorted(draw(st.lists(st.integers(0, 10_000), min_size=2 * n, max_size=2 * n, unique=True)))
    bases = [_file(f"b{i}", edges[2 * i], edges[2 * i + 1], draw(st.integers(1, 500)), "base") for i in range(n)]
    fenced = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    fences = [b for b, f in zip(bases, fenced, strict=True) if f]
    inputs = [b for b, f in zip(bases, fenced, strict=True) if not f]
    for i in range(draw(st.integers(1, 8))):  # deltas never overlap a fence (the planner keeps only such)
        lo = draw(st.integers(0, 10_000))
        hi = lo + draw(st.integers(0, 3000))
        if not any(overlaps((lo,), (hi,), k.key_min, k.key_max) for k in fences):
            inputs.append(_file(f"d{i}", lo, hi, draw(st.integers(1, 500))))
    return inputs, fences, draw(st.integers(1, 1500))


@settings(max_examples=300, deadline=None)
@given(_buckets())
def test_ranges_are_ordered_disjoint_cover_every_file_and_never_span_a_fence(case: tuple) -> None:  # type: ignore[type-arg]
    inputs, fences, size = case
    splits = split_key_ranges(inputs, size, fences=fences)
    if not inputs:
        assert splits == []
        return
    for a, b in itertools.pairwise(splits):
        assert a.range.hi is not None and b.range.lo is not None and sort_key(a.range.hi) <= sort_key(b.range.lo)
    for f in inputs:  # a file is in exactly the ranges its keys overlap, and those hold all of its keys
        mine = [s for s in splits if f in s.files]
        assert mine and all(s.range.overlaps(f.key_min, f.key_max) for s in mine)
        assert not [s for s in splits if f not in s.files and s.range.overlaps(f.key_min, f.key_max)]
    for k in fences:  # a range lies wholly below a fence or starts at or above it: no output spans one
        assert k.key_min is not None
        for s in splits:
            below = s.range.hi is not None and sort_key(s.range.hi) <= sort_key(k.key_min)
            above = s.range.lo is not None and sort_key(s.range.lo) >= sort_key(k.key_min)
            assert below or above, (s.range, k.key_min)


# -- the order of keys is Arrow's --------------------------------------------------------------------------------
def _values(typ: str) -> st.SearchStrategy[Any]:
    """Values of a column of maintd type ``typ`` (over the whole range Python can hold)."""
    if typ == "bool":
        return st.booleans()
    if typ.startswith("int"):
        bits = int(typ[3:])
        return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    if typ == "float64":  # not a key type, but a value the log's keys admit: NaN and -0.0 too
        return st.floats()
    if typ == "string":
        return st.text(st.characters(codec="utf-8"), max_size=4)
    if typ == "binary":
        return st.binary(max_size=4)
    if typ == "date":
        return st.dates()
    if typ == "timestamp":
        return st.datetimes()
    assert typ == "timestamp_tz"
    return st.datetimes(timezones=st.just(dt.UTC))


@st.composite
def _keyed_tables(draw: st.DrawFn) -> pa.Table:
    """A table of 1 to 3 key columns of any key type (or float64), with repeated values and nulls."""
    types = draw(st.lists(st.sampled_from(sorted(KEY_TYPES | {"float64"})), min_size=1, max_size=3))
    pools = [draw(st.lists(st.none() | _values(t), min_size=1, max_size=4)) for t in types]
    n = draw(st.integers(0, 12))
    columns = {f"k{i}": pa.array([draw(st.sampled_from(pool)) for _ in range(n)], TYPES[t])
               for i, (t, pool) in enumerate(zip(types, pools, strict=True))}
    return pa.table(columns)


@settings(max_examples=400, deadline=None)
@given(_keyed_tables())
@example(pa.table({"k0": pa.array([2.0, None, float("nan"), -0.0, 0.0, float("-inf")])}))
@example(pa.table({"k0": pa.array([None, 1], pa.int64()), "k1": pa.array(["b", None])}))
def test_keys_as_stored_sort_as_arrow_sorts_their_columns(t: pa.Table) -> None:
    """Files are sorted by primary key with Arrow's sort; the keys they record must sort the same way."""
    arrow = t.take(pc.sort_indices(t, sort_keys=[(c, "ascending") for c in t.column_names]))
    stored = [tuple(key_value(v) for v in row.values()) for row in arrow.to_pylist()]
    for a, b in itertools.pairwise(stored):  # strictly ascending between distinct keys, equal between equal ones
        if _same(a) == _same(b):
            assert sort_key(a) == sort_key(b), (a, b)
        else:
            assert sort_key(a) < sort_key(b), (a, b)
    assert [_same(k) for k in sorted(reversed(stored), key=sort_key)] == [_same(k) for k in stored]


def _same(key: tuple[Any, ...]) -> tuple[Any, ...]:
    """``key`` with the float values Arrow's sort does not tell apart made equal (NaN, -0.0 and 0.0)."""
    return tuple(("nan",) if isinstance(v, float) and v != v else v + 0.0 if isinstance(v, float) else v
                 for v in key)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(KEY_TYPES)).flatmap(lambda t: st.tuples(st.just(t), _values(t))))
def test_a_stored_key_value_reads_back_as_the_value_of_its_column(case: tuple[str, Any]) -> None:
    typ, v = case
    stored = key_value(pa.scalar(v, TYPES[typ]).as_py())
    assert column_value(stored, TYPES[typ]) == pa.scalar(v, TYPES[typ]).as_py()


# -- splitting a bucket for a scan -------------------------------------------------------------------------------
def _spread(lo: int, hi: int, size: int) -> AddFile:
    return _file(f"f{lo}-{hi}-{size}", lo, hi, size)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50), st.integers(1, 100)), min_size=1, max_size=30),
       st.integers(1, 400))
def test_lead_ranges_cover_every_key_once_and_cut_only_where_files_start(
        spans: list[tuple[int, int, int]], target: int) -> None:
    files = [_spread(min(a, b), max(a, b), size) for a, b, size in spans]
    ranges = split_lead_ranges(files, target)
    assert ranges[0].lo is None and ranges[-1].hi is None
    assert all(a.hi == b.lo for a, b in itertools.pairwise(ranges))  # contiguous
    assert all(len(b) == 1 for r in ranges for b in (r.lo, r.hi) if b is not None)  # bounds on the lead column
    cuts = [r.lo for r in ranges[1:] if r.lo is not None]
    assert len(cuts) == len(ranges) - 1 and cuts == sorted(set(cuts), key=sort_key)  # no empty or repeated range
    assert {c[0] for c in cuts} <= {f.key_min[0] for f in files if f.key_min}
    if sum(f.bytes for f in files) <= target:
        assert ranges == [KeyRange()]


def test_files_written_per_key_range_land_one_per_range() -> None:
    starts = [0, 100, 200, 300]
    files = [_spread(s, s + 99, 100) for s in starts]
    assert split_lead_ranges(files, 100) == [KeyRange(None, (100,)), KeyRange((100,), (200,)),
                                             KeyRange((200,), (300,)), KeyRange((300,), None)]
    assert split_lead_ranges(files, 250) == [KeyRange(None, (200,)), KeyRange((200,), None)]


@settings(max_examples=300, deadline=None)
@given(st.tuples(st.integers(0, 9), st.integers(0, 9)), st.tuples(st.integers(0, 9), st.integers(0, 9)),
       st.none() | st.integers(0, 9), st.none() | st.integers(0, 9))
def test_a_file_is_in_a_lead_range_as_its_leading_key_values_are(a: tuple[int, int], b: tuple[int, int],
                                                                 low: int | None, high: int | None) -> None:
    """A range of the leading column's values holds all, part or none of a file of two-column keys as the
    file's first and last leading values say."""
    key_min, key_max = min(a, b), max(a, b)
    f = AddFile(path="f", bucket=0, kind="delta", level=0, rows=1, bytes=1, min_version=1, max_version=1,
                min_commit_time=0, max_commit_time=0, key_min=key_min, key_max=key_max)
    r = KeyRange(None if low is None else (low,), None if high is None else (high,))
    lo, hi = key_min[0], key_max[0]
    if low is None and high is None:
        expected = "all"
    elif (high is not None and lo >= high) or (low is not None and hi < low):
        expected = "none"
    elif (low is None or lo >= low) and (high is None or hi < high):
        expected = "all"
    else:
        expected = "part"
    assert file_in_range(f, r) == expected
