"""A transaction's parts one at a time: what it records, the commit it writes, and the errors it raises.

The commit loop against real races is tested in test_transaction.py and log/test_conflicts.py; here
each recorded change is committed alone and the commit's actions are read back from the log.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import maintd.table.log.retry as retry
import maintd.table.transaction as transaction
from maintd import (
    CommitRetriesExhaustedError,
    CommitStateUnknownError,
    ConcurrentDeleteDeleteError,
    InvalidInputError,
    MetadataChangedError,
    RetryPolicy,
    Table,
    UnsupportedProtocolError,
)
from maintd.storage import LocalStorage
from maintd.table.log.actions import (
    WRITER_VERSION,
    AddFile,
    CommitInfo,
    Expire,
    Metadata,
    Pin,
    Protocol,
    RemoveFile,
    Txn,
    Unpin,
)
from maintd.table.log.snapshot import Snapshot
from maintd.table.log.tablelog import commit_path
from maintd.table.transaction import StaleRead, Transaction

from .table_helpers import FailingAfterPublishStorage


def partitioned(root: Path, *, protocol: int | None = None) -> Table:
    """A table partitioned by ``ds`` with one file in each of two partitions."""
    properties: dict[str, Any] = {}
    table = Table.create(str(root), "id:int64!,ds:string,name:string", primary_key="id", partition_by="ds",
                         buckets=1, properties=properties)
    table.upsert(pa.table({"id": [1, 2], "ds": ["a", "b"], "name": ["x", "y"]}))
    return table


def committed(table: Table, version: int) -> list[Any]:
    actions = table.log.read_commit(version)
    assert actions is not None
    return actions


def info_of(actions: list[Any]) -> CommitInfo:
    (info,) = [a for a in actions if isinstance(a, CommitInfo)]
    return info


def file_in(snapshot: Snapshot, ds: str) -> AddFile:
    (f,) = [f for f in snapshot.files.values() if f.partition == {"ds": ds}]
    return f


# -- recording ----------------------------------------------------------------------------------------------------


def test_removing_a_file_that_is_not_live_is_refused_naming_it_and_the_version(tmp_path: Path) -> None:
    table = partitioned(tmp_path / "t")
    txn = table.new_transaction("DELETE")
    with pytest.raises(InvalidInputError) as err:
        txn.remove("ds=a/bucket-00000/nothing.parquet")
    assert str(err.value) == "cannot remove ds=a/bucket-00000/nothing.parquet: it is not a live file of version 1"


@pytest.mark.parametrize("data_change", [True, False])
def test_a_removed_file_is_recorded_with_its_partition_bucket_and_size(tmp_path: Path, data_change: bool) -> None:
    table = partitioned(tmp_path / "t")
    snapshot = table.snapshot()
    live = file_in(snapshot, "a")
    txn = table.new_transaction("DELETE")
    txn.remove(live.path, data_change=data_change)
    v = txn.commit()
    (removed,) = [a for a in committed(table, v) if isinstance(a, RemoveFile)]
    assert removed.path == live.path and removed.data_change is data_change
    assert (removed.partition, removed.bucket, removed.bytes) == ({"ds": "a"}, live.bucket, live.bytes)
    assert removed.deletion_time == info_of(committed(table, v)).timestamp


def test_a_transaction_is_a_blind_append_until_it_reads_removes_or_changes_anything(tmp_path: Path) -> None:
    table = partitioned(tmp_path / "t")
    snapshot = table.snapshot()
    now = 10**13
    changes = {
        "remove": lambda t: t.remove(file_in(snapshot, "a")),
        "pin": lambda t: t.pin(Pin(id="p", version=1, created=now, expires=now + 1)),
        "unpin": lambda t: t.unpin("p"),
        "expire": lambda t: t.expire(1),
        "metadata": lambda t: t.set_metadata(snapshot.metadata),
        "protocol": lambda t: t.set_protocol(snapshot.protocol),
        "read files": lambda t: t.read_files([file_in(snapshot, "a").path]),
        "read a partition": lambda t: t.read_partition({"ds": "a"}),
        "read the table": lambda t: t.read_partition(None),
    }
    txn = table.new_transaction("WRITE")
    txn.add(file_in(snapshot, "a"))
    txn.set_app_transaction("ingest", 1)
    assert txn.is_blind_append
    for name, change in changes.items():
        txn = table.new_transaction("WRITE")
        change(txn)
        assert not txn.is_blind_append, name


def test_a_partition_read_is_recorded_as_that_partition_and_none_as_the_whole_table(tmp_path: Path) -> None:
    table = partitioned(tmp_path / "t")
    txn = table.new_transaction("WRITE")
    txn.read_partition({"ds": "a"})
    assert txn._footprint.read_partitions == {(("ds", "a"),)} and not txn._footprint.read_whole_table
    txn.read_partition(None)
    assert txn._footprint.read_whole_table


def test_a_replace_of_some_partitions_removes_their_files_only(tmp_path: Path) -> None:
    table = partitioned(tmp_path / "t")
    snapshot = table.snapshot()
    txn = table.new_transaction("OVERWRITE")
    txn.replace([(("ds", "a"),)])
    v = txn.commit()
    assert [a.path for a in committed(table, v) if isinstance(a, RemoveFile)] == [file_in(snapshot, "a").path]
    assert txn._footprint.read_files == {file_in(snapshot, "a").path} and not txn._footprint.read_whole_table
    whole = table.new_transaction("OVERWRITE")
    whole.replace(None)
    assert whole._footprint.read_whole_table and whole._footprint.replace


def test_an_expiry_without_a_version_expires_everything_before_the_commit(tmp_path: Path) -> None:
    table = partitioned(tmp_path / "t")
    txn = table.new_transaction("PURGE")
    txn.expire(None)
    assert txn._footprint.expires_before == 2**63
    txn.expire(1, 5)
    assert txn._footprint.expires_before == 1


# -- the commit's actions -------------------------------------------------------------------------------------------


def test_a_commit_writes_its_actions_in_order_stamped_with_its_time(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    table = partitioned(tmp_path / "t")
    snapshot = table.snapshot()
    monkeypatch.setattr(transaction, "now_ms", lambda: snapshot.timestamp + 1000)
    txn = table.new_transaction("WRITE")
    pin = Pin(id="p", version=1, created=1, expires=2**50)
    txn.set_protocol(Protocol(min_reader_version=3, min_writer_version=3))  # pins need it
    txn.set_metadata(snapshot.metadata)
    txn.set_app_transaction("ingest", 7)
    txn.pin(pin)
    txn.unpin("q", "done")
    txn.remove(file_in(snapshot, "b"))
    new = file_in(snapshot, "a").model_copy(update={"path": "ds=a/bucket-00000/new.parquet"})
    txn.add(new)
    v = txn.commit(metrics={"rows": 3}, parameters={"mode": "x"})
    ts = snapshot.timestamp + 1000
    actions = committed(table, v)
    assert [type(a) for a in actions] == [CommitInfo, Protocol, Metadata, Txn, Pin, Unpin, RemoveFile, AddFile]
    info = actions[0]
    assert (info.operation, info.timestamp, info.txn_id, info.read_version) == ("WRITE", ts, txn.txn_id, 1)
    assert info.isolation_level == txn.isolation_level and info.is_blind_append is False
    assert info.operation_parameters == {"mode": "x"} and info.metrics == {"rows": 3}
    assert actions[3] == Txn(app_id="ingest", version=7, last_updated=ts)
    assert actions[4] == pin and actions[5] == Unpin(id="q", reason="done")
    assert actions[6].deletion_time == ts
    added = actions[7]
    assert added.modification_time == ts and added.path == new.path
    assert (added.min_version, added.max_version, added.min_commit_time, added.max_commit_time) == (v, v, ts, ts)


def test_a_commit_is_stamped_after_the_version_it_builds_on_whatever_the_clock(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    table = partitioned(tmp_path / "t")
    snapshot = table.snapshot()
    monkeypatch.setattr(transaction, "now_ms", lambda: snapshot.timestamp - 5000)  # a clock behind the last writer's
    v = table.new_transaction("NOOP").commit()
    assert info_of(committed(table, v)).timestamp == snapshot.timestamp + 1


def test_a_file_carrying_its_row_versions_keeps_them(tmp_path: Path) -> None:
    table = partitioned(tmp_path / "t")
    merged = file_in(table.snapshot(), "a").model_copy(
        update={"path": "ds=a/bucket-00000/merged.parquet", "kind": "delta", "level": 1, "min_version": 0,
                "max_version": 1, "min_commit_time": 5, "max_commit_time": 6})
    txn = table.new_transaction("OPTIMIZE")
    txn.add(merged)
    v = txn.commit()
    (added,) = [a for a in committed(table, v) if isinstance(a, AddFile)]
    assert (added.min_version, added.max_version, added.min_commit_time, added.max_commit_time) == (0, 1, 5, 6)


def test_a_clock_reading_is_in_whole_milliseconds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transaction.time, "time", lambda: 1234.5678)
    assert transaction.now_ms() == 1234567


@pytest.mark.parametrize(("before", "timestamp", "expected"), [(1, 77, (1, 77)), (None, None, (2, "ts")),
                                                             (1, None, (1, "ts"))])
def test_an_expiry_is_an_expire_action_on_protocol_3_and_commit_parameters_below(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, before: int | None, timestamp: int | None,
        expected: tuple[int, Any]) -> None:
    table = partitioned(tmp_path / "t")
    snapshot = table.snapshot()
    assert snapshot.protocol.min_writer_version == 2
    monkeypatch.setattr(transaction, "now_ms", lambda: snapshot.timestamp + 1000)
    want = (expected[0], snapshot.timestamp + 1000 if expected[1] == "ts" else expected[1])
    # a table of protocol 2: its readers know no expire action, the commit's parameters carry it
    old = table.new_transaction("EXPIRE")
    old.expire(before, timestamp)
    v = old.commit(parameters={"retain_hours": 1})
    actions = committed(table, v)
    assert not any(isinstance(a, Expire) for a in actions)
    assert info_of(actions).operation_parameters == {"retain_hours": 1, "oldest_retained_version": want[0],
                                                     "retained_timestamp": want[1]}
    # the commit that makes it protocol 3 already writes the action
    monkeypatch.setattr(transaction, "now_ms", lambda: snapshot.timestamp + 1000 - 2)
    txn = table.new_transaction("EXPIRE")
    txn.set_protocol(Protocol(min_reader_version=3, min_writer_version=3))
    txn.expire(before, timestamp)
    v = txn.commit()
    ts = info_of(committed(table, v)).timestamp
    (expire,) = [a for a in committed(table, v) if isinstance(a, Expire)]
    assert (expire.before, expire.timestamp) == (before if before else 3, timestamp if timestamp else ts)
    assert info_of(committed(table, v)).operation_parameters == {}


# -- the commit loop's errors ---------------------------------------------------------------------------------------


def test_a_transaction_commits_once_and_then_returns_its_version(tmp_path: Path) -> None:
    table = partitioned(tmp_path / "t")
    txn = table.new_transaction("NOOP")
    assert txn.commit() == 2 and txn.commit() == 2
    assert txn.attempts == 1 and table.version == 2


def test_a_commit_that_keeps_losing_says_how_often_and_for_how_long(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    table = partitioned(tmp_path / "t")
    monkeypatch.setattr(transaction.time, "sleep", lambda s: None)
    policy = RetryPolicy(max_attempts=3, base_delay=0.001, max_delay=0.001, total_timeout=3600)
    txn = Transaction(table, "UPSERT", retry=policy)
    monkeypatch.setattr(Transaction, "_attempt", lambda self, *a: False)
    with pytest.raises(CommitRetriesExhaustedError) as err:
        txn.commit()
    message = str(err.value)
    assert message.startswith(f"table {table.uri}: UPSERT lost the race for a version 3 times in ")
    assert message.endswith("s; nothing of it landed; retry later, or allow more attempts (RetryPolicy; the commit "
                            "settings of maintd's config)")
    assert txn.attempts == 3


def test_a_storage_that_keeps_failing_ends_the_commit_naming_the_error(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    table = partitioned(tmp_path / "t")
    monkeypatch.setattr(transaction.time, "sleep", lambda s: None)
    policy = RetryPolicy(max_attempts=2, base_delay=0.001, max_delay=0.001, total_timeout=3600)
    txn = Transaction(table, "UPSERT", retry=policy)
    calls: list[int] = []

    def failing() -> int:
        calls.append(1)
        raise OSError("connection reset")

    with pytest.raises(CommitRetriesExhaustedError) as err:
        txn._retrying(failing, transaction.Budget(policy, txn._rng))
    assert str(err.value) == f"table {table.uri}: UPSERT did not land: the storage kept failing (connection reset); " \
                             "retry later"
    assert isinstance(err.value.__cause__, OSError) and len(calls) == 3  # the first try, then one per pause


def test_a_write_prepared_on_a_cached_state_that_lost_to_a_metadata_change_is_prepared_again(
        tmp_path: Path) -> None:
    table = partitioned(tmp_path / "t")
    cached = table.snapshot()
    Table.open(table.uri).set_properties({"acid.data.retain.hours": 48})
    txn = Transaction(table, "UPSERT", read_snapshot=cached, unconfirmed_read=True)
    with pytest.raises(StaleRead) as err:
        txn.commit()
    assert str(err.value) == (f"table {table.uri}: version 1, which UPSERT was prepared on, is not the latest and "
                              "the table's metadata changed since")
    # without the flag, it checks itself against the winner: a conflict, not a signal to prepare it again
    with pytest.raises(MetadataChangedError):
        Transaction(table, "UPSERT", read_snapshot=cached).commit()


def test_a_write_prepared_on_a_cached_state_that_lost_to_a_data_change_lands_next(tmp_path: Path) -> None:
    table = partitioned(tmp_path / "t")
    cached = table.snapshot()
    Table.open(table.uri).upsert(pa.table({"id": [3], "ds": ["a"], "name": ["z"]}))
    txn = Transaction(table, "UPSERT", read_snapshot=cached, unconfirmed_read=True)
    assert txn.commit() == 3 and txn.attempts == 2 and txn.conflicts_checked == 1


def test_what_the_footprint_records_for_the_conflict_checks(tmp_path: Path) -> None:
    table = partitioned(tmp_path / "t")
    snapshot = table.snapshot()
    txn = table.new_transaction("WRITE")
    txn.set_app_transaction("ingest", 3)
    txn.pin(Pin(id="p", version=1, created=1, expires=2))
    txn.unpin("q")
    txn.remove(file_in(snapshot, "a"))  # a data change by default
    assert txn._footprint.app_ids == {"ingest"} and txn._footprint.pins == {1}
    assert txn._unpins == [Unpin(id="q", reason="")]
    assert txn._removes[file_in(snapshot, "a").path].data_change is True


@pytest.mark.parametrize(("adds", "removes", "metadata", "data_change"), [
    (True, None, False, True),  # a write
    (False, False, False, False),  # a maintenance rewrite's removes
    (False, True, False, True),  # a delete
    (False, None, True, True),  # a schema or property change
    (False, None, False, False),  # nothing
])
def test_a_commit_is_a_data_change_if_an_add_or_remove_is_or_the_metadata_changes(
        tmp_path: Path, adds: bool, removes: bool | None, metadata: bool, data_change: bool) -> None:
    table = partitioned(tmp_path / "t")
    snapshot = table.snapshot()
    txn = table.new_transaction("WRITE")
    if adds:
        txn.add(file_in(snapshot, "a").model_copy(update={"path": "ds=a/bucket-00000/new.parquet"}))
    if removes is not None:
        txn.remove(file_in(snapshot, "b"), data_change=removes)
    if metadata:
        txn.set_metadata(snapshot.metadata)
    txn.commit()
    assert txn._footprint.data_change is data_change


def test_a_clean_commit_counts_no_ambiguous_publish(tmp_path: Path) -> None:
    table = partitioned(tmp_path / "t")
    txn = table.new_transaction("NOOP")
    txn.commit()
    assert (txn.attempts, txn.ambiguous, txn.conflicts_checked) == (1, 0, 0)


def test_a_table_for_a_newer_writer_refuses_a_transaction_naming_the_table(tmp_path: Path) -> None:
    table = partitioned(tmp_path / "t")
    snapshot = table.snapshot()
    newer = replace(snapshot, protocol=Protocol(min_reader_version=1, min_writer_version=WRITER_VERSION + 1))
    with pytest.raises(UnsupportedProtocolError) as err:
        Transaction(table, "WRITE", read_snapshot=newer)
    assert str(err.value).startswith(f"table {table.uri} requires writer protocol version {WRITER_VERSION + 1}")




class CountedPolicy(RetryPolicy):
    """Records the attempt number of every backoff."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        object.__setattr__(self, "backoffs", [])

    def delay(self, attempt: int, rng: Any) -> float:
        self.backoffs.append(attempt)  # type: ignore[attr-defined]
        return 0.0


def test_storage_errors_between_attempts_are_retried_within_the_budget(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    table = partitioned(tmp_path / "t")
    policy = CountedPolicy(max_attempts=3, base_delay=0.001, max_delay=0.001, total_timeout=3600)
    txn = Transaction(table, "UPSERT", retry=policy)
    failing = {"snapshot": 1, "check": 1}
    snapshot, check = table.snapshot, Transaction._check_winners

    def flaky_snapshot(*args: Any, **kwargs: Any) -> Snapshot:
        if failing["snapshot"]:
            failing["snapshot"] -= 1
            raise OSError("connection reset")
        return snapshot(*args, **kwargs)

    def flaky_check(self: Transaction, *args: Any) -> Any:
        if failing["check"]:
            failing["check"] -= 1
            raise OSError("connection reset")
        return check(self, *args)

    monkeypatch.setattr(Transaction, "_attempt", lambda self, *a: False)
    monkeypatch.setattr(Transaction, "_check_winners", flaky_check)
    monkeypatch.setattr(table, "snapshot", flaky_snapshot)
    with pytest.raises(CommitRetriesExhaustedError, match="lost the race for a version 3 times"):
        txn.commit()
    # the lost races back off by their attempt (1, 2), the storage errors by the tries counted (2, 3)
    assert policy.backoffs == [1, 2, 3, 2] and failing == {"snapshot": 0, "check": 0}


def test_a_storage_error_checking_a_stale_base_is_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = partitioned(tmp_path / "t")
    txn = table.new_transaction("NOOP")
    read = table.log.read_commit_txn
    failures = [OSError("connection reset")]

    def flaky(version: int) -> str | None:
        if failures:
            raise failures.pop()
        return read(version)

    monkeypatch.setattr(table, "looked_up_within", lambda *a: False)  # the base was looked up long ago
    monkeypatch.setattr(table.log, "read_commit_txn", flaky)
    assert txn.commit() == 2 and not failures


def test_an_attempt_found_landed_among_the_winners_is_the_commit_for_good(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    table = partitioned(tmp_path / "t")
    attempt = Transaction._attempt

    def answer_lost(self: Transaction, *args: Any) -> bool:
        attempt(self, *args)
        return False  # it landed, but this writer was told otherwise

    monkeypatch.setattr(Transaction, "_attempt", answer_lost)
    txn = table.new_transaction("NOOP")
    assert txn.commit() == 2 and txn.commit() == 2
    assert txn.attempts == 1 and table.version == 2


def test_a_replace_that_lost_to_an_append_in_its_partition_removes_the_new_file_too(tmp_path: Path) -> None:
    table = partitioned(tmp_path / "t")
    snapshot = table.snapshot()
    txn = table.new_transaction("OVERWRITE")
    txn.replace([(("ds", "a"),)])
    Table.open(table.uri).upsert(pa.table({"id": [5], "ds": ["a"], "name": ["w"]}))
    appended = set(table.snapshot().files) - set(snapshot.files)
    v = txn.commit()
    assert v == 3 and len(appended) == 1
    removed = {a.path: a for a in committed(table, v) if isinstance(a, RemoveFile)}
    assert set(removed) == {file_in(snapshot, "a").path} | appended
    (path,) = appended
    new = table.snapshot(2).files[path]
    taken = removed[path]
    assert (taken.partition, taken.bucket, taken.bytes, taken.data_change) == ({"ds": "a"}, new.bucket, new.bytes, True)
    assert taken.deletion_time == info_of(committed(table, v)).timestamp


@pytest.mark.parametrize("fresh", [True, False])
def test_a_stale_base_is_read_again_before_the_publish_and_a_fresh_one_is_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh: bool) -> None:
    """A base a lookup found a moment ago is published on; any other base's commit is read first (and read again
    by the landing check after the publish)."""
    table = partitioned(tmp_path / "t")
    txn = table.new_transaction("NOOP")  # its base was found as the latest just now
    asked: list[int] = []
    read = table.log.read_commit_txn
    monkeypatch.setattr(table.log, "read_commit_txn", lambda v: asked.append(v) or read(v))
    if not fresh:
        monkeypatch.setattr(table, "looked_up_within", lambda *a: False)
    assert txn.commit() == 2
    assert asked == ([1] if fresh else [1, 1])


def test_a_writers_own_last_commit_is_no_lookup_its_next_commit_reads_the_base_again(tmp_path: Path) -> None:
    table = partitioned(tmp_path / "t")
    v = table.new_transaction("NOOP").commit()
    assert table.found_latest_within(v, transaction.FRESH_BASE_SECONDS)  # the writer may prepare on it
    assert not table.looked_up_within(v, transaction.LOOKED_UP_SECONDS)  # but reads the commit before publishing


@pytest.mark.parametrize("how", ["gone", "another"])
def test_an_attempt_on_a_stale_base_whose_commit_is_gone_or_another_publishes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    table = partitioned(tmp_path / "t")
    txn = table.new_transaction("NOOP")
    monkeypatch.setattr(table, "looked_up_within", lambda *a: False)
    assert table.log.delete_commit(1)  # reclaimed meanwhile, or the table was dropped and created again
    if how == "another":
        table.log.storage.put_if_absent(commit_path(1), (tmp_path / "t" / commit_path(0)).read_bytes()
                                        .replace(b'"version":0', b'"version":1'))
    assert txn._attempt(2, [], txn.read_snapshot, transaction.Budget(txn.retry, txn._rng)) is False
    assert not table.log.commit_exists(2)


def test_a_publish_whose_answer_was_lost_is_settled_from_the_log_in_one_attempt(tmp_path: Path) -> None:
    partitioned(tmp_path / "t")
    table = Table(FailingAfterPublishStorage(str(tmp_path / "t")))
    txn = table.new_transaction("NOOP")
    assert txn.commit() == 2
    assert (txn.attempts, txn.ambiguous) == (1, 1)


class BrokenStorage(LocalStorage):
    """Fails every read and publish once ``broken`` is set."""

    broken = False

    def read(self, path: str) -> bytes:
        if self.broken:
            raise OSError("connection reset")
        return super().read(path)

    def put_if_absent(self, path: str, data: bytes) -> bool:
        if self.broken:
            raise OSError("connection reset")
        return super().put_if_absent(path, data)


def test_a_commit_whose_landing_cannot_be_told_names_its_operation_and_transaction(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    partitioned(tmp_path / "t")
    storage = BrokenStorage(str(tmp_path / "t"))
    policy = RetryPolicy(max_attempts=2, base_delay=0.001, max_delay=0.001, total_timeout=3600)
    table = Table(storage, retry=policy)
    txn = table.new_transaction("NOOP")
    slept: list[float] = []
    monkeypatch.setattr(retry.time, "sleep", slept.append)
    storage.broken = True
    with pytest.raises(CommitStateUnknownError) as err:
        txn.commit()
    assert str(err.value).startswith(f"table {table.uri}: whether NOOP (transaction {txn.txn_id}) landed at version 2 "
                                     "cannot be known: the storage kept failing (connection reset).")
    assert len(slept) == 2  # the policy's attempts at reading the log back


def test_the_base_of_version_1_is_read_again_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = Table.create(str(tmp_path / "t"), "id:int64!", primary_key="id", buckets=1)
    txn = table.new_transaction("NOOP")
    asked: list[int] = []
    read = table.log.read_commit_txn
    monkeypatch.setattr(table.log, "read_commit_txn", lambda v: asked.append(v) or read(v))
    monkeypatch.setattr(table, "looked_up_within", lambda *a: False)
    assert txn.commit() == 1 and asked == [0, 0]


def test_the_lost_answers_of_every_attempt_are_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = partitioned(tmp_path / "t")
    landed = iter([False, True])

    class AnswerLostTwice:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.ambiguous = 0

        def run(self) -> bool:
            self.ambiguous = 1  # each publish raised; the log was read to settle it
            return next(landed)

    monkeypatch.setattr(transaction, "Attempt", AnswerLostTwice)
    monkeypatch.setattr(transaction.time, "sleep", lambda s: None)
    txn = table.new_transaction("NOOP")
    assert txn.commit() == 2 and (txn.attempts, txn.ambiguous) == (2, 2)


def test_a_commit_says_its_isolation_level_and_whether_it_is_a_blind_append(tmp_path: Path) -> None:
    table = partitioned(tmp_path / "t")
    snapshot = table.snapshot()
    txn = table.new_transaction("WRITE", isolation_level="Serializable")
    txn.add(file_in(snapshot, "a").model_copy(update={"path": "ds=a/bucket-00000/new.parquet"}))
    info = info_of(committed(table, txn.commit()))
    assert (info.isolation_level, info.is_blind_append) == ("Serializable", True)


def _winners_with_a_gap(table: Table, snapshot: Snapshot) -> None:
    """Another writer removes the file of partition ``a`` at version 2 and commits twice more; reclamation then
    deletes the commits up to 2, oldest first (a checkpoint at 4 stands for them)."""
    other = Table.open(table.uri)
    txn = other.new_transaction("DELETE")
    txn.remove(file_in(snapshot, "a"))
    assert txn.commit() == 2
    other.new_transaction("NOOP").commit()
    other.new_transaction("NOOP").commit()
    other.log.write_checkpoint(other.snapshot(4))
    for v in range(3):
        assert other.log.delete_commit(v)


def test_a_winner_whose_commit_is_gone_is_checked_from_the_two_states(tmp_path: Path) -> None:
    table = partitioned(tmp_path / "t")
    snapshot = table.snapshot()
    txn = table.new_transaction("DELETE")
    txn.remove(file_in(snapshot, "a"))
    _winners_with_a_gap(table, snapshot)
    with pytest.raises(ConcurrentDeleteDeleteError):
        txn.commit()
    assert txn.conflicts_checked == 1  # one check of the two states, not one per commit


def test_a_transaction_elsewhere_lands_past_a_winner_whose_commit_is_gone(tmp_path: Path) -> None:
    table = partitioned(tmp_path / "t")
    snapshot = table.snapshot()
    txn = table.new_transaction("DELETE")
    txn.remove(file_in(snapshot, "b"))
    _winners_with_a_gap(table, snapshot)
    assert txn.commit() == 5 and txn.conflicts_checked == 1


def test_every_winner_is_checked_and_counted(tmp_path: Path) -> None:
    table = partitioned(tmp_path / "t")
    txn = table.new_transaction("NOOP")
    other = Table.open(table.uri)
    other.upsert(pa.table({"id": [7], "ds": ["a"], "name": ["w"]}))
    other.upsert(pa.table({"id": [8], "ds": ["b"], "name": ["v"]}))
    assert txn.commit() == 4 and txn.conflicts_checked == 2


def test_winners_after_a_base_commit_published_into_again_are_checked_from_the_two_states(tmp_path: Path) -> None:
    table = partitioned(tmp_path / "t")
    txn = table.new_transaction("NOOP")  # built on version 1
    base = committed(table, 1)
    other = Table.open(table.uri)
    other.new_transaction("NOOP").commit()
    other.new_transaction("NOOP").commit()
    # reclamation deletes the commits before 2; a writer far behind then publishes its own commit 1 into that
    # removed history: the commits after it are all there, but the one the check starts from is another's
    other.log.write_checkpoint(other.snapshot(2))
    for v in range(2):
        assert other.log.delete_commit(v)
    assert other.log.try_commit(1, [info_of(base).model_copy(update={"txn_id": "far-behind"})])
    assert txn.commit() == 4
    assert txn.attempts == 2 and txn.conflicts_checked == 1  # one check of the two states, not one per commit


def test_a_round_checked_from_the_two_states_adds_to_the_checks_of_the_rounds_before(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = partitioned(tmp_path / "t")
    txn = table.new_transaction("NOOP")
    other = Table.open(table.uri)
    other.new_transaction("NOOP").commit()  # the first attempt loses to version 2, checked from its commit
    check = Transaction._check_winners

    def then_more_winners(self: Transaction, checked: Snapshot, newest: Snapshot) -> int | None:
        done = check(self, checked, newest)
        if self.attempts == 1:  # the second attempt loses to 3 and 4, whose commits reclamation then deletes
            other.new_transaction("NOOP").commit()
            other.new_transaction("NOOP").commit()
            other.log.write_checkpoint(other.snapshot(4))
            for v in range(4):
                assert other.log.delete_commit(v)
        return done

    monkeypatch.setattr(Transaction, "_check_winners", then_more_winners)
    assert txn.commit() == 5
    assert txn.attempts == 3 and txn.conflicts_checked == 2


def test_a_replace_that_lost_to_a_rewrite_of_its_partition_removes_the_output_and_not_the_rewritten_file(
        tmp_path: Path) -> None:
    table = partitioned(tmp_path / "t")
    snapshot = table.snapshot()
    old = file_in(snapshot, "a")
    txn = table.new_transaction("OVERWRITE")
    txn.replace([(("ds", "a"),)])
    rewrite = Table.open(table.uri).new_transaction("OPTIMIZE")
    rewrite.remove(old, data_change=False)
    rewrite.add(old.model_copy(update={"path": "ds=a/bucket-00000/rewritten.parquet", "data_change": False}))
    assert rewrite.commit() == 2
    v = txn.commit()
    assert v == 3
    removed = {a.path: a for a in committed(table, v) if isinstance(a, RemoveFile)}
    assert set(removed) == {"ds=a/bucket-00000/rewritten.parquet"}  # the rewritten file is gone already
    assert removed["ds=a/bucket-00000/rewritten.parquet"].data_change
    assert set(table.snapshot().files) == {file_in(snapshot, "b").path}
