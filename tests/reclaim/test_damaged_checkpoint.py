"""Reclamation proves that the checkpoint it relies on reads before deleting the commits it replaces.

It used to check only that the checkpoint at the oldest retained version existed: with that checkpoint damaged,
it deleted the commits that could stand in for it (after logging the damage itself), and the table was
unreadable for good (CorruptLogError).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from maintd import Table
from maintd.reclaim import reclaim_table
from maintd.storage import LocalStorage
from maintd.table.log.tablelog import checkpoint_path, commit_path

NOW = datetime.now(UTC) + timedelta(hours=1)


def at_version_10(root: Path) -> Table:
    """A table whose latest version, 10, has a checkpoint (so reclamation with retention 0 relies on it)."""
    table = Table.create(str(root), "id:int64!,v:string", primary_key="id", buckets=2,
                         properties={"log.checkpoint.interval": 5, "acid.data.retain.hours": 0})
    for i in range(10):
        table.upsert(pa.Table.from_pylist([{"id": i % 4, "v": f"v{i}"}]))
    assert table.log.checkpoint_exists(10) and table.version == 10
    return table


def damage(root: Path, version: int) -> None:
    path = root / checkpoint_path(version)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # a flipped byte in the middle: Parquet may still open, the checksum fails
    path.write_bytes(bytes(data))


def test_a_damaged_checkpoint_reclamation_relies_on_is_written_again_before_any_commit_goes(tmp_path: Path) -> None:
    root = tmp_path / "t"
    table = at_version_10(root)
    expected = table.read()
    damage(root, 10)
    report = reclaim_table(Table.open(str(root)), now=NOW)
    fresh = Table.open(str(root))
    assert fresh.read().equals(expected) and fresh.log.read_checkpoint(10).version == 10
    assert report.complete and report.checkpoint_written == 10 and report.oldest_retained_version == 10
    assert not (root / commit_path(9)).exists()  # the commits before it went, once it read


class KeepsItsCheckpoints(LocalStorage):
    """A storage on which the damaged checkpoint cannot be deleted (so it cannot be written again)."""

    def delete(self, path: str) -> bool:
        if path == checkpoint_path(10):
            raise PermissionError(13, "Permission denied", path)
        return super().delete(path)


def test_a_checkpoint_that_cannot_be_made_to_read_keeps_every_commit_and_every_data_file(tmp_path: Path) -> None:
    root = tmp_path / "t"
    table = at_version_10(root)
    expected = {v: table.snapshot(v) for v in (9, 10)}
    damage(root, 10)
    files = sorted(p.relative_to(root) for p in root.rglob("*.parquet") if "_log" not in p.parts)
    report = reclaim_table(Table(KeepsItsCheckpoints(str(root))), now=NOW)
    assert not report.complete and report.log_files_deleted == 0 and report.data_files_deleted == 0
    assert all((root / commit_path(v)).exists() for v in range(11))
    assert sorted(p.relative_to(root) for p in root.rglob("*.parquet") if "_log" not in p.parts) == files
    reopened = Table.open(str(root))  # version 9 still loads from the commits (retention would refuse a read)
    assert all(reopened.log.load_snapshot(v).files == expected[v].files for v in (9, 10))


@pytest.mark.parametrize("version", [5])
def test_a_damaged_checkpoint_below_the_retained_version_changes_nothing(tmp_path: Path, version: int) -> None:
    root = tmp_path / "t"
    table = at_version_10(root)
    expected = table.read()
    damage(root, version)  # goes with the log it summarises
    assert reclaim_table(Table.open(str(root)), now=NOW).complete
    assert Table.open(str(root)).read().equals(expected)
