"""The commit lock held in the state store: commits to an S3 table whose store refuses conditional put,
opted in with ``commit_lock: state_store``, on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from maintd import Table
from maintd.service.commit_lock import install, lock_key
from maintd.service.store import StateStore
from maintd.storage import configure_storage, install_commit_lock


@pytest.fixture
def locked_bucket(s3_server: Any, store: StateStore) -> Iterator[str]:
    bucket = s3_server.create_bucket()
    configure_storage(f"s3://{bucket}", {**s3_server.options, "aws_conditional_put": "disabled",
                                         "commit_lock": "state_store"})
    install(store, wait_seconds=60)
    yield f"s3://{bucket}"
    install_commit_lock(None)


def test_writers_commit_under_the_state_store_lock_without_conditional_put(locked_bucket: str) -> None:
    uri = f"{locked_bucket}/t"
    Table.create(uri, "id:int64!,w:int64", primary_key="id")
    acked: list[int] = []
    errors: list[BaseException] = []

    def write(w: int) -> None:
        table = Table.open(uri)
        try:
            for i in range(4):
                acked.append(table.upsert(pa.table({"id": [w * 100 + i], "w": [w]})))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    table = Table.open(uri)
    assert sorted(acked) == list(range(1, 17)) and table.version == 16, "every commit at its own version"
    assert table.read().num_rows == 16


def test_lock_keys_are_stable_64_bit_integers() -> None:
    assert lock_key("s3://b/t/_log/x.json") == lock_key("s3://b/t/_log/x.json")
    assert lock_key("a") != lock_key("b") and all(-(2**63) <= lock_key(n) < 2**63 for n in ("a", "b", "c" * 500))


def test_opening_the_state_store_makes_it_the_commit_lock_of_the_daemon_and_maintd_run(tmp_path: Any) -> None:
    from maintd.errors import ConfigError
    from maintd.service.commit_lock import StateStoreCommitLock
    from maintd.service.store import open_store
    from maintd.settings import Settings
    from maintd.storage.lock import commit_lock

    install_commit_lock(None)
    with pytest.raises(ConfigError, match=r"state_store\.url"):
        commit_lock("s3://b/t")
    store = open_store(Settings(store={"url": f"sqlite:///{tmp_path}/state.db"}))
    try:
        lock = commit_lock("s3://b/t")
        assert isinstance(lock, StateStoreCommitLock) and lock.engine is store.engine
    finally:
        store.close()
        install_commit_lock(None)
