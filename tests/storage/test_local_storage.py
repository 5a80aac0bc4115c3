"""Local storage: durable publication (the directory is synced after a commit appears in it)."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

from maintd import Table
from maintd.storage import LocalStorage, storage_for_uri
from maintd.table.log.tablelog import LAST_CHECKPOINT, commit_path


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every path ``os.fsync`` is called on, in order."""
    import maintd.storage.local as local

    seen: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(local.os, "fsync", fsync)
    return seen


def test_publishing_a_commit_syncs_the_file_then_the_log_directory(tmp_path: Path, synced: list[str]) -> None:
    table = Table.create(str(tmp_path / "t"), "id:int64!,name:string", primary_key="id", buckets=1)
    synced.clear()
    version = table.upsert(pa.table({"id": [1], "name": ["a"]}))

    log_dir = str(tmp_path / "t" / "_log")
    assert log_dir in synced, "the new directory entry of the commit must survive a power loss"
    dir_sync = synced.index(log_dir)
    assert any(p.startswith(log_dir + "/.tmp-") for p in synced[:dir_sync]), "the commit's bytes are synced first"
    assert (tmp_path / "t" / commit_path(version)).exists()
    data = [p for p in synced if p.endswith(".parquet")]
    assert data and synced.index(data[0]) < dir_sync, "the data file is durable before the commit naming it"


def test_replacing_a_hint_syncs_its_directory(tmp_path: Path, synced: list[str]) -> None:
    storage = LocalStorage(str(tmp_path / "t"))
    storage.write_atomic(LAST_CHECKPOINT, b'{"version": 1}')
    assert synced[-1] == str(tmp_path / "t" / "_log")


def test_local_paths_and_file_uris_get_local_storage(tmp_path: Path) -> None:
    assert isinstance(storage_for_uri(str(tmp_path)), LocalStorage)
    assert storage_for_uri(f"file://{tmp_path}").uri == str(tmp_path)


def test_full_paths_of_many_files_are_those_of_full_path(tmp_path: Path) -> None:
    storage = LocalStorage(str(tmp_path))
    (tmp_path / "p=1" / "bucket-00000").mkdir(parents=True)
    (tmp_path / "p=1" / "bucket-00000" / "a.parquet").write_bytes(b"x")
    paths = ["p=1/bucket-00000/a.parquet", "p=1/bucket-00000/gone.parquet", "top.parquet", "p=1/bucket-00001/b"]
    assert storage.full_paths(paths) == [storage.full_path(p) for p in paths]
    assert storage.full_paths(paths)[0] == str(tmp_path / "p=1" / "bucket-00000" / "a.parquet")


@pytest.mark.parametrize("link", ["file", "directory"])
def test_full_paths_refuse_a_link_leading_outside_the_table(tmp_path: Path, link: str) -> None:
    from maintd.errors import PathOutsideTableError

    root, outside = tmp_path / "t", tmp_path / "outside"
    (root / "bucket-00000").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.parquet").write_bytes(b"x")
    (root / "bucket-00000" / "ok.parquet").write_bytes(b"x")
    if link == "file":
        (root / "bucket-00000" / "link.parquet").symlink_to(outside / "secret.parquet")
        bad = "bucket-00000/link.parquet"
    else:
        (root / "linked").symlink_to(outside)
        bad = "linked/secret.parquet"
    storage = LocalStorage(str(root))
    with pytest.raises(PathOutsideTableError, match="outside the table root"):
        storage.full_paths(["bucket-00000/ok.parquet", bad])
    with pytest.raises(PathOutsideTableError):
        storage.full_paths(["../outside/secret.parquet"])


def test_full_paths_follow_a_link_that_stays_inside_the_table(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "f.parquet").write_bytes(b"x")
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    (tmp_path / "real" / "g.parquet").symlink_to(tmp_path / "real" / "f.parquet")
    storage = LocalStorage(str(tmp_path))
    assert storage.full_paths(["alias/f.parquet", "real/g.parquet"]) == [str(tmp_path / "alias" / "f.parquet"),
                                                                          str(tmp_path / "real" / "g.parquet")]
