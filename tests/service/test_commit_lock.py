"""Commit records in the state store: commits to an S3 table whose store has no conditional put, opted in with
``commit_lock: state_store``, on SQLite and PostgreSQL.

The records replaced an advisory lock that had no fencing: with the holder stopped between its "absent?" check
and its PUT and its database session terminated, both writers were told that their commit landed and the
second overwrote the first. Now the database decides (a unique key), and the file follows with the bytes the
record fixed: a holder that stalls, however long, can only write what every other writer would write for it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import sqlalchemy as sa
from racing import race
from waiting import wait_until

from maintd import Table
from maintd.service.commit_lock import StateStoreCommitRecords, install, record_key
from maintd.service.schema import commit_records
from maintd.service.store import StateStore
from maintd.storage import configure_storage, install_commit_lock
from maintd.storage.lock import Claim

WORKER = Path(__file__).with_name("commit_record_worker.py")


@pytest.fixture
def locked_bucket(s3_server: Any, store: StateStore) -> Iterator[str]:
    bucket = s3_server.create_bucket()
    configure_storage(f"s3://{bucket}", {**s3_server.options, "aws_conditional_put": "disabled",
                                         "commit_lock": "state_store"})
    install(store)
    yield f"s3://{bucket}"
    install_commit_lock(None)


def test_writers_commit_through_the_records_without_conditional_put(locked_bucket: str) -> None:
    uri = f"{locked_bucket}/t"
    Table.create(uri, "id:int64!,w:int64", primary_key="id")
    acked: list[int] = []
    tables = [Table.open(uri) for _ in range(4)]

    def write(w: int) -> None:
        for i in range(4):
            acked.append(tables[w].upsert(pa.table({"id": [w * 100 + i], "w": [w]})))

    race(4, write)
    table = Table.open(uri)
    assert sorted(acked) == list(range(1, 17)) and table.version == 16, "every commit at its own version"
    assert table.read().num_rows == 16


def test_a_claim_is_won_once_and_a_pending_record_hands_its_bytes_to_the_next_claimant(store: StateStore) -> None:
    records = StateStoreCommitRecords(store.engine)
    assert records.claim("s3://b/t/_log/1.json", b"first") == Claim(created=True)
    assert records.claim("s3://b/t/_log/1.json", b"second") == Claim(created=False, pending=b"first")
    records.complete("s3://b/t/_log/1.json")
    assert records.claim("s3://b/t/_log/1.json", b"third") == Claim(created=False)
    with store.engine.connect() as conn:  # a complete record keeps its key only
        row = conn.execute(sa.select(commit_records).where(commit_records.c.key == record_key(
            "s3://b/t/_log/1.json"))).one()
    assert row.complete and row.data is None and row.name == "s3://b/t/_log/1.json"
    long_name = "s3://b/" + "x" * 5000 + "/_log/2.json"  # longer than any key may be: hashed
    assert records.claim(long_name, b"x").created and len(record_key(long_name)) == 64


def test_a_file_published_before_the_table_opted_in_is_never_overwritten(locked_bucket: str, s3_server: Any) -> None:
    from maintd.storage import storage_for_uri

    storage = storage_for_uri(f"{locked_bucket}/t")
    storage.write_atomic("_log/x.json", b"written before the records")
    assert storage.put_if_absent("_log/x.json", b"late") is False
    assert storage.read("_log/x.json") == b"written before the records"


def stopped(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    except (FileNotFoundError, ProcessLookupError):  # reaped between open and read
        return False


def terminate_sessions(url: str, application: str) -> None:
    """End the database sessions of ``application``, as a failover or a network partition would."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> "
                                 "pg_backend_pid() AND application_name = :name"), {"name": application})
    finally:
        engine.dispose()


@pytest.mark.slow
def test_a_holder_stopped_between_its_check_and_its_write_overwrites_no_commit(
        s3_server: Any, store_target: Any, store: StateStore, tmp_path: Path) -> None:
    """Real processes: the holder checks (claims) a version and stops (SIGSTOP) before it writes its commit file,
    and its database sessions are terminated; another writer commits meanwhile; then the holder goes on. Both
    commits are acknowledged, at versions of their own, and both rows are in the table."""
    bucket = s3_server.create_bucket()
    uri = f"s3://{bucket}/t"
    options = {**s3_server.options, "aws_conditional_put": "disabled", "commit_lock": "state_store"}
    configure_storage(uri, options)
    install(store)
    Table.create(uri, "id:int64!,w:int64", primary_key="id")
    holder_url = store_target.url
    if store_target.backend == "postgresql":  # named, so that its sessions can be found and terminated
        holder_url += ("&" if "?" in holder_url else "?") + "application_name=maintd-holder"

    def writer(url: str, row: int, stop: Path | None) -> subprocess.Popen[str]:
        return subprocess.Popen([sys.executable, str(WORKER), uri, json.dumps(options), url,
                                 store_target.db_schema or "-", str(row), str(stop or "-")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    holder = writer(holder_url, 1, tmp_path / "stopped")
    try:
        def holder_stopped() -> bool:
            assert holder.poll() is None, holder.communicate()
            return stopped(holder.pid)

        wait_until(holder_stopped, "the holder to stop before its write")
        if store_target.backend == "postgresql":
            terminate_sessions(store_target.url, "maintd-holder")
        other = writer(store_target.url, 2, None)
        out, err = other.communicate(timeout=120)
        assert other.returncode == 0, err
        other_version = int(out.split()[-1])
    finally:
        holder.send_signal(signal.SIGCONT)
    out, err = holder.communicate(timeout=120)
    assert holder.returncode == 0, err
    holder_version = int(out.split()[-1])
    assert {holder_version, other_version} == {1, 2}, (holder_version, other_version)
    table = Table.open(uri)
    assert table.version == 2 and sorted(r["id"] for r in table.read().to_pylist()) == [1, 2]


def test_opening_the_state_store_makes_it_the_commit_records_of_the_daemon_and_maintd_run(tmp_path: Any) -> None:
    from maintd.errors import ConfigError
    from maintd.service.store import open_store
    from maintd.settings import Settings
    from maintd.storage.lock import commit_lock

    install_commit_lock(None)
    with pytest.raises(ConfigError, match=r"state_store\.url"):
        commit_lock("s3://b/t")
    store = open_store(Settings(store={"url": f"sqlite:///{tmp_path}/state.db"}))
    try:
        records = commit_lock("s3://b/t")
        assert isinstance(records, StateStoreCommitRecords) and records.engine is store.engine
    finally:
        store.close()
        install_commit_lock(None)
