"""Pins in the format: protocol 3, format 3 files older readers refuse, checkpoints carrying pins and expire
records (and, in older tables, the expire record in the checkpoint's metadata)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from maintd import Table, UnsupportedProtocolError
from maintd.table.log import checkpoint as checkpoint_module
from maintd.table.log import commitfile
from maintd.table.log.actions import Expire, Pin, Protocol, Unpin
from maintd.table.log.checkpoint import decode_checkpoint, encode_checkpoint
from maintd.table.log.tablelog import checkpoint_path, commit_path


def table_of(root: Path) -> Table:
    table = Table.create(str(root), "id:int64!,name:string", primary_key="id", buckets=2)
    for i in range(3):
        table.upsert(pa.table({"id": [i], "name": [f"n{i}"]}))
    return table


def test_the_first_pin_raises_the_table_to_protocol_3_and_format_3(tmp_path: Path) -> None:
    table = table_of(tmp_path / "t")
    assert table.snapshot().protocol == Protocol(min_reader_version=2, min_writer_version=2)
    table.pin(1, timedelta(hours=1), "q")
    assert table.snapshot().protocol == Protocol(min_reader_version=3, min_writer_version=3)
    assert b'"format":3' in (tmp_path / "t" / commit_path(4)).read_bytes()
    assert b'"format":2' in (tmp_path / "t" / commit_path(3)).read_bytes(), "older commits stay as they are"
    table.pin(2, timedelta(hours=1))
    assert b'"protocol"' not in (tmp_path / "t" / commit_path(5)).read_bytes(), "raised once"


def test_a_reader_of_protocol_2_refuses_a_pinned_table_by_its_format(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    table = table_of(tmp_path / "t")
    table.pin(1, timedelta(hours=1))
    for i in range(8):  # a checkpoint at 10 holds the pin
        table.upsert(pa.table({"id": [10 + i], "name": ["x"]}))
    assert (tmp_path / "t" / checkpoint_path(10)).exists()
    monkeypatch.setattr(commitfile, "FORMAT", 2)  # what the code of protocol 2 reads
    monkeypatch.setattr(checkpoint_module, "FORMAT", 2)
    with pytest.raises(UnsupportedProtocolError, match=r"checkpoint .* is in format 3; this maintd reads up to "
                                                         "format 2"):
        Table.open(table.uri).read()
    (tmp_path / "t" / checkpoint_path(10)).unlink()
    (tmp_path / "t" / "_log" / "_last_checkpoint").unlink()
    with pytest.raises(UnsupportedProtocolError, match="is in format 3; this maintd reads up to format 2"):
        Table.open(table.uri).read()


def test_a_checkpoint_round_trips_pins_and_the_expire_record(tmp_path: Path) -> None:
    table = table_of(tmp_path / "t")
    keep = table.pin(1, timedelta(hours=2), "keep")
    gone = table.pin(2, timedelta(hours=2), "gone")
    txn = table.new_transaction("EXPIRE")
    txn.expire(1, 123)
    txn.unpin(gone.id, "test")
    txn.commit()
    snap = table.snapshot()
    assert dict(snap.pins) == {keep.id: keep} and snap.expired == Expire(before=1, timestamp=123)

    data = encode_checkpoint(snap)
    back = decode_checkpoint(data, uri=table.uri, path=checkpoint_path(snap.version), version=snap.version).build()
    assert dict(back.pins) == dict(snap.pins) and back.expired == snap.expired and back.protocol == snap.protocol
    assert isinstance(next(iter(back.pins.values())), Pin)


def test_an_older_table_records_what_reclamation_expires_in_the_commit_parameters(tmp_path: Path) -> None:
    table = table_of(tmp_path / "t")
    txn = table.new_transaction("EXPIRE")
    txn.expire(2, 77)
    version = txn.commit()
    record = table.history(limit=1)[0]
    assert record.version == version and record.parameters["oldest_retained_version"] == 2
    assert b'"expire"' not in (tmp_path / "t" / commit_path(version)).read_bytes(), "readers of protocol 2 know none"
    snap = table.snapshot()
    assert snap.protocol.min_reader_version == 2 and snap.expired == Expire(before=2, timestamp=77)
    data = encode_checkpoint(snap)
    back = decode_checkpoint(data, uri=table.uri, path=checkpoint_path(snap.version), version=snap.version).build()
    assert back.expired == snap.expired, "carried in the checkpoint's metadata, which older readers ignore"


def test_unpin_of_a_pin_already_removed_changes_nothing(tmp_path: Path) -> None:
    table = table_of(tmp_path / "t")
    pin = table.pin(1, timedelta(hours=1))
    snap = table.snapshot()
    from maintd.table.log.snapshot import SnapshotBuilder

    builder = SnapshotBuilder.from_snapshot(snap)
    builder.apply(snap.version + 1, [Unpin(id=pin.id), Unpin(id=pin.id)])
    assert builder.build().pins == {}
    assert dataclasses.replace(snap, pins={}).pins == {}


def test_a_pin_must_expire_after_it_was_created() -> None:
    with pytest.raises(ValueError, match="expire after it was created"):
        Pin(id="p", version=1, created=10, expires=10)
