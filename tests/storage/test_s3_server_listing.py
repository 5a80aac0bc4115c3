"""The test S3 server's sorted listing (tests/s3app.py) answers ``ListObjectsV2`` exactly as moto's own
implementation does, page by page, on the same buckets; and reads only the keys it answers with."""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import s3app

moto_s3 = pytest.importorskip("moto.s3.models")
from moto.s3.models import FakeKey, S3Backend  # noqa: E402
from moto.s3.utils import _VersionedKeyStore  # noqa: E402

NAMES = ["a", "a!", "a/", "a/b", "a/b/c", "a/b/d", "a/bc", "a//x", "a/b/c/d/e", "b/x/y", "b/x", "ba", "é/x",
         "t/_log/00000000000000000001.json", "t/_log/00000000000000000002.json", "t/_log/_last_checkpoint",
         "t/_log/00000000000000000002.checkpoint.parquet", "t/bucket-0/x.parquet", "z", "a--b", "a-b"]
PREFIXES = [None, "", "a", "a/", "a/b", "a/b/", "t/_log/", "t/", "b/x", "nothing", "é"]
DELIMITERS = [None, "", "/", "-", "--"]


@pytest.fixture
def backends() -> Iterator[tuple[S3Backend, Any]]:
    """An in-process moto backend with the sorted listing installed, and moto's own listing (restored after)."""
    saved = {m: _VersionedKeyStore.__dict__.get(m) for m in s3app.TRACKED}
    original = S3Backend.list_objects_v2
    s3app.install_sorted_listing()
    try:
        yield S3Backend("us-east-1", "123456789012"), original
    finally:
        S3Backend.list_objects_v2 = original  # type: ignore[method-assign]
        for method, fn in saved.items():
            if fn is None:
                delattr(_VersionedKeyStore, method)
            else:
                setattr(_VersionedKeyStore, method, fn)


def names(result: Any) -> list[str]:
    return [k.name if isinstance(k, FakeKey) else k for k in result]


def every_page(list_fn: Any, backend: S3Backend, bucket: Any, prefix: str | None, delimiter: str | None,
               start_after: str | None, max_keys: int) -> list[tuple[list[str], bool]]:
    pages, token = [], None
    for _ in range(100):
        keys, truncated, token = list_fn(backend, bucket, prefix, delimiter, token, start_after, max_keys)
        pages.append((names(keys), truncated))
        if not truncated:
            return pages
    raise AssertionError("the listing did not end")


def fill(backend: S3Backend, name: str, *, versioned: bool) -> Any:
    backend.create_bucket(name, "us-east-1")
    if versioned:
        backend.put_bucket_versioning(name, "Enabled")
    rng = random.Random(11)
    keys = NAMES + ["".join(rng.choice("ab/-x") for _ in range(rng.randint(1, 6))) for _ in range(120)]
    for key in keys:
        backend.put_object(name, key, b"x")
    for key in rng.sample(sorted(set(keys)), 25):  # delete markers on the versioned bucket, gone keys otherwise
        backend.delete_object(name, key)
    backend.put_object(name, "a/b", b"again")  # a key overwritten after being deleted
    return backend.get_bucket(name)


@pytest.mark.parametrize("versioned", [False, True])
def test_sorted_listing_answers_as_moto_does(backends: tuple[S3Backend, Any], versioned: bool) -> None:
    backend, moto_list = backends
    bucket = fill(backend, f"listing-{versioned}", versioned=versioned)
    checked = 0
    for prefix in PREFIXES:
        for delimiter in DELIMITERS:
            for start_after in (None, "", "a/b", "a/b/", "t/_log/0", "zz"):
                for max_keys in (0, 1, 2, 3, 8, 1000):
                    ours = every_page(S3Backend.list_objects_v2, backend, bucket, prefix, delimiter, start_after,
                                      max_keys)
                    theirs = every_page(moto_list, backend, bucket, prefix, delimiter, start_after, max_keys)
                    assert ours == theirs, (prefix, delimiter, start_after, max_keys)
                    checked += 1
    assert checked == len(PREFIXES) * len(DELIMITERS) * 6 * 6


def test_the_index_follows_deletes_and_an_emptied_bucket(backends: tuple[S3Backend, Any]) -> None:
    backend, moto_list = backends
    backend.create_bucket("churn", "us-east-1")
    for i in range(50):
        backend.put_object("churn", f"k/{i:03d}", b"x")
    for i in range(0, 50, 3):
        backend.delete_object("churn", f"k/{i:03d}")
    bucket = backend.get_bucket("churn")
    assert every_page(S3Backend.list_objects_v2, backend, bucket, "k/", "/", None, 7) == \
        every_page(moto_list, backend, bucket, "k/", "/", None, 7)
    bucket.keys.clear()
    assert S3Backend.list_objects_v2(backend, bucket, None, None, None, None, 10) == ([], False, None)


def test_a_short_listing_reads_only_the_keys_it_answers_with(backends: tuple[S3Backend, Any],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The first 8 keys below a prefix among 5,000 others: the index is read for those 8 (and the next one),
    never walked; moto's own listing reads every key of the bucket."""
    backend, moto_list = backends
    backend.create_bucket("long", "us-east-1")
    for i in range(5000):
        backend.put_object("long", f"t/_log/{i:020d}.json", b"x")
    bucket = backend.get_bucket("long")
    read: list[str] = []
    real_get = _VersionedKeyStore.__getitem__
    monkeypatch.setattr(_VersionedKeyStore, "__getitem__", lambda self, key: read.append(key) or real_get(self, key))
    keys, truncated, _ = S3Backend.list_objects_v2(backend, bucket, "t/_log/", None, None, None, 8)
    assert truncated and names(keys) == [f"t/_log/{i:020d}.json" for i in range(8)]
    assert len(read) == 9, "the 8 keys answered and the one after them (which makes the answer truncated)"
    read.clear()
    assert names(moto_list(backend, bucket, "t/_log/", None, None, None, 8)[0]) == names(keys)
    assert len(read) >= 5000, "moto's own listing reads every key"
