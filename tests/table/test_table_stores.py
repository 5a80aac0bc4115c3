"""The Table API on every store: local disk, S3 (a moto server) and Azure Blob Storage (an Azurite server).

On object stores commits are conditional puts (``If-None-Match: *``) through obstore and data files stream
through pyarrow's filesystems, both reaching the test server from the options registered in this process, or
from the standard environment in other processes. Checked on each store: writes, time travel, the change feed
and checkpoints; a missing table (and bucket or container) named; racing committers (one winner per version,
every acknowledged commit at its version); real processes appending, changing properties and rewriting one
table. What only one store does is in test_table_s3.py and test_table_azure.py.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from racing import race
from stores import TableStore

from maintd import Table, TableNotFoundError, VersionNotFoundError
from maintd.storage import configure_storage
from maintd.storage.objectstore import ObjectStoreStorage

from .table_helpers import log_versions
from .test_table_processes import appending_while_properties_change_and_maintenance_rewrites

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("ds", pa.string()), ("name", pa.string())])


def test_the_table_api_on_a_store(table_store: TableStore) -> None:
    uri = f"{table_store.root}/warehouse/db/t"
    table = Table.create(uri, SCHEMA, primary_key="id", partition_by="ds", buckets=2,
                         properties={"log.checkpoint.interval": 3, "changes.prior.rows": "true"})
    if table_store.name != "local":
        assert isinstance(table.storage, ObjectStoreStorage) and table.storage.family == table_store.name
    if table_store.name == "s3":
        assert table.storage.lists_in_order
    rows = [{"id": i, "ds": "a" if i % 2 else "b", "name": f"v{i}"} for i in range(20)]
    v1 = table.upsert(pa.Table.from_pylist(rows, schema=SCHEMA))
    v2 = table.upsert(pa.Table.from_pylist([{"id": 1, "ds": "a", "name": "changed"}], schema=SCHEMA))
    v3 = table.delete(pa.Table.from_pylist([{"id": 2, "ds": "b"}], schema=pa.schema([SCHEMA[0], SCHEMA[1]])))
    for i in range(4):
        table.upsert(pa.Table.from_pylist([{"id": 100 + i, "ds": "a", "name": "late"}], schema=SCHEMA))
    reopened = Table.open(uri)
    assert reopened.version == v3 + 4 == log_versions(uri)[-1]
    got = {r["id"]: r["name"] for r in reopened.read().to_pylist()}
    assert got[1] == "changed" and 2 not in got and len(got) == 19 + 4
    assert {r["id"]: r["name"] for r in reopened.read(version=v1).to_pylist()}[1] == "v1"
    assert reopened.read(version=v2).num_rows == 20
    assert sorted(r["id"] for r in reopened.changes(v1, v3).to_pylist()) == [1, 2]
    assert reopened.changes(v1).sort_by("id").equals(reopened.full_changes(v1).sort_by("id"))
    assert reopened.log.last_checkpoint_hint() is not None, f"checkpoints are written on {table_store.name} too"
    assert any(f.path.endswith(".checkpoint.parquet") for f in reopened.storage.list_dir("_log"))
    assert [h.version for h in reopened.history()][:2] == [reopened.version, reopened.version - 1]
    with pytest.raises(VersionNotFoundError):
        reopened.read(version=reopened.version + 5)


def test_a_missing_table_is_not_found(table_store: TableStore) -> None:
    with pytest.raises(TableNotFoundError):
        Table.open(f"{table_store.root}/nothing/here")


@pytest.mark.stores("s3", "azure")
def test_a_missing_bucket_or_container_is_named(table_store: TableStore) -> None:
    scheme = table_store.root.split("://", 1)[0]
    configure_storage(f"{scheme}://no-such-place", table_store.options)
    with pytest.raises(Exception) as err:
        Table.create(f"{scheme}://no-such-place/t", SCHEMA, primary_key="id")
    assert f"{scheme}://no-such-place/t" in str(err.value) and "does not exist" in str(err.value)


@pytest.mark.slow
def test_racing_committers_lose_no_acknowledged_commit(table_store: TableStore) -> None:
    """Eight threads append to one table at once: each commit is a conditional put of the next version, a
    loser re-reads the log and retries. Every acknowledged version holds its writer's rows, versions are
    dense, and the table reads every row."""
    uri = f"{table_store.root}/race/t"
    Table.create(uri, SCHEMA, primary_key="id", buckets=2)
    acked: dict[int, int] = {}
    tables = [Table.open(uri) for _ in range(8)]

    def writer(w: int) -> None:
        for i in range(3):
            rid = w * 100 + i
            acked[rid] = tables[w].upsert(pa.Table.from_pylist([{"id": rid, "ds": "x", "name": f"w{w}"}],
                                                               schema=SCHEMA))

    race(8, writer)
    table = Table.open(uri)
    assert sorted(acked.values()) == list(range(1, 25)) == log_versions(uri)[1:]
    for rid, version in acked.items():
        assert rid in set(table.read(version=version).column("id").to_pylist())
        assert rid not in set(table.read(version=version - 1).column("id").to_pylist())
    assert sorted(table.read().column("id").to_pylist()) == sorted(acked)


@pytest.mark.slow
@pytest.mark.stores("s3", "azure")  # on local disk: test_table_processes.py, at every isolation level
def test_processes_append_change_properties_and_rewrite_one_table(table_store: TableStore, tmp_path: Path) -> None:
    appending_while_properties_change_and_maintenance_rewrites(f"{table_store.root}/procs/t", tmp_path,
                                                               "WriteSerializable", env=table_store.env)
