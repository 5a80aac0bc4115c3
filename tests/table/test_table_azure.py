"""Tables on Azure Blob Storage (an Azurite server started by the tests): the same protocol as on S3.

Commits are ``If-None-Match: *`` puts through obstore's ``AzureStore``; data files stream through pyarrow's
``AzureFileSystem``; both reach the emulator from the same options (``azure_endpoint``, the account name and
key), or from the standard environment in other processes. Checked end to end: the Table API (writes,
time travel, the change feed, checkpoints), racing committers (one winner per version, every acknowledged
commit at its version), maintenance through ``maintd run`` (in process and in Spark workers, which get the
options with the task), reclamation with an orphan's grace on the blob's last-modified time, PURGE from the
CLI through the environment, and real processes appending, changing properties and rewriting one table.
"""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from maintd import Table, TableNotFoundError, VersionNotFoundError
from maintd.errors import StorageConfigError
from maintd.reclaim import reclaim_table
from maintd.storage import clear_storage_options, configure_storage, storage_for_uri
from maintd.storage.objectstore import ObjectStoreStorage

from .table_helpers import log_versions
from .test_table_processes import appending_while_properties_change_and_maintenance_rewrites

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("ds", pa.string()), ("name", pa.string())])
HOUR = timedelta(hours=1)


def test_table_api_on_azure(azure_root: str) -> None:
    uri = f"{azure_root}/warehouse/db/t"
    table = Table.create(uri, SCHEMA, primary_key="id", partition_by="ds", buckets=2,
                         properties={"log.checkpoint.interval": 3, "changes.prior.rows": "true"})
    assert isinstance(table.storage, ObjectStoreStorage) and table.storage.family == "azure"
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
    assert reopened.log.last_checkpoint_hint() is not None, "checkpoints are written on Azure too"
    assert [h.version for h in reopened.history()][:2] == [reopened.version, reopened.version - 1]
    with pytest.raises(VersionNotFoundError):
        reopened.read(version=reopened.version + 5)


def test_a_missing_table_and_a_missing_container_are_named(azure_root: str, azure_server: Any) -> None:
    with pytest.raises(TableNotFoundError):
        Table.open(f"{azure_root}/nothing/here")
    configure_storage("az://no-such-container", azure_server.options)
    with pytest.raises(Exception) as err:
        Table.create("az://no-such-container/t", SCHEMA, primary_key="id")
    assert "az://no-such-container/t" in str(err.value) and "does not exist" in str(err.value)


def test_plain_http_must_be_allowed_and_the_hint_names_azure(azure_server: Any) -> None:
    container = azure_server.create_container()
    configure_storage(f"az://{container}",
                      {k: v for k, v in azure_server.options.items() if k != "azure_allow_http"})
    try:
        with pytest.raises(StorageConfigError) as err:
            Table.open(f"az://{container}/t")
    finally:
        clear_storage_options()
    assert "AZURE_ALLOW_HTTP=true" in str(err.value) and "azure_allow_http" in str(err.value)
    assert "AWS" not in str(err.value)


def test_racing_committers_on_azure_lose_no_acknowledged_commit(azure_root: str) -> None:
    """Eight threads append to one table at once: each commit is a conditional put of the next version, a
    loser re-reads the log and retries. Every acknowledged version holds its writer's rows, versions are
    dense, and the table reads every row."""
    uri = f"{azure_root}/race/t"
    Table.create(uri, SCHEMA, primary_key="id", buckets=2)
    acked: dict[int, int] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def writer(w: int) -> None:
        table = Table.open(uri)
        start.wait()
        try:
            for i in range(3):
                rid = w * 100 + i
                acked[rid] = table.upsert(pa.Table.from_pylist([{"id": rid, "ds": "x", "name": f"w{w}"}],
                                                               schema=SCHEMA))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    table = Table.open(uri)
    assert sorted(acked.values()) == list(range(1, 25)) == log_versions(uri)[1:]
    for rid, version in acked.items():
        assert rid in set(table.read(version=version).column("id").to_pylist())
        assert rid not in set(table.read(version=version - 1).column("id").to_pylist())
    assert sorted(table.read().column("id").to_pylist()) == sorted(acked)


@pytest.mark.spark
@pytest.mark.parametrize("engine", ["spark", "in-process"])
def test_maintd_run_on_azure(azure_root: str, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                             engine: str) -> None:
    from execution.helpers import SCHEMA as RUN_SCHEMA
    from execution.helpers import Model, batch, sorted_read
    from execution.test_runner import POLICY, _app

    table = Table.create(f"{azure_root}/wh/run-{engine}", RUN_SCHEMA, primary_key="id", buckets=2)
    model = Model()
    rng = np.random.default_rng(3)
    for _ in range(8):
        b = batch(rng, 100, 300)
        table.write_changes(b, "op")
        model.apply(b)
    files_before = len(table.snapshot().files)
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    monkeypatch.setenv("MAINTD_STATE_DIR", str(tmp_path / "state"))
    if engine == "spark":  # the table is small: it would run in process otherwise
        monkeypatch.setenv("MAINTD_SPARK__CONF", json.dumps({"spark.maintd.inProcess.maxInputBytes": "0"}))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(_app(), ["run", table.uri, "--policy", str(policy), "--json"])
    assert result.exit_code == 0, result.output
    [summary] = json.loads(result.stdout)
    assert summary["status"] == "ok" and summary["tasks_committed"] > 0, summary
    assert summary["engine"] == engine
    fresh = Table.open(table.uri)
    assert len(fresh.snapshot().files) < files_before
    assert sorted_read(fresh).equals(model.table())
    assert "Eby8vdM02xNOcqFl" not in result.output, "the account key never shows"


def test_reclamation_and_orphans_on_azure(azure_root: str) -> None:
    from reclaim.reclaim_helpers import T0, build, rows

    uri = f"{azure_root}/wh/reclaimed"
    history = build(uri, [HOUR] * 10, retain_hours=3, interval=4)  # type: ignore[arg-type]
    storage = storage_for_uri(uri)

    def data_files() -> set[str]:
        return {f.path for f in storage.walk() if f.path.endswith(".parquet") and not f.path.startswith("_log/")}

    before = data_files()
    report = reclaim_table(Table.open(uri), now=T0 + 11 * HOUR)
    table = Table.open(uri)
    oldest = table.log.oldest_reconstructible_version()
    assert report.data_files_deleted > 0 and oldest > 0
    assert data_files() < before and data_files() == history.live_from(oldest)
    assert rows(table.read()) == history.reads[history.latest]
    orphan = "ds=a/bucket-00000/delta-L0-" + "c" * 32 + ".parquet"
    storage.put_if_absent(orphan, b"PAR1 left by a writer that crashed before its commit")
    modified = next(f.mtime_ms for f in storage.walk() if f.path == orphan)
    assert abs(modified / 1000 - datetime.now(UTC).timestamp()) < 300, "last-modified as the store reports it"
    now = datetime.now(UTC)
    kept = reclaim_table(Table.open(uri), now=now, orphan_grace=HOUR)
    assert storage.exists(orphan) and kept.orphan_files_deleted == 0, "a fresh blob is within its grace"
    later = reclaim_table(Table.open(uri), now=now + 2 * HOUR, orphan_grace=HOUR)
    assert not storage.exists(orphan) and later.orphan_files_deleted == 1


def test_purge_from_the_cli_reaches_azure_through_the_environment(azure_root: str, azure_server: Any,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from reclaim.reclaim_helpers import build, rows

    from maintd.cli import app

    uri = f"{azure_root}/wh/purged"
    history = build(uri, [HOUR] * 6, retain_hours=168)  # type: ignore[arg-type]
    clear_storage_options()  # the CLI must find the emulator by the standard environment alone
    for k, v in azure_server.env.items():
        monkeypatch.setenv(k, v)
    runner = CliRunner()
    result = runner.invoke(app, ["purge", uri, "--yes"])
    assert result.exit_code == 0, result.output
    table = Table.open(uri)
    assert table.version == history.latest + 1 and table.log.oldest_reconstructible_version() == table.version
    assert rows(table.read()) == history.reads[history.latest]
    gc = runner.invoke(app, ["gc", uri, "--dry-run"])
    assert gc.exit_code == 0, gc.output
    assert "Eby8vdM02xNOcqFl" not in result.output + gc.output


@pytest.mark.slow
def test_processes_append_change_properties_and_rewrite_one_azure_table(azure_root: str, azure_server: Any,
                                                                        tmp_path: Path) -> None:
    appending_while_properties_change_and_maintenance_rewrites(f"{azure_root}/procs/t", tmp_path,
                                                               "WriteSerializable", env=azure_server.env)


@pytest.mark.parametrize("lead", ["", "?"])
def test_a_table_reached_with_a_sas_token_reads_and_writes_its_data_files_with_or_without_a_leading_mark(
        azure_server: Any, lead: str) -> None:
    """The log (obstore) took a SAS token either way; the data files (pyarrow, which appends the token to each
    URL as it is given) failed without the leading ``?``."""
    from maintd.storage import clear_storage_options, configure_storage

    container = azure_server.create_container()
    configure_storage(f"az://{container}", azure_server.sas_options(lead + azure_server.account_sas()))
    try:
        table = Table.create(f"az://{container}/t", "id:int64!,v:string", primary_key="id", buckets=2)
        table.upsert(pa.Table.from_pylist([{"id": i, "v": "x"} for i in range(10)]))
        assert Table.open(f"az://{container}/t").read().num_rows == 10
    finally:
        clear_storage_options()
