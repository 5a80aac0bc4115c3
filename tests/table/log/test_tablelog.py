"""The log: commit names, latest-version lookup on each kind of storage, checkpoints.

Lookup cost is shown by counting storage calls, not by timing (bench/bench_format.py times it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from maintd import Table, TableNotFoundError
from maintd.table.log.snapshot import Snapshot, SnapshotBuilder
from maintd.table.log.tablelog import (
    LAST_CHECKPOINT,
    U64_MAX,
    TableLog,
    checkpoint_path,
    commit_path,
    parse_log_name,
)

from ..table_helpers import CountingStorage, OrderedStorage, groups, rewrite_bucket


def test_commit_names_count_down_from_u64_max_in_twenty_digits() -> None:
    assert commit_path(0) == "_log/18446744073709551615.json"
    assert commit_path(1) == "_log/18446744073709551614.json"
    assert commit_path(12345) == f"_log/{U64_MAX - 12345:020d}.json"
    assert commit_path(U64_MAX) == "_log/00000000000000000000.json"
    assert checkpoint_path(10) == "_log/18446744073709551605.checkpoint.parquet"


def test_a_lexical_listing_returns_the_newest_commit_first() -> None:
    versions = [0, 1, 9, 10, 99, 100, 1000, 12345, 10**9]
    names = sorted(commit_path(v) for v in versions)
    assert [parse_log_name(n) for n in names] == [("commit", v) for v in sorted(versions, reverse=True)]
    # a checkpoint sorts right before the commit of the same version, after every newer commit
    mixed = sorted([commit_path(11), checkpoint_path(10), commit_path(10), commit_path(9)])
    assert mixed == [commit_path(11), checkpoint_path(10), commit_path(10), commit_path(9)]


@pytest.mark.parametrize("name", ["_last_checkpoint", ".tmp-0123abcd", "123.json", "1844674407370955161x.json",
                                  "18446744073709551615.json.tmp", "18446744073709551615.parquet"])
def test_names_that_are_not_log_files_are_ignored(name: str) -> None:
    assert parse_log_name(f"_log/{name}") is None


def _table_with_versions(root: Path, versions: int, interval: int = 10) -> Table:
    table = Table.create(str(root), "id:int64!,name:string", primary_key="id", buckets=2,
                         properties={"log.checkpoint.interval": interval})
    table.upsert(pa.table({"id": [1, 2], "name": ["a", "b"]}))
    while table.version < versions - 1:
        table.new_transaction("NOOP").commit()
    return table


def test_local_lookup_probes_forward_from_the_checkpoint_hint_in_a_bounded_number_of_calls(tmp_path: Path) -> None:
    costs = []
    for n in (25, 205):
        _table_with_versions(tmp_path / str(n), n)
        storage = CountingStorage(str(tmp_path / str(n)))
        assert TableLog(storage).latest_version() == n - 1
        assert "list_dir" not in storage.calls, "a local lookup must not list the log"
        costs.append(storage.calls)
    assert costs[0] == costs[1], "the lookup must cost the same however long the history"
    assert costs[1]["exists"] <= 10 and costs[1]["read"] == 1  # the hint, then a galloping probe


def test_a_store_listing_in_lexical_order_reads_only_the_first_entries(tmp_path: Path) -> None:
    _table_with_versions(tmp_path / "t", 205)
    (tmp_path / "t" / "_log" / ".tmp-leftover").write_bytes(b"partial")  # sorts before every log name
    storage = OrderedStorage(str(tmp_path / "t"))
    assert TableLog(storage).latest_version() == 204
    assert storage.calls == {"list_first": 1}
    assert storage.entries_listed <= 8
    assert Table(storage).read().num_rows == 2


def test_lookup_without_a_hint_still_finds_the_latest_version(tmp_path: Path) -> None:
    _table_with_versions(tmp_path / "t", 37)
    (tmp_path / "t" / LAST_CHECKPOINT).unlink()
    assert TableLog(CountingStorage(str(tmp_path / "t"))).latest_version() == 36
    (tmp_path / "t" / LAST_CHECKPOINT).write_text("{not json")  # a damaged hint is only a hint
    assert TableLog(CountingStorage(str(tmp_path / "t"))).latest_version() == 36
    assert Table.open(str(tmp_path / "t")).version == 36


def test_an_empty_location_has_no_latest_version(tmp_path: Path) -> None:
    with pytest.raises(TableNotFoundError, match="no commits"):
        TableLog(CountingStorage(str(tmp_path / "nothing"))).latest_version()
    with pytest.raises(TableNotFoundError, match="no commits"):
        TableLog(OrderedStorage(str(tmp_path / "nothing"))).latest_version()


# -- checkpoints ---------------------------------------------------------------------------------------------------


def _busy_table(root: Path, interval: int) -> Table:
    """A table whose history has every kind of action: adds, removes (tombstones), metadata, app txns."""
    table = Table.create(str(root), "id:int64!,ds:string,name:string", primary_key="id", partition_by="ds",
                         buckets=2, properties={"log.checkpoint.interval": interval})
    for i in range(4):
        rows = [{"id": k, "ds": "ab"[k % 2], "name": f"r{i}-{k}"} for k in range(i, i + 6)]
        table.upsert(pa.Table.from_pylist(rows), app_id="ingest", app_version=i)
    table.delete(pa.table({"id": [1, 2], "ds": ["b", "a"]}))
    table.overwrite(pa.table({"id": [40], "ds": ["a"], "name": ["x"]}), partition={"ds": "a"})
    table.set_properties({"acid.data.retain.hours": 48})
    snap = table.snapshot()
    prepared = rewrite_bucket(table, snap, max(groups(snap), key=lambda g: len(snap.by_bucket()[g])), "compact")
    assert prepared is not None
    prepared.commit()
    table.upsert(pa.table({"id": [41], "ds": ["b"], "name": ["y"]}))
    return table


def replay_from_zero(log: TableLog, version: int) -> Snapshot:
    builder = SnapshotBuilder()
    for v in range(version + 1):
        actions = log.read_commit(v)
        assert actions is not None
        builder.apply(v, actions)
    return builder.build()


def _state(s: Snapshot) -> tuple[object, ...]:
    return (s.version, s.timestamp, s.protocol, s.metadata, dict(s.files), dict(s.tombstones), dict(s.app_txns))


def test_checkpoints_are_written_every_interval_with_the_hint_on_the_newest(tmp_path: Path) -> None:
    table = _busy_table(tmp_path / "t", interval=3)
    latest = table.version
    expected = [v for v in range(1, latest + 1) if v % 3 == 0]
    assert [v for v in range(latest + 1) if table.log.checkpoint_exists(v)] == expected
    assert table.log.last_checkpoint_hint() == expected[-1]


def test_state_from_a_checkpoint_plus_the_tail_equals_a_full_replay(tmp_path: Path) -> None:
    table = _busy_table(tmp_path / "t", interval=3)
    log = TableLog(CountingStorage(table.uri))
    for v in range(table.version + 1):
        loaded = log.load_snapshot(v)
        assert _state(loaded) == _state(replay_from_zero(table.log, v)), f"version {v}"
    assert table.snapshot().tombstones, "the history removed files: the state must keep their tombstones"


def test_a_snapshot_load_reads_the_checkpoint_the_commits_after_it_and_once_more_its_anchor(tmp_path: Path) -> None:
    """The commit the replay started from is read again after the replay: were it gone, the commits read
    might stand in history reclamation removed (docs/format.md, "Snapshots and checkpoints")."""
    table = _busy_table(tmp_path / "t", interval=3)
    while table.version % 3 != 2:
        table.new_transaction("NOOP").commit()
    storage = CountingStorage(table.uri)
    latest = table.version
    TableLog(storage).load_snapshot()
    checkpoint = table.log.last_checkpoint_hint()
    assert checkpoint is not None and latest > checkpoint
    assert [p for p in storage.reads if p != LAST_CHECKPOINT] == [
        checkpoint_path(checkpoint), *(commit_path(v) for v in range(checkpoint + 1, latest + 1)),
        commit_path(checkpoint)]
    assert "list_dir" not in storage.calls


def test_a_missing_checkpoint_falls_back_to_an_older_one(tmp_path: Path) -> None:
    table = _busy_table(tmp_path / "t", interval=3)
    newest = table.log.last_checkpoint_hint()
    assert newest is not None
    (tmp_path / "t" / checkpoint_path(newest)).unlink()
    reopened = Table.open(table.uri)
    assert _state(reopened.snapshot()) == _state(replay_from_zero(table.log, table.version))


def test_listing_skips_a_file_removed_while_the_directory_is_read(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer's temp file can vanish between the directory read and its stat; the listing goes on."""
    from maintd.storage import local

    (tmp_path / "_log").mkdir()
    for name in ("a.json", ".tmp-gone"):
        (tmp_path / "_log" / name).write_bytes(b"x")
    real = os.scandir

    class Vanishing:
        def __init__(self, entry: os.DirEntry[str]) -> None:
            self.entry, self.name = entry, entry.name

        def is_file(self, *, follow_symlinks: bool = True) -> bool:
            return self.entry.is_file(follow_symlinks=follow_symlinks)

        def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
            if self.name == ".tmp-gone":
                raise FileNotFoundError(self.name)
            return self.entry.stat(follow_symlinks=follow_symlinks)

    class Scan(list[Vanishing]):
        def __enter__(self) -> Scan:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

    def scandir(path: Any) -> Scan:
        with real(path) as entries:
            return Scan(Vanishing(e) for e in entries)

    monkeypatch.setattr(local.os, "scandir", scandir)
    assert [f.path for f in local.LocalStorage(str(tmp_path)).list_dir("_log")] == ["_log/a.json"]
