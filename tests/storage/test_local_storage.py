"""Local storage: durable publication (the directory is synced after a commit appears in it)."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

from maintd import Table
from maintd.storage import LocalStorage, storage_for_uri
from maintd.table.log import LAST_CHECKPOINT, commit_path


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
    table = Table.create(str(tmp_path / "t"), "id:int64,name:string", primary_key="id", buckets=1)
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
