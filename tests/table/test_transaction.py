"""Commit retries: backoff with jitter, bounded by attempts and total time; a lost answer is a success.

Also exactly-once writers (``app_id`` / ``app_version``).
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pyarrow as pa
import pytest

import maintd.table.transaction as transaction
from maintd import CommitRetriesExhaustedError, RetryPolicy, Table

from .table_helpers import (
    FailingAfterPublishStorage,
    LostAnswerStorage,
    RefusingStorage,
    data_files_on_disk,
    log_versions,
)


def _create(root: Path) -> Table:
    table = Table.create(str(root), "id:int64!,name:string", primary_key="id", buckets=2)
    table.upsert(pa.table({"id": [1], "name": ["a"]}))
    return table


DATA = pa.table({"id": [2, 3], "name": ["b", "c"]})


def test_the_backoff_grows_exponentially_with_full_jitter_up_to_the_maximum() -> None:
    policy = RetryPolicy(max_attempts=20, base_delay=0.01, max_delay=0.3, total_timeout=10)
    rng = random.Random(7)
    for attempt in range(1, 12):
        cap = min(0.3, 0.01 * 2**attempt)
        delays = [policy.delay(attempt, rng) for _ in range(200)]
        assert all(0 <= d <= cap for d in delays)
        assert max(delays) > 0.8 * cap and len(set(delays)) == len(delays), "delays are jittered over the range"


def test_a_commit_gives_up_after_the_attempts_of_the_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _create(tmp_path / "t")
    files = data_files_on_disk(tmp_path / "t")
    slept: list[float] = []
    monkeypatch.setattr(transaction.time, "sleep", slept.append)
    storage = RefusingStorage(str(tmp_path / "t"))
    policy = RetryPolicy(max_attempts=5, base_delay=0.01, max_delay=0.04, total_timeout=60)
    with pytest.raises(CommitRetriesExhaustedError, match="lost the race for a version 5 times") as caught:
        Table(storage, retry=policy).upsert(DATA)
    assert caught.value.retryable
    assert storage.refused == 5 and len(slept) == 4
    assert all(0 <= d <= min(0.04, 0.01 * 2**a) for a, d in enumerate(slept, 1))
    assert log_versions(tmp_path / "t") == [0, 1], "nothing was committed"
    assert data_files_on_disk(tmp_path / "t") == files, "the data files of a commit that did not land are deleted"


def test_a_commit_gives_up_after_the_total_time_of_the_policy(tmp_path: Path) -> None:
    _create(tmp_path / "t")
    storage = RefusingStorage(str(tmp_path / "t"))
    policy = RetryPolicy(max_attempts=1_000_000, base_delay=0.005, max_delay=0.01, total_timeout=0.2)
    started = time.monotonic()
    with pytest.raises(CommitRetriesExhaustedError):
        Table(storage, retry=policy).upsert(DATA)
    elapsed = time.monotonic() - started
    assert 0.2 <= elapsed < 60, "bounded by the total time, not by the attempts"
    assert storage.refused < 1_000_000


def test_finding_its_own_transaction_id_in_the_log_means_the_commit_landed(tmp_path: Path) -> None:
    _create(tmp_path / "t")
    storage = LostAnswerStorage(str(tmp_path / "t"), lose=1)  # the commit lands, its answer is lost
    table = Table(storage)
    assert table.upsert(DATA) == 2
    assert log_versions(tmp_path / "t") == [0, 1, 2], "the retry must not commit the same data twice"
    assert sorted(table.read().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "name": "a"}, {"id": 2, "name": "b"}, {"id": 3, "name": "c"}]
    assert data_files_on_disk(tmp_path / "t") == set(table.snapshot().files)


def test_a_publish_that_raised_after_it_applied_is_found_in_the_log_and_acknowledged(tmp_path: Path) -> None:
    _create(tmp_path / "t")
    writer = Table(FailingAfterPublishStorage(str(tmp_path / "t")))
    assert writer.upsert(DATA) == 2, "the commit landed although publishing it raised: it is acknowledged"
    table = Table.open(str(tmp_path / "t"))
    assert table.version == 2 and log_versions(tmp_path / "t") == [0, 1, 2]
    assert data_files_on_disk(tmp_path / "t") == set(table.snapshot().files)
    assert table.read().num_rows == 3


def test_a_commit_that_lost_a_race_to_a_compatible_commit_lands_at_the_next_version(tmp_path: Path) -> None:
    _create(tmp_path / "t")
    storage = RefusingStorage(str(tmp_path / "t"), allow=0)
    other = Table.open(str(tmp_path / "t"))
    txn = Table(storage).new_transaction("NOOP")
    other.upsert(pa.table({"id": [5], "name": ["e"]}))  # takes version 2 while txn has read version 1
    storage.allow = 10
    assert txn.commit() == 3
    assert txn.attempts == 2 and txn.conflicts_checked == 1


def test_an_exactly_once_writer_skips_an_app_version_already_committed(tmp_path: Path) -> None:
    table = _create(tmp_path / "t")
    v = table.upsert(DATA, app_id="ingest-7", app_version=3)
    files = data_files_on_disk(tmp_path / "t")
    assert table.upsert(pa.table({"id": [2], "name": ["again"]}), app_id="ingest-7", app_version=3) == v
    assert table.upsert(pa.table({"id": [2], "name": ["older"]}), app_id="ingest-7", app_version=2) == v
    assert Table.open(str(tmp_path / "t")).version == v and data_files_on_disk(tmp_path / "t") == files
    assert table.upsert(pa.table({"id": [2], "name": ["next"]}), app_id="ingest-7", app_version=4) == v + 1
    assert Table.open(str(tmp_path / "t")).snapshot().app_txns == {"ingest-7": 4}
    assert {r["id"]: r["name"] for r in table.read().to_pylist()}[2] == "next"


def test_an_app_id_needs_an_app_version(tmp_path: Path) -> None:
    from maintd import InvalidInputError

    table = _create(tmp_path / "t")
    with pytest.raises(InvalidInputError, match="app_id 'ingest' needs an app_version"):
        table.upsert(DATA, app_id="ingest")
    assert table.version == 1
