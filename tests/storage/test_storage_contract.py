"""The storage contract, on local disk, on a real S3 server (moto) and on a real Azure Blob server (Azurite).

Every storage must: create with put-if-absent exactly once (also under concurrent callers), replace
atomically, read back what it wrote, list a directory's direct children (in lexical order when it says
so), list the first names of a directory from its start, walk a tree, delete idempotently, refuse paths
that leave the table, and stream Parquet through its pyarrow filesystem.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from maintd.errors import PathOutsideTableError
from maintd.storage import Storage, botos3, storage_for_uri


@pytest.fixture(params=["local", "s3", "s3 in a forked child", "azure"])
def storage(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Storage]:
    if request.param == "local":
        yield storage_for_uri(str(tmp_path / "t"))
        return
    if request.param == "s3 in a forked child":  # what a process forked after obstore's first request uses
        monkeypatch.setattr(botos3, "_forked_after_obstore", True)
    root = request.getfixturevalue(f"{request.param.split()[0]}_root")
    yield storage_for_uri(f"{root}/warehouse/t")


def test_put_if_absent_creates_once(storage: Storage) -> None:
    assert storage.put_if_absent("_log/a.json", b"first") is True
    assert storage.put_if_absent("_log/a.json", b"second") is False
    assert storage.read("_log/a.json") == b"first"
    assert storage.exists("_log/a.json")
    assert not storage.exists("_log/b.json")


def test_put_if_absent_has_one_winner_among_concurrent_callers(storage: Storage) -> None:
    results: list[tuple[int, bool]] = []
    start = threading.Barrier(8)

    def race(i: int) -> None:
        start.wait()
        results.append((i, storage.put_if_absent("_log/race.json", f"writer {i}".encode())))

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [i for i, created in results if created]
    assert len(results) == 8 and len(winners) == 1
    assert storage.read("_log/race.json") == f"writer {winners[0]}".encode()


def test_write_atomic_replaces_and_read_of_missing_raises(storage: Storage) -> None:
    storage.write_atomic("_log/_hint", b"1")
    storage.write_atomic("_log/_hint", b"22")
    assert storage.read("_log/_hint") == b"22"
    with pytest.raises(FileNotFoundError):
        storage.read("_log/missing")


def test_listing_direct_children_first_names_and_walk(storage: Storage) -> None:
    names = [f"{n:05d}.json" for n in (7, 3, 11, 1, 5)]
    for n in names:
        storage.put_if_absent(f"_log/{n}", b"x" * 3)
    storage.put_if_absent("_log/sub/deeper.json", b"y")
    storage.put_if_absent("data/p=1/f.parquet", b"z")
    before = time.time() * 1000
    listed = storage.list_dir("_log")
    assert sorted(f.path for f in listed) == sorted(f"_log/{n}" for n in names)
    if storage.lists_in_order:
        assert [f.path for f in listed] == sorted(f.path for f in listed)
    assert all(f.size == 3 for f in listed)
    assert all(abs(f.mtime_ms - before) < 120_000 for f in listed)  # last-modified, in ms
    assert [f.path for f in storage.list_first("_log", 2)] == ["_log/00001.json", "_log/00003.json"]
    assert storage.list_dir("nothing-here") == []
    walked = {f.path for f in storage.walk()}
    assert walked == {f"_log/{n}" for n in names} | {"_log/sub/deeper.json", "data/p=1/f.parquet"}
    assert {f.path for f in storage.walk("data")} == {"data/p=1/f.parquet"}
    assert storage.list_subdirs("") == ["_log", "data"]


def test_delete_is_idempotent(storage: Storage) -> None:
    storage.put_if_absent("data/f.parquet", b"z")
    assert storage.delete("data/f.parquet") is True
    assert storage.delete("data/f.parquet") is False
    assert not storage.exists("data/f.parquet")


@pytest.mark.parametrize("bad", ["/etc/passwd", "../escape", "a/../../b", "a//b", "./a", "a\\b"])
def test_paths_leaving_the_table_are_refused(storage: Storage, bad: str) -> None:
    for op in (lambda: storage.read(bad), lambda: storage.put_if_absent(bad, b"x"), lambda: storage.delete(bad),
               lambda: storage.write_atomic(bad, b"x"), lambda: storage.full_path(bad)):
        with pytest.raises(PathOutsideTableError):
            op()


def test_parquet_streams_through_the_pyarrow_filesystem(storage: Storage) -> None:
    data = pa.table({"id": list(range(1000)), "v": [f"row {i}" for i in range(1000)]})
    full = storage.full_path("data/b=0/f.parquet")
    storage.makedirs("data/b=0")
    pq.write_table(data, full, filesystem=storage.filesystem)
    storage.make_durable("data/b=0/f.parquet")
    info: Any = storage.filesystem.get_file_info(full)
    assert info.size > 0
    assert pq.read_table(full, filesystem=storage.filesystem).equals(data)
    with storage.filesystem.open_input_file(full) as fh:
        assert pq.ParquetFile(fh).metadata.num_rows == 1000
    assert [f.path for f in storage.walk("data")] == ["data/b=0/f.parquet"]


CHANGE_SECONDS = 0.002
"""How long a stand-in change of ``update_atomic`` takes: it widens the window between the read and the write."""


def test_update_atomic_loses_no_update_among_concurrent_callers(storage: Storage) -> None:
    """Read-change-write as one step: every increment of a counter by 4 threads counts."""
    start = threading.Barrier(4)

    def bump(current: bytes | None) -> bytes:
        value = int(current or b"0")
        time.sleep(CHANGE_SECONDS)
        return str(value + 1).encode()

    def worker() -> None:
        start.wait()
        for _ in range(6):
            storage.update_atomic("_log/_counter", bump)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert storage.read("_log/_counter") == b"24"
    assert storage.update_atomic("_log/_counter", lambda current: None) == b"24"  # no change: nothing written


def test_delete_many_deletes_in_bulk_and_takes_paths_already_gone(storage: Storage) -> None:
    paths = [f"data/b={i % 3}/f{i}.parquet" for i in range(25)]
    for p in paths:
        storage.put_if_absent(p, b"z")
    assert storage.delete_many([*paths, "data/never-there.parquet"]) == {}
    assert storage.walk("data") == []
    with pytest.raises(PathOutsideTableError):
        storage.delete_many(["data/ok", "../escape"])
