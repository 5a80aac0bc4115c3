"""Snapshots: the names of partitions, their directories, and what a replay keeps."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest

from maintd import Table, UnsupportedProtocolError
from maintd.table.log.actions import READER_VERSION, WRITER_VERSION, Protocol, RemoveFile
from maintd.table.log.snapshot import (
    TXN_RECORDS_MAX,
    TXN_WINDOW_MS,
    SnapshotBuilder,
    check_readable,
    format_partition,
    partition_path,
)


def test_a_partition_is_shown_as_its_comma_joined_columns_and_no_partition_as_unpartitioned() -> None:
    assert format_partition((("ds", "2026-01-05"), ("region", None))) == "ds=2026-01-05,region=None"
    assert format_partition(()) == "(unpartitioned)"


def test_a_partition_directory_quotes_every_value_and_names_null_values() -> None:
    assert partition_path({"ds": None, "region": "eu west/1"}, ["ds", "region"]) == "ds=__NULL__/region=eu%20west%2F1"
    assert partition_path({}, []) == ""


def builder(tmp_path: Path, *, version: int, base_checkpoint: int, timestamp: int,
            times: dict[int, int], interval: int = 10) -> SnapshotBuilder:
    """A replay at ``version`` of a table with checkpoints every ``interval`` versions and a record at each of
    ``times``."""
    metadata = Table.create(str(tmp_path / "t"), "id:int64!", primary_key="id", buckets=1,
                            properties={"log.checkpoint.interval": interval}).snapshot().metadata
    return SnapshotBuilder(version=version, timestamp=timestamp, metadata=metadata, base_checkpoint=base_checkpoint,
                           txns={v: (f"t{v}", t) for v, t in times.items()})


def test_a_replay_keeps_at_most_the_newest_records_of_the_limit(tmp_path: Path) -> None:
    kept = builder(tmp_path, version=3000, base_checkpoint=-1, timestamp=10**9,
                   times={v: 0 for v in range(3001)}).kept_txns()
    assert min(kept) == 3000 - TXN_RECORDS_MAX + 1 and max(kept) == 3000 and len(kept) == TXN_RECORDS_MAX
    # two checkpoint intervals when that is more
    kept = builder(tmp_path / "long", version=5000, base_checkpoint=-1, timestamp=10**9, interval=1500,
                   times={v: 0 for v in range(5001)}).kept_txns()
    assert min(kept) == 2001 and len(kept) == 3000


def test_a_replay_keeps_the_records_of_the_last_minutes_however_old_the_checkpoint(tmp_path: Path) -> None:
    times = {v: v * 1000 for v in range(2000, 3001)}  # one commit a second
    kept = builder(tmp_path, version=3000, base_checkpoint=2995, timestamp=3_000_000, times=times).kept_txns()
    assert min(kept) == (3_000_000 - TXN_WINDOW_MS) // 1000 and max(kept) == 3000  # a record exactly that old stays


@pytest.mark.parametrize(("base_checkpoint", "oldest"), [(2950, 2951), (2995, 2981), (-1, 2001)])
def test_a_replay_keeps_every_record_since_the_base_checkpoint_or_the_last_two_intervals(
        tmp_path: Path, base_checkpoint: int, oldest: int) -> None:
    """Old records (by time) stay from the base checkpoint on, and always for the last two checkpoint intervals."""
    times = {v: 0 for v in range(2001, 3001)}
    kept = builder(tmp_path, version=3000, base_checkpoint=base_checkpoint, timestamp=10**9, times=times).kept_txns()
    assert min(kept) == oldest and list(kept) == list(range(oldest, 3001))


def test_a_table_for_a_newer_writer_is_refused_naming_both_versions(tmp_path: Path) -> None:
    snapshot = Table.create(str(tmp_path / "t"), "id:int64!", primary_key="id", buckets=1).snapshot()
    newer = replace(snapshot, protocol=Protocol(min_reader_version=1, min_writer_version=WRITER_VERSION + 1))
    with pytest.raises(UnsupportedProtocolError) as refused:
        newer.check_writable("t")
    assert (refused.value.required, refused.value.supported) == (WRITER_VERSION + 1, WRITER_VERSION)
    snapshot.check_writable("t")


def test_a_version_without_a_transaction_record_has_no_transaction_id(tmp_path: Path) -> None:
    snapshot = Table.create(str(tmp_path / "t"), "id:int64!", primary_key="id", buckets=1).snapshot()
    assert snapshot.txn_at(snapshot.version) and snapshot.txn_at(snapshot.version + 1) is None


def test_a_replay_revives_a_removed_file_added_again_and_ignores_removing_a_file_it_does_not_hold(
        tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "t"), "id:int64!", primary_key="id", buckets=1)
    table.upsert(pa.table({"id": [1]}))
    snapshot = table.snapshot()
    (path, added), = snapshot.files.items()
    replay = SnapshotBuilder.from_snapshot(snapshot)
    replay.apply(snapshot.version + 1, [RemoveFile(path=path, deletion_time=1),
                                        RemoveFile(path="gone", deletion_time=1)])
    assert path in replay.tombstones and path not in replay.files and "gone" not in replay.tombstones
    replay.apply(snapshot.version + 2, [added])
    assert replay.files[path] == added and path not in replay.tombstones


def test_a_commit_without_commit_info_is_recorded_with_an_empty_transaction_id(tmp_path: Path) -> None:
    snapshot = Table.create(str(tmp_path / "t"), "id:int64!", primary_key="id", buckets=1).snapshot()
    replay = SnapshotBuilder.from_snapshot(snapshot)
    replay.apply(snapshot.version + 1, [])
    assert replay.txns[snapshot.version + 1] == ("", snapshot.timestamp)
    assert replay.build().txn_at(snapshot.version + 1) == ""


def test_a_replay_without_metadata_or_without_protocol_builds_no_snapshot(tmp_path: Path) -> None:
    snapshot = Table.create(str(tmp_path / "t"), "id:int64!", primary_key="id", buckets=1).snapshot()
    for partial in (SnapshotBuilder(metadata=snapshot.metadata), SnapshotBuilder(protocol=snapshot.protocol)):
        with pytest.raises(ValueError, match=r"^log has no metadata or protocol action before this version$"):
            partial.build()


def test_a_table_for_a_newer_reader_is_refused_naming_both_versions() -> None:
    said = f"^the table requires reader protocol version {READER_VERSION + 1}; this maintd reads up to version "
    with pytest.raises(UnsupportedProtocolError, match=said + f"{READER_VERSION}: upgrade") as refused:
        check_readable(Protocol(min_reader_version=READER_VERSION + 1, min_writer_version=READER_VERSION + 1))
    assert (refused.value.required, refused.value.supported) == (READER_VERSION + 1, READER_VERSION)
    check_readable(Protocol(min_reader_version=6, min_writer_version=6))
    check_readable(Protocol(min_reader_version=READER_VERSION, min_writer_version=WRITER_VERSION, reader_features=(),
                            writer_features=()))
