"""What the log may hold: self-verifying commit files, paths confined to the table, protocol versions enforced.

Damaged or hostile log entries are written here the way a broken writer (or an older one, whose commit files
have no header) would write them; every one must be refused with an error naming the file and the version,
never turn into wrong rows or into a file read or deleted outside the table.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from maintd import CorruptLogError, PathOutsideTableError, Table, UnsupportedProtocolError
from maintd.reclaim import reclaim_table
from maintd.storage import LocalStorage
from maintd.table.log.actions import AddFile, CommitInfo, Protocol, RemoveFile, action_to_json
from maintd.table.log.commitfile import decode_commit, encode_commit
from maintd.table.log.tablelog import commit_path

from .table_helpers import data_files_on_disk

SCHEMA = "id:int64!,name:string"


def _table(root: Path) -> Table:
    table = Table.create(str(root), SCHEMA, primary_key="id", buckets=1)
    table.upsert(pa.table({"id": [1, 2], "name": ["a", "b"]}))
    table.upsert(pa.table({"id": [3], "name": ["c"]}))
    return table


def _ids(uri: str, **kwargs: Any) -> list[int]:
    return sorted(r["id"] for r in Table.open(uri).read(**kwargs).to_pylist())


# -- truncation and damage -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("what", "cut"), [
    ("cut at a line boundary", lambda data: data[: data.rstrip(b"\n").rfind(b"\n") + 1]),
    ("cut to nothing", lambda data: b""),
    ("cut inside the header", lambda data: data[:20]),
    ("a flipped byte", lambda data: data.replace(b'"name"', b'"nbme"', 1) if b'"name"' in data else data[:-2] + b"x\n"),
])
def test_a_damaged_commit_file_is_corrupt_naming_the_file_and_the_version(tmp_path: Path, what: str, cut: Any) -> None:
    table = _table(tmp_path / "t")
    commit = tmp_path / "t" / commit_path(2)
    commit.write_bytes(cut(commit.read_bytes()))

    with pytest.raises(CorruptLogError) as caught:
        Table.open(table.uri).read()

    assert caught.value.version == 2 and caught.value.path == commit_path(2)
    assert commit.name in str(caught.value) and "version 2" in str(caught.value) and "Recover" in str(caught.value)


def test_a_commit_file_under_the_name_of_another_version_is_corrupt(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    (tmp_path / "t" / commit_path(2)).write_bytes((tmp_path / "t" / commit_path(1)).read_bytes())
    with pytest.raises(CorruptLogError, match="holds version 1, not the version its name gives"):
        Table.open(table.uri).read()


def test_a_commit_file_carries_a_header_with_its_format_version_count_and_checksum(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    data = (tmp_path / "t" / commit_path(2)).read_bytes()
    header, body = data.split(b"\n", 1)
    fields = json.loads(header)["header"]
    import hashlib

    assert fields == {"format": 2, "version": 2, "actions": len(body.splitlines()),
                      "sha256": hashlib.sha256(body).hexdigest()}
    assert decode_commit(data, uri=table.uri, path=commit_path(2), version=2) == table.log.read_commit(2)


def test_a_commit_file_of_a_newer_format_is_refused_naming_both_formats(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    commit = tmp_path / "t" / commit_path(2)
    commit.write_bytes(commit.read_bytes().replace(b'"format":2', b'"format":8', 1))
    with pytest.raises(UnsupportedProtocolError, match="format 8; this maintd reads up to format 7") as caught:
        Table.open(table.uri).read()
    assert (caught.value.required, caught.value.supported) == (8, 7)


# -- paths ----------------------------------------------------------------------------------------------------------


def _smuggle(table: Table, path: str, tmp_path: Path) -> Path:
    """Write a Parquet file at ``path`` (resolved against the table root) and commit an ``add`` naming it, as
    an older writer (no header) or a hostile one would; returns where the file is."""
    target = Path(path) if path.startswith("/") else Path(table.uri) / path
    target.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": pa.array([666], pa.int64()), "name": ["outside"],
                             "_maintd_op": pa.array([0], pa.int8())}), target)
    add = AddFile.model_construct(path=path, partition={}, bucket=0, kind="delta", level=0, rows=1, bytes=1,
                                  min_version=3, max_version=3, min_commit_time=1, max_commit_time=1, delete_rows=0,
                                  key_min=None, key_max=None, data_change=True, modification_time=1)
    info = CommitInfo(operation="UPSERT", timestamp=2**41, txn_id="hostile")
    body = "\n".join(action_to_json(a) for a in (info, add)) + "\n"
    (Path(table.uri) / commit_path(3)).write_text(body)
    return target


@pytest.mark.parametrize("where", ["../outside/x.parquet", "ABSOLUTE", "bucket-00000/../../outside/y.parquet",
                                   "./bucket-00000/z.parquet", "_log/data.parquet"])
def test_a_log_entry_naming_a_path_outside_the_table_is_corrupt_and_nothing_outside_is_read(
        tmp_path: Path, where: str) -> None:
    table = _table(tmp_path / "t")
    path = str(tmp_path / "elsewhere" / "abs.parquet") if where == "ABSOLUTE" else where
    outside = _smuggle(table, path, tmp_path)

    with pytest.raises(CorruptLogError, match=r"commit file .*version 3.* line 2 is not a valid log action") as caught:
        _ids(table.uri)

    assert caught.value.version == 3 and repr(path)[1:-1] in str(caught.value)
    assert outside.exists()
    with pytest.raises(CorruptLogError):  # nor is anything deleted because of it
        reclaim_table(Table.open(table.uri), orphan_grace=timedelta(0), force_short_grace=True)
    assert outside.exists()


@pytest.mark.parametrize("path", ["../x", "/etc/passwd", "a//b", "a/./b", "a/../../b", "a\\b", "", "a/"])
def test_a_storage_refuses_any_path_that_is_not_normalised_inside_its_root(tmp_path: Path, path: str) -> None:
    storage = LocalStorage(str(tmp_path / "t"))
    (tmp_path / "x").write_text("keep me")
    for call in (lambda: storage.read(path), lambda: storage.delete(path), lambda: storage.full_path(path),
                 lambda: storage.put_if_absent(path, b"x"), lambda: storage.write_atomic(path, b"x"),
                 lambda: storage.exists(path)):
        with pytest.raises(PathOutsideTableError, match="not a normalised path inside the table root"):
            call()
    assert (tmp_path / "x").read_text() == "keep me"


def test_a_symbolic_link_out_of_the_table_is_refused_and_deleting_it_removes_only_the_link(tmp_path: Path) -> None:
    root = tmp_path / "t"
    (root / "bucket-00000").mkdir(parents=True)
    secret = tmp_path / "secret.parquet"
    secret.write_text("not yours")
    (root / "bucket-00000" / "link.parquet").symlink_to(secret)
    (root / "linked-dir").symlink_to(tmp_path)
    storage = LocalStorage(str(root))
    with pytest.raises(PathOutsideTableError, match="outside the table root"):
        storage.read("bucket-00000/link.parquet")
    with pytest.raises(PathOutsideTableError):
        storage.full_path("linked-dir/secret.parquet")
    with pytest.raises(PathOutsideTableError):
        storage.delete("linked-dir/secret.parquet")
    assert storage.delete("bucket-00000/link.parquet") and secret.read_text() == "not yours"


def test_a_remove_naming_a_path_outside_the_table_cannot_even_be_built() -> None:
    with pytest.raises(ValueError, match="not a normalised path"):
        RemoveFile(path="../victim.parquet", deletion_time=0)


# -- protocol versions ----------------------------------------------------------------------------------------------


def _raise_protocol(table: Table, reader: int, writer: int) -> None:
    """Commit a protocol change the way a newer maintd would (this one refuses to write it)."""
    info = CommitInfo(operation="UPGRADE PROTOCOL", timestamp=2**41, txn_id="newer-maintd")
    proto = Protocol(min_reader_version=reader, min_writer_version=writer)
    version = table.version + 1
    (Path(table.uri) / commit_path(version)).write_bytes(encode_commit([info, proto], version=version))


def test_a_table_needing_a_newer_reader_is_refused_naming_both_versions(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    _raise_protocol(table, reader=8, writer=8)
    with pytest.raises(UnsupportedProtocolError, match="requires reader protocol version 8; this maintd reads up to "
                                                         "version 7") as caught:
        Table.open(table.uri).read()
    assert (caught.value.required, caught.value.supported) == (8, 7) and table.uri in str(caught.value)
    assert caught.value.features == ()


def test_a_table_needing_a_newer_writer_is_read_but_not_written_nor_reclaimed(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    _raise_protocol(table, reader=2, writer=8)
    files = data_files_on_disk(tmp_path / "t")
    reopened = Table.open(table.uri)
    assert _ids(table.uri) == [1, 2, 3]
    with pytest.raises(UnsupportedProtocolError, match="requires writer protocol version 8; this maintd writes up to "
                                                         "version 7"):
        reopened.upsert(pa.table({"id": [4], "name": ["d"]}))
    with pytest.raises(UnsupportedProtocolError):
        reclaim_table(reopened, orphan_grace=timedelta(0), force_short_grace=True)
    assert data_files_on_disk(tmp_path / "t") == files and reopened.version == 3


def test_a_new_table_is_created_at_the_newest_protocol(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    assert table.snapshot().protocol == Protocol(min_reader_version=2, min_writer_version=2)
