"""The bucket hash: the spec's test vectors (docs/format.md, "Buckets"), and a bit-exact reference.

``reference_hash`` is the specification transcribed into plain Python integers, independent of the
vectorised NumPy code; both must give the vectors of the doc, and agree on random keys.
"""

from __future__ import annotations

import datetime
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from maintd.table.files.bucketing import bucket_of, key_hash

U64 = (1 << 64) - 1
DOC = Path(__file__).resolve().parents[3] / "docs" / "format.md"
ARROW = {"int64": pa.int64(), "int32": pa.int32(), "string": pa.string(), "binary": pa.binary(), "bool": pa.bool_(),
         "date": pa.date32(), "timestamp": pa.timestamp("us")}
EPOCH = datetime.datetime(1970, 1, 1)

# (key columns as (type, value), hash, bucket of 16, bucket of 4096): the vectors of docs/format.md.
VECTORS: list[tuple[list[tuple[str, Any]], str, int, int]] = [
    ([("int64", 0)], "a706dd2f4d197e6f", 15, 3695),
    ([("int64", 1)], "5e41ab087439611e", 14, 286),
    ([("int64", -1)], "5dc20aa7b2a27137", 7, 311),
    ([("int32", 42)], "57e1faba65107204", 4, 516),
    ([("int64", 2**63 - 1)], "69c9d98a86c5cd1e", 14, 3358),
    ([("int64", -(2**63))], "86db92e833b0c1a0", 0, 416),
    ([("string", "")], "21fa69a58f3d62f5", 5, 757),
    ([("string", "a")], "d6b886a45cb41f2b", 11, 3883),
    ([("string", "hello")], "8e88b7bd2ed15ca3", 3, 3235),
    ([("string", "é")], "d0f38c313a21a266", 6, 614),
    ([("binary", b"\x00\xff")], "8ff4d68439037ca0", 0, 3232),
    ([("bool", False)], "a706dd2f4d197e6f", 15, 3695),
    ([("bool", True)], "5e41ab087439611e", 14, 286),
    ([("date", datetime.date(2024, 1, 1))], "153b8528e13a67e4", 4, 2020),
    ([("timestamp", datetime.datetime(2024, 1, 1))], "e45477432e1fd24f", 15, 591),
    ([("int64", 1), ("string", "a")], "ce0a7ff4953e746e", 14, 1134),
    ([("string", "a"), ("int64", 1)], "44fba000ca44a241", 1, 577),
]


def mix64(x: int) -> int:
    z = (x + 0x9E3779B97F4A7C15) & U64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & U64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & U64
    return z ^ (z >> 31)


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & U64
    return h


def column_hash(typ: str, value: Any) -> int:
    if typ == "string":
        return mix64(fnv1a64(value.encode("utf-8")))
    if typ == "binary":
        return mix64(fnv1a64(value))
    if typ == "date":
        return mix64((value - EPOCH.date()).days & U64)
    if typ == "timestamp":
        return mix64(((value - EPOCH) // datetime.timedelta(microseconds=1)) & U64)
    return mix64(int(value) & U64)


def reference_hash(key: list[tuple[str, Any]]) -> int:
    h = 0
    for typ, value in key:
        h = mix64(h ^ column_hash(typ, value))
    return h


def vectorised_hash(key: list[tuple[str, Any]]) -> int:
    return int(key_hash([pa.array([v], ARROW[t]) for t, v in key])[0])


def render(key: list[tuple[str, Any]]) -> str:
    def one(typ: str, value: Any) -> str:
        if typ == "string":
            return f'{typ} "{value}"'
        if typ == "binary":
            return f"{typ} 0x{value.hex()}"
        if typ == "bool":
            return f"{typ} {str(value).lower()}"
        if typ == "timestamp":
            return f"{typ} {value.isoformat()}"
        return f"{typ} {value}"

    parts = [one(t, v) for t, v in key]
    return parts[0] if len(parts) == 1 else "(" + ", ".join(parts) + ")"


def doc_vectors() -> list[tuple[str, str, int, int]]:
    body = DOC.read_text().split("<!-- bucket-vectors:begin -->", 1)[1].split("<!-- bucket-vectors:end -->", 1)[0]
    rows = [ln.strip().strip("|").split("|") for ln in body.strip().splitlines() if ln.strip().startswith("|")]
    out = []
    for cells in rows[2:]:
        key, h, b16, b4096 = (re.sub(r"^`|`$", "", c.strip()) for c in cells)
        out.append((key, h, int(b16), int(b4096)))
    return out


def test_the_doc_lists_the_tested_vectors() -> None:
    assert doc_vectors() == [(render(k), h, b16, b4096) for k, h, b16, b4096 in VECTORS]


def test_the_reference_and_the_vectorised_hash_give_the_spec_vectors() -> None:
    for key, expected, b16, b4096 in VECTORS:
        assert f"{reference_hash(key):016x}" == expected, render(key)
        assert f"{vectorised_hash(key):016x}" == expected, render(key)
        assert (int(expected, 16) % 16, int(expected, 16) % 4096) == (b16, b4096)


def test_bucket_of_assigns_hash_mod_buckets_for_a_composite_key() -> None:
    rows = [(1, "a"), (2, "bb"), (-5, ""), (2**40, "é")]
    table = pa.table({"id": pa.array([r[0] for r in rows], pa.int64()), "tag": [r[1] for r in rows]})
    for buckets in (1, 7, 16, 4096):
        expected = [reference_hash([("int64", k), ("string", t)]) % buckets for k, t in rows]
        assert bucket_of(table, ["id", "tag"], buckets).tolist() == expected


@settings(max_examples=60, deadline=None)
@given(ints=st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=20),
       texts=st.lists(st.text(max_size=12), min_size=1, max_size=20))
def test_vectorised_hash_matches_the_reference_on_random_keys(ints: list[int], texts: list[str]) -> None:
    n = min(len(ints), len(texts))
    got = key_hash([pa.array(ints[:n], pa.int64()), pa.array(texts[:n], pa.string())])
    expected = [reference_hash([("int64", i), ("string", s)]) for i, s in zip(ints[:n], texts[:n], strict=True)]
    assert got.dtype == np.uint64 and got.tolist() == expected


def test_sliced_and_chunked_string_columns_hash_as_their_values() -> None:
    arr = pa.chunked_array([pa.array(["x", "hello"]), pa.array(["", "a", "é"])])
    sliced = arr.slice(1, 3)
    assert key_hash([sliced]).tolist() == [reference_hash([("string", s)]) for s in ["hello", "", "a"]]
