"""The log's lookups one at a time, on log directories written by hand (no table behind them).

A commit or checkpoint here is an empty file with the right name: the lookups only look at names and at what
exists; the reads that decode a file are tested on real tables in test_tablelog.py.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from loguru import logger

from maintd import CorruptLogError, Table, TableNotFoundError, UnsupportedProtocolError, VersionNotFoundError
from maintd.storage import FileInfo, LocalStorage
from maintd.table.log.actions import READER_VERSION, WRITER_VERSION, CommitInfo, Protocol, RemoveFile
from maintd.table.log.snapshot import SnapshotBuilder
from maintd.table.log.tablelog import (
    LAST_CHECKPOINT,
    LOG_DIR,
    TableLog,
    checkpoint_path,
    commit_path,
    oldest_buildable,
    parse_log_name,
)

from ..table_helpers import CountingStorage, OrderedStorage


def _log(root: Path, commits: range | list[int] = (), checkpoints: range | list[int] = (), *,
         junk: int = 0) -> None:
    """A log directory holding empty commits and checkpoints, and ``junk`` names sorting before every log name."""
    (root / LOG_DIR).mkdir(parents=True, exist_ok=True)
    for v in commits:
        (root / commit_path(v)).write_bytes(b"")
    for v in checkpoints:
        (root / checkpoint_path(v)).write_bytes(b"")
    for i in range(junk):
        (root / LOG_DIR / f".tmp-{i:04d}").write_bytes(b"")


class LimitsStorage(OrderedStorage):
    """Lists in lexical order and records the limit of every bounded listing."""

    def __init__(self, uri: str) -> None:
        super().__init__(uri)
        self.limits: list[int] = []

    def list_first(self, path: str, limit: int) -> list[FileInfo]:
        self.limits.append(limit)
        assert len(self.limits) <= 5, f"listing without end: {self.limits}"
        return super().list_first(path, limit)


# -- names -------------------------------------------------------------------------------------------------------------


def test_a_log_name_is_read_from_the_last_segment_of_a_path_however_deep() -> None:
    assert parse_log_name(f"warehouse/db/t/{commit_path(7)}") == ("commit", 7)
    assert parse_log_name(f"s3://bucket/t/{checkpoint_path(20)}") == ("checkpoint", 20)
    assert parse_log_name(commit_path(7).removeprefix("_log/")) == ("commit", 7)


def test_a_new_table_publishes_its_first_commit_in_the_format_of_protocol_2(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "t"), "id:int64!", primary_key="id", buckets=1)
    header = json.loads((tmp_path / "t" / commit_path(0)).read_bytes().split(b"\n", 1)[0])
    assert header["header"]["format"] == 2 == table.snapshot().protocol.min_writer_version  # docs/format.md


@pytest.mark.parametrize(("commits", "checkpoints", "hint", "answer", "calls"), [
    ([0, 1], [0], 0, True, {"exists": 1}),  # the hint is enough
    ([5, 6], [5], 5, True, {"exists": 1}),  # also once commit 0 is reclaimed
    ([0], [], None, True, {"exists": 2}),  # commit 0 is enough
    ([5, 6], [], None, True, {"exists": 2, "list_dir": 1}),  # else the log is listed for a commit
    ([], [5], None, False, {"exists": 2, "list_dir": 1}),  # a checkpoint alone is no table
])
def test_a_location_is_a_table_by_its_hint_its_first_commit_or_a_commit_listed(
        tmp_path: Path, commits: list[int], checkpoints: list[int], hint: int | None, answer: bool,
        calls: dict[str, int]) -> None:
    _log(tmp_path, commits, checkpoints)
    if hint is not None:
        _hint(tmp_path, hint)
    storage = CountingStorage(str(tmp_path))
    assert TableLog(storage).is_table() is answer
    assert storage.calls == calls


@pytest.mark.parametrize(("commits", "checkpoints", "known", "latest", "calls"), [
    # no hint: commit 0 is there, so nothing was reclaimed: the probe starts at 0, or at the version known
    ([0], [], None, 0, {"read": 1, "exists": 3}),
    (range(10), [], None, 9, {"read": 1, "exists": 10}),
    (range(10), [], 8, 9, {"read": 1, "exists": 5}),
    # no hint and no commit 0: the newest commit listed
    (range(5, 9), [5], None, 8, {"read": 1, "exists": 3, "list_dir": 1}),
    (range(5, 9), [5], 6, 8, {"read": 1, "exists": 3, "list_dir": 1}),
])
def test_a_lookup_without_a_hint_starts_at_commit_0_or_the_version_known_else_at_the_newest_listed(
        tmp_path: Path, commits: range | list[int], checkpoints: list[int], known: int | None, latest: int,
        calls: dict[str, int]) -> None:
    _log(tmp_path, commits, checkpoints)
    storage = CountingStorage(str(tmp_path))
    assert TableLog(storage).latest_version(hint=known) == latest
    assert storage.calls == calls


@pytest.mark.parametrize("hint", [None, 0])
def test_a_known_version_that_is_gone_is_no_start_for_the_lookup(tmp_path: Path, hint: int | None) -> None:
    """A process may know a version the location no longer has (the table was dropped and created again)."""
    _log(tmp_path, range(4), [0])
    if hint is not None:
        _hint(tmp_path, hint)
    assert TableLog(CountingStorage(str(tmp_path))).latest_version(hint=9) == 3


def test_a_lookup_from_a_checkpoint_at_version_0_probes_from_it(tmp_path: Path) -> None:
    _log(tmp_path, [0], [0])
    _hint(tmp_path, 0)
    storage = CountingStorage(str(tmp_path))
    assert TableLog(storage).latest_version() == 0
    # the hint; its checkpoint and commit; the commit the probe starts from; the next one
    assert storage.calls == {"read": 1, "exists": 4}


# -- oldest_buildable ------------------------------------------------------------------------------------------------


def test_without_a_checkpoint_in_the_run_the_oldest_buildable_version_is_the_runs_first_commit() -> None:
    assert oldest_buildable([3, 4, 5], [], 5) == 3
    assert oldest_buildable([3, 4, 5], [1, 2], 5) == 3  # checkpoints below the run do not count


# -- latest version on a store listing in order ------------------------------------------------------------------------


@pytest.mark.parametrize(("junk", "limits"), [(0, [8]), (7, [8]), (8, [8, 64]), (70, [8, 64, 512])])
def test_an_ordered_lookup_lists_eight_names_then_eight_times_more_until_it_finds_a_commit(
        tmp_path: Path, junk: int, limits: list[int]) -> None:
    _log(tmp_path, range(3), junk=junk)
    storage = LimitsStorage(str(tmp_path))
    assert TableLog(storage).latest_version() == 2
    assert storage.limits == limits


@pytest.mark.parametrize(("junk", "limits"), [(0, [8]), (6, [8]), (7, [8, 64])])  # and the checkpoint
def test_an_ordered_lookup_without_a_commit_stops_at_a_short_page(tmp_path: Path, junk: int, limits: list[int]
                                                                   ) -> None:
    _log(tmp_path, [], checkpoints=[0], junk=junk)
    storage = LimitsStorage(str(tmp_path))
    with pytest.raises(TableNotFoundError) as err:
        TableLog(storage).latest_version()
    assert str(err.value) == f"no table at {storage.uri} (no commits in _log/)"
    assert storage.limits == limits


# -- oldest reconstructible version ------------------------------------------------------------------------------------


def test_a_location_without_commits_has_no_oldest_version(tmp_path: Path) -> None:
    _log(tmp_path, [], checkpoints=[4])
    storage = CountingStorage(str(tmp_path))
    with pytest.raises(TableNotFoundError) as err:
        TableLog(storage).oldest_reconstructible_version()
    assert str(err.value) == f"no table at {storage.uri}"


# -- the reclamation watermark ---------------------------------------------------------------------------------------


def test_the_tombstones_removed_at_or_before_the_watermark_are_pruned_and_the_later_ones_kept(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "t"), "id:int64!", primary_key="id", buckets=1)
    log = TableLog(LocalStorage(table.uri))
    tombstones = {p: RemoveFile(path=p, deletion_time=t) for p, t in (("a", 100), ("b", 101))}
    snapshot = replace(table.snapshot(), tombstones=MappingProxyType(tombstones))
    assert log.prune_tombstones(snapshot) is snapshot  # no watermark yet
    log.advance_reclaimed_watermark(0, 100)
    assert set(log.prune_tombstones(snapshot).tombstones) == {"b"}  # "a" was removed exactly at the watermark
    log.advance_reclaimed_watermark(0, 99)
    assert set(log.prune_tombstones(snapshot).tombstones) == {"b"}  # the watermark never moves back


# -- the checkpoint hint ---------------------------------------------------------------------------------------------


class WritesStorage(LocalStorage):
    """Records every atomic (over)write."""

    def __init__(self, uri: str) -> None:
        super().__init__(uri)
        self.writes: list[str] = []

    def write_atomic(self, path: str, data: bytes) -> None:
        self.writes.append(path)
        super().write_atomic(path, data)


def test_the_checkpoint_hint_only_ever_moves_forward_and_is_written_only_then(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "t"), "id:int64!", primary_key="id", buckets=1)
    table.upsert(pa.table({"id": [1]}))
    for _ in range(2):
        table.new_transaction("NOOP").commit()
    storage = WritesStorage(table.uri)
    log = TableLog(storage)
    written = log.write_checkpoint(table.snapshot(3))
    assert written.base_checkpoint == 3  # the snapshot returned now stands on the checkpoint
    assert log.last_checkpoint_hint() == 3 and storage.writes == [LAST_CHECKPOINT]
    assert json.loads((tmp_path / "t" / LAST_CHECKPOINT).read_text()) == {"version": 3, "files": 1}  # docs/format.md
    log.write_checkpoint(table.snapshot(3))  # the same version again: the hint is already there
    log.write_checkpoint(table.snapshot(1))  # an older one (reclamation's): the hint stays
    assert log.last_checkpoint_hint() == 3 and storage.writes == [LAST_CHECKPOINT]
    assert log.checkpoint_exists(1)


# -- reading a checkpoint --------------------------------------------------------------------------------------------


def test_a_checkpoint_written_before_transaction_records_takes_its_record_from_its_commit(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "t"), "id:int64!", primary_key="id", buckets=1)
    table.upsert(pa.table({"id": [1]}))
    table.log.write_checkpoint(table.snapshot(1))
    path = tmp_path / "t" / checkpoint_path(1)
    pq.write_table(pq.read_table(path).replace_schema_metadata(None), path)  # the format before the records
    (info,) = [a for a in table.log.read_commit(1) or [] if isinstance(a, CommitInfo)]
    assert table.log.read_checkpoint(1).txns == {1: (info.txn_id, 0)}
    (tmp_path / "t" / commit_path(1)).unlink()
    assert table.log.read_checkpoint(1).txns == {}  # the commit is gone: nothing tells any more


def test_a_corrupt_checkpoint_is_reported_naming_the_table(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "t"), "id:int64!", primary_key="id", buckets=1)
    table.log.write_checkpoint(table.snapshot(0))
    (tmp_path / "t" / checkpoint_path(0)).write_bytes(b"not parquet")
    with pytest.raises(CorruptLogError) as err:
        TableLog(LocalStorage(table.uri)).read_checkpoint(0)
    assert str(err.value).startswith(f"table {table.uri}: checkpoint {checkpoint_path(0)} (version 0) cannot be read")


# -- the probe ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("newer", "probes"), [(0, 1), (1, 3), (2, 3), (3, 6), (5, 6)])
def test_the_probe_from_a_known_version_first_looks_at_the_next_one(tmp_path: Path, newer: int, probes: int) -> None:
    """The commonest lookup finds nothing newer than what it knows: one ``exists`` call. A commit found whose
    predecessor the probe did not see costs one more: it must stand on the one before it (not above a gap)."""
    _log(tmp_path, range(10 + newer + 1))
    storage = CountingStorage(str(tmp_path))
    assert TableLog(storage)._probe_forward(10) == 10 + newer
    assert storage.calls == {"exists": probes}


# -- reading a commit ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("read", [TableLog.read_commit, TableLog.read_commit_txn])
def test_a_commit_file_copied_to_another_version_is_reported_naming_table_file_and_version(tmp_path: Path,
                                                                                          read: Any) -> None:
    table = Table.create(str(tmp_path / "t"), "id:int64!", primary_key="id", buckets=1)
    table.upsert(pa.table({"id": [1]}))
    table.upsert(pa.table({"id": [2]}))
    (tmp_path / "t" / commit_path(2)).write_bytes((tmp_path / "t" / commit_path(1)).read_bytes())
    log = TableLog(LocalStorage(table.uri))
    with pytest.raises(CorruptLogError) as err:
        read(log, 2)
    assert str(err.value).startswith(f"table {table.uri}: commit file {commit_path(2)} (version 2) holds version 1, "
                                     "not the version its name gives (copied or renamed?)")
    assert read(log, 3) is None


# -- the checkpoint a replay starts from ------------------------------------------------------------------------------


def _hint(root: Path, version: int) -> None:
    (root / LAST_CHECKPOINT).write_text(json.dumps({"version": version, "files": 0}))


@pytest.mark.parametrize(("version", "checkpoints", "hint", "found", "calls"), [
    # reads the hint (there or not), probes down two intervals (10 each): 50 .. 31, then lists the log
    (50, [25], None, 25, {"read": 1, "exists": 20, "list_dir": 1}),
    # the hint stops the probe early, and names the checkpoint when it is older than the probes reach
    (50, [25, 40], 40, 40, {"read": 1, "exists": 11}),
    (50, [20], 20, 20, {"read": 1, "exists": 21}),
    # a hint whose checkpoint is gone stops the probe all the same: the log is listed
    (50, [35], 40, 35, {"read": 1, "exists": 11, "list_dir": 1}),
    (40, [35], 40, 35, {"read": 1, "exists": 1, "list_dir": 1}),
    (40, [39], 40, 39, {"read": 1, "exists": 1, "list_dir": 1}),  # the listing looks at the version below too
    # a hint newer than the version asked for is no help
    (35, [20, 40], 40, 20, {"read": 1, "exists": 16}),
    # near the start of the log the probe goes down to version 0
    (5, [0], None, 0, {"read": 1, "exists": 6}),
    (3, [], None, None, {"read": 1, "exists": 4, "list_dir": 1}),
])
def test_the_checkpoint_at_or_below_a_version_is_probed_for_then_hinted_then_listed(
        tmp_path: Path, version: int, checkpoints: list[int], hint: int | None, found: int | None,
        calls: dict[str, int]) -> None:
    _log(tmp_path, [], checkpoints)
    if hint is not None:
        _hint(tmp_path, hint)
    storage = CountingStorage(str(tmp_path))
    assert TableLog(storage).checkpoint_at_or_below(version, 10) == found
    assert storage.calls == calls


# -- loading a version ------------------------------------------------------------------------------------------


def _table(root: Path, commits: int, interval: int = 10) -> Table:
    table = Table.create(str(root), "id:int64!", primary_key="id", buckets=1,
                         properties={"log.checkpoint.interval": interval})
    for i in range(commits):
        table.upsert(pa.table({"id": [i]}))
    return table


@pytest.mark.parametrize("version", [4, 7, -1])
def test_a_version_never_written_is_not_found_naming_the_latest(tmp_path: Path, version: int) -> None:
    table = _table(tmp_path / "t", 3)
    with pytest.raises(VersionNotFoundError) as err:
        TableLog(LocalStorage(table.uri)).load_snapshot(version)
    assert str(err.value) == f"table {table.uri} has no version {version}; latest is 3"
    assert (err.value.latest, err.value.oldest_retained) == (3, None)


def test_a_version_before_the_reclaimed_one_is_expired_even_while_its_log_is_there(tmp_path: Path) -> None:
    table = _table(tmp_path / "t", 5)
    log = TableLog(LocalStorage(table.uri))
    log.advance_reclaimed_watermark(3, 0)
    with pytest.raises(VersionNotFoundError) as err:
        log.load_snapshot(2)
    assert str(err.value) == (f"table {table.uri}: version 2 cannot be read, reclamation expired it; "
                              "the oldest retained version is 3")
    assert (err.value.latest, err.value.oldest_retained) == (5, 3)
    assert log.load_snapshot(3).version == 3 and log.load_snapshot(5).version == 5
    log.advance_reclaimed_watermark(7, 0)  # a mark past the latest version: the latest stays readable
    assert log.load_snapshot(5).version == 5 and log.load_snapshot().version == 5


def test_a_version_whose_commits_are_gone_has_expired_naming_the_oldest_left(tmp_path: Path) -> None:
    table = _table(tmp_path / "t", 12, interval=10)  # a checkpoint at 10
    for v in range(10):
        (tmp_path / "t" / commit_path(v)).unlink()
    log = TableLog(LocalStorage(table.uri))
    with pytest.raises(VersionNotFoundError) as err:
        log.load_snapshot(8)
    assert str(err.value) == f"table {table.uri}: version 8 has expired; the oldest retained version is 10"
    assert err.value.oldest_retained == 10 and err.value.latest is None
    assert log.load_snapshot(10).version == 10 and log.load_snapshot(11).version == 11


def test_a_version_past_a_gap_in_its_commits_cannot_be_read_naming_the_oldest_left(tmp_path: Path) -> None:
    table = _table(tmp_path / "t", 12, interval=10)
    (tmp_path / "t" / commit_path(5)).unlink()  # commits 6 .. 9 stand after a gap: only 10 on builds
    log = TableLog(LocalStorage(table.uri))
    with pytest.raises(VersionNotFoundError) as err:
        log.load_snapshot(7)
    assert str(err.value) == (f"table {table.uri}: version 7 cannot be read, its log was reclaimed; "
                              "the oldest retained version is 10")
    assert (err.value.oldest_retained, err.value.latest) == (10, 12)
    starts: list[int] = []
    fresh_start = TableLog._fresh_start

    def counted(self: TableLog, target: int, interval: int) -> Any:
        starts.append(target)
        return fresh_start(self, target, interval)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(TableLog, "_fresh_start", counted)
        with pytest.raises(VersionNotFoundError):
            log.load_snapshot(7)
    assert starts == [7, 7]  # a second fresh start, in case reclamation moved meanwhile; no third


def test_a_corrupt_checkpoint_is_skipped_for_the_commits_and_said_so(tmp_path: Path) -> None:
    table = _table(tmp_path / "t", 12, interval=10)
    (tmp_path / "t" / checkpoint_path(10)).write_bytes(b"not parquet")
    said: list[str] = []
    sink = logger.add(lambda m: said.append(m.record["message"]), level="WARNING")
    try:
        snapshot = TableLog(LocalStorage(table.uri)).load_snapshot(11)
    finally:
        logger.remove(sink)
    assert snapshot.version == 11 and len(snapshot.files) == 11  # one file per upsert
    assert said == [f"table {table.uri}: checkpoint {checkpoint_path(10)} (version 10) cannot be read (Parquet magic "
                    "bytes not found in footer. Either the file is corrupted or this is not a parquet file.); the "
                    "table cannot be read past it. Restore the file from a backup, or see docs/operations.md "
                    "'Recover'; loading from an older checkpoint or the commits instead"]
    (tmp_path / "t" / commit_path(0)).unlink()  # now the corrupt checkpoint was the only way to version 11
    with pytest.raises(CorruptLogError) as err:
        TableLog(LocalStorage(table.uri)).load_snapshot(11)
    assert str(err.value).startswith(f"table {table.uri}: checkpoint {checkpoint_path(10)} (version 10) cannot be read")


def test_a_fresh_start_probes_two_checkpoint_intervals_of_the_state_in_memory_else_of_ten(tmp_path: Path) -> None:
    table = Table.create(str(tmp_path / "t"), "id:int64!", primary_key="id", buckets=1,
                         properties={"log.checkpoint.interval": 50})
    while table.version < 60:
        table.new_transaction("NOOP").commit()
    base = table.snapshot()
    storage = CountingStorage(table.uri)
    assert TableLog(storage).load_snapshot(45).version == 45
    # the latest version (10 calls), then probes 45 .. 26 (two intervals of 10), lists the log for an older
    # checkpoint (the hint, 50, is newer; there is none) and replays from commit 0
    assert storage.calls["list_dir"] == 1 and storage.calls["exists"] == 10 + 20 + 1
    storage.calls.clear()
    assert TableLog(storage).load_snapshot(45, base=base).version == 45
    # the latest version from the state in memory, then probes 45 .. 0 (two intervals of 50)
    assert storage.calls["list_dir"] == 1 and storage.calls["exists"] == 51


def test_a_load_from_a_state_in_memory_starts_from_it(tmp_path: Path) -> None:
    table = _table(tmp_path / "t", 25)  # a checkpoint at 20
    base = table.snapshot()
    storage = CountingStorage(table.uri)
    for version in (None, 25):
        storage.calls.clear()
        storage.reads.clear()
        assert TableLog(storage).load_snapshot(version, base=base) == base
        # the hint, then the probe from the state in memory: no checkpoint and no commit read
        assert storage.reads == [LAST_CHECKPOINT] and storage.calls == {"read": 1, "exists": 4}


def test_the_latest_state_is_looked_up_five_times_while_reclamation_moves_past_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = _table(tmp_path / "t", 2)
    log = TableLog(LocalStorage(table.uri))
    base = log.load_snapshot()
    calls: list[tuple[int | None, Any]] = []
    load = TableLog._load

    def moving(self: TableLog, version: int | None, b: Any) -> Any:
        calls.append((version, b))
        if len(calls) < failures:
            raise VersionNotFoundError("reclaimed meanwhile", latest=2)
        return load(self, version, b)

    monkeypatch.setattr(TableLog, "_load", moving)
    failures = 5
    assert log.load_snapshot(base=base).version == 2
    assert calls == [(None, base)] * 5
    calls.clear()
    failures = 6
    with pytest.raises(VersionNotFoundError):
        log.load_snapshot(base=base)
    assert len(calls) == 5
    calls.clear()
    with pytest.raises(VersionNotFoundError):
        log.load_snapshot(1, base=base)  # a version asked for is looked up once
    assert calls == [(1, base)]


def test_a_table_for_a_newer_reader_is_refused_naming_the_table_once(tmp_path: Path) -> None:
    table = _table(tmp_path / "t", 1)
    newer = Protocol(min_reader_version=READER_VERSION + 1, min_writer_version=WRITER_VERSION + 1)
    info = CommitInfo(operation="UPGRADE PROTOCOL", timestamp=table.snapshot().timestamp + 1, txn_id="newer")
    assert table.log.try_commit(2, [info, newer])  # as a newer maintd would
    with pytest.raises(UnsupportedProtocolError) as err:
        TableLog(LocalStorage(table.uri)).load_snapshot()
    assert str(err.value) == (f"table {table.uri}: the table requires reader protocol version {READER_VERSION + 1}; "
                              f"this maintd reads up to version {READER_VERSION}: upgrade maintd to read this table")
    assert (err.value.required, err.value.supported) == (READER_VERSION + 1, READER_VERSION)
    # a commit file in a newer format: its error names the table already
    (tmp_path / "t" / commit_path(2)).unlink()
    header = {"header": {"format": 99, "version": 2, "actions": 0, "sha256": ""}}
    (tmp_path / "t" / commit_path(2)).write_text(json.dumps(header) + "\n")
    with pytest.raises(UnsupportedProtocolError) as err:
        TableLog(LocalStorage(table.uri)).load_snapshot()
    assert str(err.value) == (f"table {table.uri}: commit file {commit_path(2)} is in format 99; this maintd reads up "
                              "to format 7: upgrade maintd to read this table")


def test_a_log_without_metadata_is_corrupt_naming_the_table(tmp_path: Path) -> None:
    log = TableLog(LocalStorage(str(tmp_path / "t")))
    assert log.try_commit(0, [CommitInfo(operation="CREATE TABLE", timestamp=1, txn_id="t0")])
    with pytest.raises(CorruptLogError) as err:
        log.load_snapshot()
    assert str(err.value) == f"table {log.storage.uri}: log has no metadata or protocol action before this version"


def test_a_replay_from_a_commit_that_now_holds_another_transaction_is_refused(tmp_path: Path) -> None:
    """The commit a replay started from was reclaimed and another writer published into its place: what was read
    after it may stand in removed history."""
    table = _table(tmp_path / "t", 3)
    log = TableLog(LocalStorage(table.uri))
    base = log.load_snapshot(1)
    assert log._replay(SnapshotBuilder.from_snapshot(base), 3) is not None
    assert log.delete_commit(1)
    assert log.try_commit(1, [CommitInfo(operation="WRITE", timestamp=base.timestamp, txn_id="another")])
    assert log._replay(SnapshotBuilder.from_snapshot(base), 3) is None
    assert log._replay(SnapshotBuilder.from_snapshot(base), 1) is not None  # nothing read after it: nothing to doubt


def test_a_replay_from_version_0_checks_commit_0_too(tmp_path: Path) -> None:
    table = _table(tmp_path / "t", 2)
    log = TableLog(LocalStorage(table.uri))
    first = log.load_snapshot(0)
    assert log._replay(SnapshotBuilder.from_snapshot(first), 2) is not None
    assert log.delete_commit(0)  # reclaimed while the commits after it were read
    assert log._replay(SnapshotBuilder.from_snapshot(first), 2) is None
    assert log._replay(SnapshotBuilder(), 0) is None  # a replay from nothing needs commit 0 itself


def test_a_corrupt_checkpoint_is_skipped_for_an_older_one_when_the_first_commits_are_gone(tmp_path: Path) -> None:
    table = _table(tmp_path / "t", 22, interval=10)  # checkpoints at 10 and 20
    (tmp_path / "t" / checkpoint_path(20)).write_bytes(b"not parquet")
    for v in range(10):
        (tmp_path / "t" / commit_path(v)).unlink()
    snapshot = TableLog(LocalStorage(table.uri)).load_snapshot(21)
    assert snapshot.version == 21 and snapshot.base_checkpoint == 10 and len(snapshot.files) == 21
